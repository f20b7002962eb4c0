#!/usr/bin/env python
"""Fine-tune several pretrained encoders together (concat / DME / CDME fusion) on any registered task (GLUE, TREC,
SICK, CoNLL-2003, WNUT-17, MIT, the original project's corpora) or your own files, with the stock Trainer. Modelled on
transformers' examples/pytorch/text-classification/run_glue.py.

    python run_glue_multi.py configs/glue/cola.yaml [--any_argument value ...]

The first argument may be a YAML or JSON file holding any of the arguments below; command-line arguments override it.
Without --do_train/--do_eval/--do_predict a run trains and evaluates. A run writes into an empty (or new)
--output_dir; --overwrite_output_dir true starts afresh in a used one, --resume_from_checkpoint true continues it from
its newest complete checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field

import datasets
import numpy as np
import torch
from accelerate import PartialState
from transformers import EarlyStoppingCallback, HfArgumentParser, TrainingArguments, set_seed

from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderTokenizer,
    MultiEncoderTrainer,
    create_multiencoder_optimizer,
    freeze_encoders,
)
from hf_multiencoder.data.corpus import build_corpus, task_texts
from hf_multiencoder.data.feature_cache import CachedFeaturesCollator, add_member_features
from hf_multiencoder.data.loading import keep_length_column, load_task, load_texts, tokenize_task
from hf_multiencoder.data.tasks import TASKS, TaskSpec, import_task_modules
from hf_multiencoder.models.modeling_multiencoder import word_tags
from hf_multiencoder.pretraining.adaptation import adapt_members, default_training_arguments
from hf_multiencoder.training.arguments import (
    ModelArguments,
    build_tokenizer,
    check_max_seq_length,
    check_run_limits,
    config_file_argv,
    default_to_train_and_eval,
    from_encoders_kwargs,
    metric_for_best_model_given,
)
from hf_multiencoder.training.fast_path import apply_fast_path, given_options
from hf_multiencoder.training.lora import get_multiencoder_lora_model, merge_lora_after_training
from hf_multiencoder.training.metrics import build_compute_metrics, fusion_weights_from_metrics
from hf_multiencoder.training.model_card import MultiEncoderModelCardData, save_seeds_card
from hf_multiencoder.training.prediction import (
    RESULT_FILES,
    load_model_for_prediction,
    predict_records,
    write_predictions,
)
from hf_multiencoder.training.results import format_summary, mean_by_key, summarize
from hf_multiencoder.training.runs import (
    prepare_runs,
    setup_run,
    start_seed_run,
    train_and_save,
)

logger = logging.getLogger(__name__)

# How many examples of the task's own validation data the fusion report and the model card show.
NUM_EXAMPLES = 3


@dataclass
class DataTrainingArguments:
    task_module: list[str] | None = field(
        default=None, metadata={"help": "Python module(s) (dotted names or .py files) imported first: tasks they "
                                        "add with register_task(...) can be given as --task_name."}
    )
    task_name: str | None = field(default=None, metadata={"help": f"One of: {', '.join(TASKS)}."})
    task_type: str | None = field(
        default=None, metadata={"help": "For your own files: sequence (default) or token (CoNLL files)."}
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder holding glue/, trec/, sick/, conll2003/, wnut17/ (default "
                                        "../shared/data or $HF_MULTIENCODER_DATA)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "CSV/TSV/JSON (or CoNLL) training file."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation file, same format."})
    test_file: str | None = field(default=None, metadata={"help": "Test file, same format."})
    label_column_name: str | None = field(
        default=None, metadata={"help": "Label column of your own files (default: label)."}
    )
    text_column_names: list[str] | None = field(
        default=None, metadata={"help": "Text column(s) of your own files: one, or two for a sentence pair (default: "
                                        "sentence1/sentence2, else the first two non-label columns)."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Maximum subword length, per member."})
    pad_to_max_length: bool = field(default=False, metadata={"help": "Pad to max_seq_length (else per batch)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the validation set(s)."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Truncate the test set."})
    from_hub: bool | None = field(default=None, metadata={"help": "Load the task from the Hub with `datasets`."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start afresh in a non-empty --output_dir (its old checkpoints are deleted). "
                                         "Without it a non-empty output folder is an error, unless resuming "
                                         "(--resume_from_checkpoint true or a checkpoint folder)."}
    )
    seeds: list[int] | None = field(
        default=None, metadata={"help": "Train once per seed and write a results table (median, mean, std)."}
    )
    early_stopping_patience: int | None = field(default=None, metadata={"help": "Evaluations without gain to stop."})
    fusion_examples: list[str] | None = field(
        default=None, metadata={"help": "Sentences whose fusion weights are reported after evaluation (default: the "
                                        "first 3 of the task's validation data)."}
    )

    def __post_init__(self):
        import_task_modules(self.task_module)
        if self.task_name is None and self.train_file is None and self.validation_file is None \
                and self.test_file is None:
            raise ValueError("Give a `task_name` or your own `train_file`/`validation_file` (or, to predict with a "
                             "saved model, `--model_name_or_path FOLDER --test_file FILE --do_predict`).")
        check_max_seq_length(self.max_seq_length)
        check_run_limits(self)
        if self.task_name is not None:
            ignored = [f"--{name}" for name in ("train_file", "validation_file", "test_file", "task_type",
                                                "text_column_names", "label_column_name") if getattr(self, name)]
            if ignored:
                raise ValueError(f"{', '.join(ignored)} describe(s) your own files, but --task_name "
                                 f"{self.task_name} reads the registered task's: give either --task_name or your "
                                 f"files (with their options), not both.")
            self.task_name = self.task_name.lower()
            if self.task_name not in TASKS:
                raise ValueError(f"Unknown task {self.task_name!r}; known tasks: {', '.join(TASKS)}.")
            self.task_name = TASKS[self.task_name].name
        if self.task_type not in (None, "sequence", "token"):
            raise ValueError(f"`task_type` must be 'sequence' or 'token', got {self.task_type!r}.")


def parse_args(argv: list[str] | None = None):
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments), description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    argv = config_file_argv(parser, list(sys.argv[1:] if argv is None else argv))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    if model_args.frozen_feature_cache and not model_args.freeze_encoders:
        raise ValueError("--frozen_feature_cache stores the vectors of frozen members: give --freeze_encoders too "
                         "(the members that stay frozen), or leave it out.")
    default_to_train_and_eval(training_args, argv)
    if predicting_only(training_args):
        check_predict_only(model_args, data_args, argv)
        return model_args, data_args, training_args
    if training_args.do_train and data_args.task_name is None and data_args.train_file is None:
        raise ValueError("Training (--do_train, or the default train + evaluate) needs a training file: add "
                         "--train_file, or pass --do_eval alone to evaluate a saved model (--model_name_or_path).")
    apply_fast_path(training_args, argv, model_args.fast_path)
    if not metric_for_best_model_given(argv):
        # TrainingArguments picks "loss" whenever load_best_model_at_end is set; unless asked otherwise, the best
        # checkpoint is the task's (main() sets it once the task is known: MCC for CoLA, Spearman for STS-B, ...).
        training_args.metric_for_best_model = None
        training_args.greater_is_better = None
    return model_args, data_args, training_args


# Options that build or train a model: a prediction with a saved model (--do_predict alone) cannot honour them.
TRAINING_ONLY_OPTIONS = ("encoders", "encoder_names", "fusion", "fusion_dim", "fusion_gating", "pooling",
                         "word_pooling", "encoder_dropout", "encoder_learning_rates", "head_learning_rate",
                         "freeze_encoders", "lora_r", "adaptive_mlm_epochs", "frozen_feature_cache", "seeds",
                         "train_file", "validation_file", "learning_rate", "num_train_epochs", "max_steps",
                         "resume_from_checkpoint", "max_train_samples", "max_eval_samples")


def predicting_only(training_args) -> bool:
    return training_args.do_predict and not training_args.do_train and not training_args.do_eval


def check_predict_only(model_args, data_args, argv: list[str]) -> None:
    """--do_predict alone predicts with a saved model: it needs that model and inputs, and refuses training options
    (which it would otherwise ignore)."""
    if not model_args.model_name_or_path:
        raise ValueError("--do_predict alone predicts with a saved model: give --model_name_or_path FOLDER (a folder "
                         "run_glue_multi.py wrote), or add --do_train to train one first.")
    if data_args.test_file is None and data_args.task_name is None:
        raise ValueError("--do_predict needs inputs: --test_file FILE (CSV/TSV/JSON(L); its text column(s) by "
                         "--text_column_names, else sentence1/sentence2 or the first string column(s)) or "
                         "--task_name (its test split).")
    given = sorted(set(given_options(argv)) & set(TRAINING_ONLY_OPTIONS))
    if given:
        raise ValueError(f"{', '.join('--' + g for g in given)} train(s) a model, but --do_predict alone predicts "
                         f"with the saved {model_args.model_name_or_path}: leave them out, or add --do_train.")


def predict_only(model_args, data_args, training_args) -> dict:
    """Predict the inputs with the saved model alone (its labels are in its config): `predict_results.jsonl` (text,
    label, score, each member's weight) and `predict_results.txt` in --output_dir, and nothing else (no card)."""
    output_dir = training_args.output_dir
    old = [name for name in RESULT_FILES if os.path.exists(os.path.join(output_dir, name))]
    if old and not data_args.overwrite_output_dir:
        raise ValueError(f"{output_dir} already holds {', '.join(old)}: choose another --output_dir, or pass "
                         f"--overwrite_output_dir true to replace them.")
    if data_args.test_file is not None:
        texts, pairs = load_texts(data_args.test_file, data_args.text_column_names)
        source = data_args.test_file
    else:
        raw, spec = load_data(data_args)
        if "test" not in raw:
            raise ValueError(f"Task {spec.name} has no test split to predict: give --test_file.")
        test = raw["test"]
        if spec.kind == "token":
            texts, pairs = [" ".join(words) for words in test["tokens"]], None
        else:
            texts = test["sentence1"]
            pairs = test["sentence2"] if "sentence2" in test.column_names else None
        source = f"the {spec.name} test split"
    if data_args.max_predict_samples is not None:
        texts = texts[: data_args.max_predict_samples]
        pairs = None if pairs is None else pairs[: data_args.max_predict_samples]
    model = load_model_for_prediction(model_args.model_name_or_path, cache_dir=model_args.cache_dir)
    model.to(training_args.device)
    tokenizer = build_tokenizer(model_args)
    tokenizer.check_model(model)
    print(f"Predicting {len(texts)} input(s) of {source} with {model_args.model_name_or_path} (members "
          f"{model.config.encoder_names})", flush=True)
    records = predict_records(model, tokenizer, texts, pairs, batch_size=training_args.per_device_eval_batch_size,
                              max_length=data_args.max_seq_length, device=training_args.device)
    paths = write_predictions(records, output_dir)
    print(f"Predictions: {paths['predict_results.jsonl']} (text, label, score, fusion weights) and "
          f"{paths['predict_results.txt']}", flush=True)
    return {"predictions": len(records), "files": paths}


# ---- data ----------------------------------------------------------------------------------------------------------
def load_data(data_args: DataTrainingArguments) -> tuple[datasets.DatasetDict, TaskSpec]:
    return load_task(data_args.task_name, data_dir=data_args.data_dir, from_hub=data_args.from_hub,
                     train_file=data_args.train_file, validation_file=data_args.validation_file,
                     test_file=data_args.test_file, task_type=data_args.task_type,
                     label_column=data_args.label_column_name or "label", text_columns=data_args.text_column_names)


def tokenize_dataset(raw, spec: TaskSpec, tokenizer, data_args, training_args):
    limits = {"train": data_args.max_train_samples, "test": data_args.max_predict_samples}
    raw = datasets.DatasetDict({
        split: select(ds, limits.get(split, data_args.max_eval_samples)) for split, ds in raw.items()
        if (split != "train" or training_args.do_train) and (split != "test" or training_args.do_predict)
    })
    with training_args.main_process_first(desc="dataset map pre-processing"):
        return tokenize_task(raw, spec, tokenizer, max_length=data_args.max_seq_length,
                             padding="max_length" if data_args.pad_to_max_length else False)


def select(ds, n):
    return ds if n is None else ds.select(range(min(n, len(ds))))


def adapt_before_tuning(model_args, data_args, training_args, raw, spec: TaskSpec, run_dir: str) -> dict:
    """`--adaptive_mlm_epochs`: continue the members' masked-LM pretraining on the task's own training texts (the
    same `max_train_samples`), save them in `run_dir/adapted_members/`, and tune from there. Finished members with
    the same settings are reused on a rerun."""
    texts = task_texts(spec, dataset=select(raw["train"], data_args.max_train_samples))
    corpus = build_corpus(texts, seed=training_args.seed, source=f"the {spec.name} training texts")
    output_dir = os.path.join(run_dir, "adapted_members")
    args = default_training_arguments(
        output_dir, num_train_epochs=model_args.adaptive_mlm_epochs,
        learning_rate=model_args.adaptive_mlm_learning_rate, seed=training_args.seed, use_cpu=training_args.use_cpu,
        bf16=training_args.bf16, disable_tqdm=training_args.disable_tqdm, logging_steps=training_args.logging_steps,
        resume_from_checkpoint=True)
    display_names = model_args.encoder_names or model_args.encoders
    report = adapt_members(model_args.model_name_or_path or model_args.encoders, corpus, args, output_dir=output_dir,
                           encoder_names=model_args.encoder_names, adapt_members=model_args.adaptive_mlm_members,
                           max_seq_length=data_args.max_seq_length)
    if model_args.model_name_or_path:
        model_args.model_name_or_path = output_dir
    else:
        model_args.encoders, model_args.encoder_names = report["encoders"], list(display_names)
    return report


# ---- model ----------------------------------------------------------------------------------------------------
def build_model(model_args: ModelArguments, spec: TaskSpec, tokenizer: MultiEncoderTokenizer):
    model_cls = MultiEncoderForTokenClassification if spec.kind == "token" else MultiEncoderForSequenceClassification
    label_kwargs = {"num_labels": spec.num_labels}
    if spec.label_list:
        label_kwargs["id2label"] = dict(enumerate(spec.label_list))
        label_kwargs["label2id"] = {label: i for i, label in enumerate(spec.label_list)}
    if spec.kind != "token":
        label_kwargs["problem_type"] = "regression" if spec.is_regression else "single_label_classification"
    if model_args.model_name_or_path:
        return model_cls.from_pretrained(model_args.model_name_or_path, cache_dir=model_args.cache_dir,
                                         **label_kwargs)
    return model_cls.from_encoders(model_args.encoders, **from_encoders_kwargs(model_args, tokenizer), **label_kwargs)


def add_lora(model, model_args: ModelArguments, training_args, frozen: list[int]):
    """LoRA in the members' attention (peft), fusion and head trained fully; members not named stay frozen."""
    if training_args.fsdp:
        raise ValueError("--lora_r with FSDP is not supported: LoRA leaves the members frozen, so DDP (torchrun) "
                         "holds the model on every GPU at a fraction of full fine-tuning's memory.")
    config = model.config
    members = [config.encoder_index(m) for m in model_args.lora_members] if model_args.lora_members else [
        i for i in range(config.num_encoders) if i not in frozen]
    both = [config.encoder_names[i] for i in members if i in frozen]
    if both:
        raise ValueError(f"Members {both} are both frozen (--freeze_encoders) and given LoRA (--lora_members).")
    model = get_multiencoder_lora_model(model, r=model_args.lora_r, lora_alpha=model_args.lora_alpha,
                                        members=members, target_modules=model_args.lora_target_modules,
                                        lora_dropout=model_args.lora_dropout)
    trainable, total = model.get_nb_trainable_parameters()
    logger.info(f"LoRA on members {[config.encoder_names[i] for i in members]}: {trainable:,} of {total:,} "
                f"parameters train ({100 * trainable / total:.2f}%)")
    return model


# ---- fusion weights ----------------------------------------------------------------------------------------------
def epoch_scores(log_history: list[dict], key: str) -> list[float]:
    return [entry[key] for entry in log_history if key in entry and "epoch" in entry]


def example_inputs(raw, spec: TaskSpec, data_args) -> list:
    """A few inputs from the task's own validation (else training) data: sentences, (sentence, pair) tuples, or word
    lists; `--fusion_examples` replaces them for single-sentence tasks."""
    if data_args.fusion_examples and not spec.is_pair and spec.kind != "token":
        return list(data_args.fusion_examples)
    split = next((s for s in (*spec.validation_splits, "train") if s in raw), None)
    if split is None:
        return []
    rows = raw[split].select(range(min(NUM_EXAMPLES, len(raw[split]))))
    if spec.kind == "token":
        return [list(tokens) for tokens in rows["tokens"]]
    return list(zip(rows["sentence1"], rows["sentence2"])) if spec.is_pair else list(rows["sentence1"])


def fusion_report(model, tokenizer, spec: TaskSpec, eval_metrics: dict, examples: list, output_dir: str,
                  max_length: int = 128) -> dict:
    """Mean fusion weight of each member on the dev set (from the evaluation's metrics), and the weights of a few
    example inputs; written to `fusion_weights.json`."""
    names = list(model.config.encoder_names)
    report = {"members": names, "mean_fusion_weights": fusion_weights_from_metrics(eval_metrics, names),
              "examples": []}
    if spec.kind != "token" and examples and report["mean_fusion_weights"] is not None:
        texts = [e[0] if spec.is_pair else e for e in examples]
        pairs = [e[1] for e in examples] if spec.is_pair else None
        result = model.predict_with_fusion_weights(tokenizer, texts, text_pairs=pairs, max_length=max_length)
        report["examples"] = [
            {"sentence": s if pairs is None else f"{s} / {pairs[i]}", "prediction": p, "fusion_weights": w}
            for i, (s, p, w) in enumerate(zip(result["Sentences"], result["Predictions"], result["fusion_weights"]))
        ]
    with open(os.path.join(output_dir, "fusion_weights.json"), "w") as f:
        json.dump(report, f, indent=2)
    return report


def format_fusion_report(report: dict) -> str:
    lines = []
    if report["mean_fusion_weights"]:
        lines.append("mean fusion weight on the dev set: " + ", ".join(
            f"{name} {w:.2f}" for name, w in report["mean_fusion_weights"].items()))
    for ex in report["examples"]:
        weights = ", ".join(f"{w:.2f} {name}" for name, w in ex["fusion_weights"].items())
        lines.append(f"  {ex['sentence']!r} -> {ex['prediction']}: {weights}")
    return "\n".join(lines)


# ---- model card ---------------------------------------------------------------------------------------------------
def card_data_for(spec: TaskSpec, data_args) -> MultiEncoderModelCardData:
    """What the model card says about the data (the callback adds the members, rates and results)."""
    return MultiEncoderModelCardData(
        language=spec.language,
        dataset_id=spec.hub_id,
        dataset_config=spec.hub_config,
        dataset_name=spec.display_name,
    )


# ---- one run -----------------------------------------------------------------------------------------------------
def build_trainer(model_args, data_args, training_args, spec, tokenizer, tokenized, model) -> MultiEncoderTrainer:
    """The stock Trainer (plus the multi-encoder model card) with the per-member optimizer."""
    optimizer = create_multiencoder_optimizer(
        model, training_args, encoder_learning_rates=model_args.encoder_learning_rates,
        head_learning_rate=model_args.head_learning_rate, layerwise_lr_decay=model_args.layerwise_lr_decay,
    ) if training_args.do_train else None
    keep_length_column(training_args)
    train_dataset = tokenized["train"] if training_args.do_train else None
    eval_splits = [s for s in spec.validation_splits if s in tokenized]
    main_eval = tokenized[eval_splits[0]] if eval_splits else None
    if training_args.do_eval and main_eval is None:
        raise ValueError(f"--do_eval needs a validation split; the data has {list(tokenized)}. Add "
                         f"--validation_file, or pass --do_train alone (without --do_eval) to train only.")
    callbacks = []
    if data_args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=data_args.early_stopping_patience))
    return MultiEncoderTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=main_eval,
        processing_class=tokenizer,
        data_collator=(CachedFeaturesCollator if model_args.frozen_feature_cache else MultiEncoderDataCollator)(
            tokenizer, pad_to_multiple_of=8 if training_args.bf16 else None),
        compute_metrics=build_compute_metrics(spec, model.config.encoder_names),
        optimizers=(optimizer, None),
        callbacks=callbacks,
        model_card_data=card_data_for(spec, data_args),
    )


def train_one(model_args, data_args, training_args, raw, spec, tokenizer, tokenized):
    """One run, one seed. Returns its result (for results.json) and its model card data."""
    set_seed(training_args.seed)
    model = build_model(model_args, spec, tokenizer)
    tokenizer.check_model(model)
    frozen = []
    if model_args.freeze_encoders:
        frozen = freeze_encoders(model, model_args.freeze_encoders)
        logger.info(f"Frozen members: {[model.config.encoder_names[i] for i in frozen]}")
    if model_args.lora_r:
        model = add_lora(model, model_args, training_args, frozen)
    model.to(training_args.device)  # before the optimizer, so that it can use the fused CUDA kernel
    if model_args.freeze_encoders and model_args.frozen_feature_cache:
        tokenized = datasets.DatasetDict({
            split: add_member_features(ds, model, frozen, cache_dir=model_args.frozen_feature_cache)
            for split, ds in tokenized.items()})
    trainer = build_trainer(model_args, data_args, training_args, spec, tokenizer, tokenized, model)
    trainer.model_card_data.set_data_limits(train=data_args.max_train_samples, eval=data_args.max_eval_samples)
    examples = example_inputs(raw, spec, data_args)
    trainer.model_card_data.set_example_inputs(examples)
    eval_splits = [s for s in spec.validation_splits if s in tokenized]
    eval_datasets = {s: tokenized[s] for s in eval_splits}
    main_key = f"eval_{spec.main_metric}"
    result = {"seed": training_args.seed}
    start = time.time()
    history = []
    if training_args.do_train:
        train_metrics = train_and_save(trainer, training_args,
                                       before_save=merge_lora_after_training if model_args.lora_r else None)
        # the per-epoch scores, before the evaluations below (which, with load_best_model_at_end, score the best)
        history = epoch_scores(trainer.state.log_history, main_key)
        if model_args.lora_r:  # output_dir: the merged model (what a user deploys); output_dir/adapter: adapters
            model = trainer.model
    # the Trainer's own training time (a finished run that is resumed reports the time it trained, not 0)
    result["train_seconds"] = round(train_metrics.get("train_runtime", time.time() - start) if training_args.do_train
                                    else 0.0, 1)

    all_eval = {}
    if training_args.do_eval:
        for split, ds in eval_datasets.items():
            trainer.model_card_data.eval_split = split
            metrics = trainer.evaluate(eval_dataset=ds)
            metrics["eval_samples"] = len(ds)
            prefix = "eval" if split == eval_splits[0] else f"eval_{split}"
            trainer.log_metrics(prefix, metrics)
            trainer.save_metrics(prefix, metrics)
            all_eval[split] = metrics
        final_metrics = all_eval[eval_splits[0]]
        result.update({
            "eval": final_metrics,
            "epoch_scores": history,
            "best_epoch_score": max(history) if history else final_metrics[main_key],
            "final_epoch_score": history[-1] if history else final_metrics[main_key],
            "score": final_metrics[main_key],
        })
        if trainer.is_world_process_zero():  # the metrics are gathered from every process: report them once
            report = fusion_report(model, tokenizer, spec, final_metrics,
                                   examples, training_args.output_dir,
                                   max_length=data_args.max_seq_length)
            result["fusion"] = report
            trainer.model_card_data.set_fusion_examples(report["examples"])
            text = format_fusion_report(report)
            if text:
                print(f"\nFusion weights ({training_args.output_dir}):\n{text}", flush=True)

    if training_args.do_predict and "test" in tokenized:
        if spec.kind == "token":  # one tag per given word of each sentence (padding and cut-off words handled)
            test = tokenized["test"]
            predictions = trainer.predict(test, metric_key_prefix="predict").predictions  # from every process
            logits, word_mask = (predictions[0] if isinstance(predictions, tuple) else predictions), predictions[-1]
            path = os.path.join(training_args.output_dir, "predict_results.txt")
            with open(path if trainer.is_world_process_zero() else os.devnull, "w") as f:
                f.write("index\tprediction\n")
                lengths = np.array([len(mask) for mask in test["word_mask"]])
                keep = np.arange(logits.shape[1])[None, :] < lengths[:, None]
                for i, tags in enumerate(word_tags(logits, word_mask, keep, dict(enumerate(spec.label_list)))):
                    f.write(f"{i}\t{' '.join(tags)}\n")
        elif trainer.is_world_process_zero():  # the text, label, score and member weights of each test input
            test = select(raw["test"], data_args.max_predict_samples)
            pairs = test["sentence2"] if "sentence2" in test.column_names else None
            records = predict_records(trainer.model.eval(), tokenizer, test["sentence1"], pairs,
                                      batch_size=training_args.per_device_eval_batch_size,
                                      max_length=data_args.max_seq_length, device=training_args.device)
            write_predictions(records, training_args.output_dir)
    # As run_glue.py: a model card at the end (README.md + fusion-weight plot in output_dir), pushed if asked.
    card_kwargs = {"tasks": "token-classification" if spec.kind == "token" else "text-classification"}
    if training_args.push_to_hub:
        trainer.push_to_hub(**card_kwargs)
    else:
        trainer.create_model_card(**card_kwargs)
    card_data = trainer.model_card_data
    del trainer, model
    return result, card_data


def write_results_table(results: list[dict], spec: TaskSpec, model_args, output_dir: str) -> dict:
    table = {
        "task": spec.name,
        "metric": spec.main_metric,
        "members": model_args.encoder_names or model_args.encoders or [model_args.model_name_or_path],
        "fusion": model_args.fusion,
        "best_epoch": summarize((r.get("best_epoch_score") for r in results), scale=100),
        "final_epoch": summarize((r.get("final_epoch_score") for r in results), scale=100),
        "mean_fusion_weights": mean_by_key((r.get("fusion") or {}).get("mean_fusion_weights") for r in results),
        "runs": [r | {"fusion_weights": (r.get("fusion") or {}).get("mean_fusion_weights")} for r in results],
    }
    with open(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump(table, f, indent=2)
    lines = [f"# {spec.name}: {spec.main_metric} x100, {len(results)} seed(s)", "",
             "| seed | best epoch | final epoch | train s |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['seed']} | {r.get('best_epoch_score', float('nan')) * 100:.2f} | "
                     f"{r.get('final_epoch_score', float('nan')) * 100:.2f} | {r['train_seconds']} |")
    for label, key in (("best epoch", "best_epoch"), ("final epoch", "final_epoch")):
        if table[key]:
            lines.append(f"\n{label}: {format_summary(table[key])}")
    with open(os.path.join(output_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return table


def print_summary(table: dict, results: list[dict], spec: TaskSpec) -> None:
    """The result table, at the default log level."""
    lines = [f"\n{spec.display_name or spec.name}: {spec.main_metric} x100"]
    for r in results:
        if "best_epoch_score" in r:
            lines.append(f"  seed {r['seed']}: best epoch {r['best_epoch_score'] * 100:.2f}, final epoch "
                         f"{r['final_epoch_score'] * 100:.2f} ({r['train_seconds']} s)")
    for label, key in (("best epoch", "best_epoch"), ("final epoch", "final_epoch")):
        if table.get(key) and len(results) > 1:
            lines.append(f"  {label}: {format_summary(table[key])}")
    if table.get("mean_fusion_weights"):
        lines.append("  mean fusion weight: " + ", ".join(f"{name} {w:.2f}"
                                                          for name, w in table["mean_fusion_weights"].items()))
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, training_args = parse_args(argv)
    setup_run(training_args, logger.name)
    if predicting_only(training_args):
        return predict_only(model_args, data_args, training_args)

    seeds, base_output, run_args, resuming = prepare_runs(model_args, data_args, training_args)

    raw, spec = load_data(data_args)
    if training_args.metric_for_best_model is None:
        training_args.metric_for_best_model = spec.main_metric
        training_args.greater_is_better = True
    tokenizer = build_tokenizer(model_args)
    labels = "a score (regression)" if spec.is_regression else f"{spec.num_labels} labels {spec.label_list}"
    print(f"Task {spec.name} ({spec.form}, {labels}); members {tokenizer.encoder_names}; fusion "
          f"{model_args.fusion}", flush=True)
    tokenized = tokenize_dataset(raw, spec, tokenizer, data_args, training_args)

    results, card_data = [], None
    for seed in seeds:
        start_seed_run(training_args, base_output, seed, seeds, run_args, resuming, data_args.overwrite_output_dir)
        if model_args.adaptive_mlm_epochs and not results:  # once, into the run's folder, before the first tuning
            adapt_before_tuning(model_args, data_args, training_args, raw, spec, base_output)
        result, card_data = train_one(model_args, data_args, training_args, raw, spec, tokenizer, tokenized)
        results.append(result)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    training_args.output_dir = base_output
    if training_args.process_index != 0:
        return {}  # the results were gathered: the main process writes and prints them
    table = write_results_table(results, spec, model_args, base_output) if training_args.do_eval else {}
    if table:
        print_summary(table, results, spec)
        if len(seeds) > 1:
            save_seeds_card(base_output, card_data, table)
    return table


if __name__ == "__main__":
    main()
    PartialState().destroy_process_group()  # under torchrun: gloo's threads joined before exit, not aborted
