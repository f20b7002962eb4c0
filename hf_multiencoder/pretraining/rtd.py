"""Pretrain a member (or continue pretraining one) by replaced-token detection (ELECTRA, Clark et al. 2020; ALECTRA
with ALBERT), or by masked LM as the baseline in the same setup, with the stock `Trainer`::

    from hf_multiencoder.data.corpus import load_corpus
    from hf_multiencoder.pretraining.rtd import PretrainingArguments, pretrain

    corpus = load_corpus("corpus.txt")
    args = PretrainingArguments(objective="rtd", discriminator="electra-small",
                                tokenizer="sentence-transformers/all-MiniLM-L6-v2")
    report = pretrain(args, corpus, default_pretraining_arguments("electra-small-mine", max_steps=20000))

The discriminator is a size preset (`PRESETS`: `electra-small`, `tiny`) of `--architecture` (ELECTRA by default,
any architecture with a masked-LM class), a config file, or a checkpoint, whose pretraining is then continued: the
member is the discriminator and a small fresh generator shares its word embeddings. The generator is
`generator_size` (1/4) of the discriminator's hidden size, heads and FFN width, same depth; its architecture is the
discriminator's where that has factorised embeddings (ELECTRA, ALBERT) and ELECTRA's otherwise (its embedding
projection lets a narrow generator share a wide member's embeddings, as google's ELECTRA-Base generator does).

Output (`output_dir`), laid out as google's ELECTRA checkpoints: the discriminator and the tokenizer
(`AutoModel` loads the encoder, usable as a member; `AutoModelForPreTraining` loads ELECTRA's encoder with its
replaced-token head, `AutoModelForTokenClassification` any other architecture's), the generator in `generator/` on
request, `pretraining_results.json` (settings, the held-out metrics, the training log). The masked-LM baseline saves
its `AutoModelForMaskedLM` there instead.

The replaced-token objective is also an adaptation objective (`adapt_members(..., objective="rtd")`,
`run_mlm_multi.py --objective rtd`). Training side: not shipped with the weights.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import logging
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import DatasetDict
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    ElectraForPreTraining,
    PreTrainedModel,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES,
)

from ..data.corpus import tokenize_corpus
from ..models.modeling_rtd import REPLACED_LABEL, RTDForPreTraining, word_embeddings_size
from ..training.fast_path import auto_training_kwargs, fast_path_field, pin_memory
from ..training.runs import (
    AtomicCheckpointMixin,
    check_finite_weights,
    check_resume_args,
    check_training_length,
    prepare_output_dir,
    resolve_resume,
    run_finished,
    save_into,
    training_record,
    write_run_args,
)
from .adaptation import (
    AdaptationArguments,
    AdaptationTrainer,
    MaskedLMCollator,
    MaskedLMObjective,
    check_masking,
    check_max_seq_length,
    mask_once,
)
from .objectives import AdaptationObjective, register_objective

logger = logging.getLogger(__name__)

RESULTS_FILE = "pretraining_results.json"
GENERATOR_FOLDER = "generator"
# Discriminator sizes. electra-small: Clark et al. 2020, table 6; tiny: small enough to pretrain on a CPU.
PRESETS: dict[str, dict[str, int]] = {
    "electra-small": {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4,
                      "intermediate_size": 1024},
    "tiny": {"embedding_size": 128, "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2,
             "intermediate_size": 512},
}
# The published recipe: 15% of the tokens selected; 85% of those masked, 15% kept (no random replacement).
RTD_MASK_REPLACE_PROB = 0.85
# ELECTRA-Small's pretraining settings (Clark et al. 2020, table 6), the defaults of run_pretraining.py.
PRETRAINING_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 128,
    "learning_rate": 5e-4,
    "weight_decay": 0.01,
    "adam_epsilon": 1e-6,
    "lr_scheduler_type": "linear",
    "warmup_steps": 10000,
    "max_steps": 1000000,
    "save_strategy": "no",
}


@dataclass
class PretrainingArguments:
    """What is pretrained and how (the objective's side; the `Trainer`'s options are its `TrainingArguments`)."""

    objective: str = field(default="rtd", metadata={"help": "rtd (replaced-token detection, ELECTRA) or mlm (the "
                                                            "masked-LM baseline, same model and data)."})
    discriminator: str = field(
        default="tiny", metadata={"help": f"The model pretrained: a size preset ({', '.join(PRESETS)}) of "
                                          f"--architecture, a config .json (from scratch) or a checkpoint (its "
                                          f"pretraining continued)."}
    )
    architecture: str = field(
        default="electra", metadata={"help": "Architecture of a preset: electra, albert (ALECTRA), bert, ... (any "
                                             "with a masked-LM class)."}
    )
    tokenizer: str | None = field(
        default=None, metadata={"help": "The tokenizer (default: the discriminator checkpoint's); a preset's "
                                        "vocabulary is the tokenizer's."}
    )
    generator: str | None = field(
        default=None, metadata={"help": "The generator's config .json or checkpoint (default: a fresh one, "
                                        "--generator_size of the discriminator)."}
    )
    generator_size: float = field(
        default=0.25, metadata={"help": "Generator hidden size, heads and FFN width as a share of the "
                                        "discriminator's (same depth)."}
    )
    discriminator_weight: float = field(default=50.0, metadata={"help": "Weight of the discriminator's loss."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens selected (masked)."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per example (or per packed block)."})
    line_by_line: bool = field(
        default=False, metadata={"help": "One example per text (truncated); default: texts packed into full blocks."}
    )
    two_segments: bool = field(
        default=False, metadata={"help": "Pack BERT-style two-segment blocks ([CLS] A [SEP] B [SEP], random split)."}
    )
    save_generator: bool = field(
        default=False, metadata={"help": "Also save the generator in <output_dir>/generator."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start afresh in a used output folder (its old checkpoints are deleted)."}
    )
    fast_path: str = fast_path_field()

    def __post_init__(self):
        if self.objective not in ("rtd", "mlm"):
            raise ValueError(f"Unknown objective {self.objective!r}; known: rtd, mlm.")
        if not 0 < self.generator_size <= 1:
            raise ValueError(f"`generator_size` must be in (0, 1], got {self.generator_size}.")
        check_masking(self.mlm_probability, self.max_seq_length)
        if not (math.isfinite(self.discriminator_weight) and self.discriminator_weight >= 0):
            raise ValueError(f"--discriminator_weight must be a finite number >= 0, got {self.discriminator_weight}.")
        if self.architecture not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            raise ValueError(f"--architecture {self.architecture!r} has no masked-LM class in transformers; use one "
                             f"of electra, albert, bert, roberta, mpnet, ...")


def default_pretraining_arguments(output_dir: str, **overrides) -> TrainingArguments:
    """`TrainingArguments` with ELECTRA-Small's settings (`PRETRAINING_DEFAULTS`) on the fast path (bf16 where the
    hardware computes it natively, the fused AdamW: `hf_multiencoder.fast_path`), `overrides` on top."""
    return TrainingArguments(output_dir=output_dir, **{**PRETRAINING_DEFAULTS, "report_to": "none",
                             "dataloader_pin_memory": pin_memory(), **auto_training_kwargs(overrides),
                             **overrides})


# ---- configs and models ---------------------------------------------------------------------------------------------
def _is_config_file(name: str) -> bool:
    return name.endswith(".json") and os.path.isfile(name)


def _has_weights(name: str) -> bool:
    """A checkpoint (weights to continue from) rather than a bare config: a Hub id, or a folder with weights."""
    if not os.path.isdir(name):
        return not _is_config_file(name)
    return any(f.endswith((".safetensors", ".bin", ".safetensors.index.json")) for f in os.listdir(name))


def _load_config(name: str):
    if _is_config_file(name):
        with open(name, encoding="utf-8") as f:
            values = json.load(f)
        if "model_type" not in values:
            raise ValueError(f"{name}: a config file needs its `model_type` (e.g. \"electra\").")
        return AutoConfig.for_model(values.pop("model_type"), **values)
    return AutoConfig.from_pretrained(name)


def discriminator_config(name: str, tokenizer, architecture: str = "electra"):
    """The discriminator's config from a preset name (its vocabulary the tokenizer's), a config file or a checkpoint;
    and whether `name` holds weights to continue from."""
    if name in PRESETS:
        sizes = dict(PRESETS[name])
        probe = AutoConfig.for_model(architecture)
        if not hasattr(probe, "embedding_size"):  # embeddings as wide as the hidden states
            sizes.pop("embedding_size")
        config = AutoConfig.for_model(architecture, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                      **sizes)
        return config, False
    local = os.path.exists(name)
    close = difflib.get_close_matches(name.lower(), list(PRESETS), n=1, cutoff=0.6)
    if not local and close:
        raise ValueError(f"Unknown preset {name!r}: did you mean {close[0]!r}? The presets are "
                         f"{', '.join(PRESETS)}; or give a config file, a model folder or a Hub id.")
    try:
        return _load_config(name), _has_weights(name)
    except OSError as err:
        if local:
            raise
        raise OSError(f"{name!r} is not a preset ({', '.join(PRESETS)}), nor a config file or model folder here, and "
                      f"could not be loaded as a Hub id: {err}") from err


def generator_config(discriminator, size: float = 0.25):
    """A fresh generator's config: `size` of the discriminator's hidden size, heads and FFN width, same depth and
    vocabulary, word embeddings as wide as the discriminator's (so that they can be shared). Its architecture is the
    discriminator's where that factorises its embeddings (ELECTRA, ALBERT), else ELECTRA's."""
    architecture = discriminator.model_type if hasattr(discriminator, "embedding_size") else "electra"
    heads = max(1, round(discriminator.num_attention_heads * size))
    hidden = max(heads, round(discriminator.hidden_size * size / heads) * heads)
    return AutoConfig.for_model(
        architecture,
        vocab_size=discriminator.vocab_size,
        embedding_size=word_embeddings_size(discriminator),
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=max(1, round(getattr(discriminator, "intermediate_size", 4 * discriminator.hidden_size)
                                       * size)),  # DistilBERT names it hidden_dim
        num_hidden_layers=discriminator.num_hidden_layers,
        max_position_embeddings=discriminator.max_position_embeddings,
        type_vocab_size=getattr(discriminator, "type_vocab_size", 2),
        pad_token_id=discriminator.pad_token_id,
    )


def _replaced_label(config) -> dict:
    return {"num_labels": 1, "id2label": {0: REPLACED_LABEL}, "label2id": {REPLACED_LABEL: 0}}


def load_discriminator(checkpoint: str, config=None) -> tuple[PreTrainedModel, list[str]]:
    """A checkpoint as a discriminator: `ElectraForPreTraining` for ELECTRA (its head kept when it has one), else the
    architecture's token classifier with one label; and the names of the weights that are new."""
    config = config or AutoConfig.from_pretrained(checkpoint)
    if config.model_type == "electra":
        model, info = ElectraForPreTraining.from_pretrained(checkpoint, output_loading_info=True)
    else:
        if config.model_type not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES:
            raise ValueError(f"{checkpoint} is a {config.model_type!r} model, an architecture with no token "
                             f"classifier in transformers: it cannot be a replaced-token discriminator.")
        model, info = AutoModelForTokenClassification.from_pretrained(checkpoint, output_loading_info=True,
                                                                      **_replaced_label(config))
    return model, sorted(info["missing_keys"])


def check_tokenizer(tokenizer, vocab_size: int, name: str = "the model") -> None:
    """Raise a `ValueError` if the tokenizer has no mask token or more tokens than the model's vocabulary."""
    if tokenizer.mask_token is None:
        raise ValueError(f"{type(tokenizer).__name__} has no mask token: masked-LM and replaced-token pretraining "
                         f"need one (use a tokenizer with a [MASK]/<mask> token).")
    if len(tokenizer) > vocab_size:
        raise ValueError(f"The tokenizer has {len(tokenizer)} tokens but {name} a vocabulary of {vocab_size}: use the "
                         f"model's own tokenizer (--tokenizer).")


def check_same_vocabulary(checkpoint: str, tokenizer, option: str = "--tokenizer") -> None:
    """Raise a `ValueError` when a checkpoint ships a tokenizer whose vocabulary differs from the run's `tokenizer`:
    its embeddings would be looked up by another tokenizer's ids (a silently different model)."""
    try:
        own = AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError, TypeError):
        return  # no tokenizer of its own: only the size check (check_tokenizer) applies
    if own.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"{option} {getattr(tokenizer, 'name_or_path', '')!r} has another vocabulary than the "
                         f"discriminator {checkpoint!r} was trained with ({len(tokenizer)} vs {len(own)} tokens, "
                         f"different ids): its embeddings would be read with the wrong ids. Use the checkpoint's own "
                         f"tokenizer (leave out {option}) or a preset (pretraining from scratch).")


def build_rtd_model(args: PretrainingArguments, tokenizer) -> tuple[RTDForPreTraining, dict]:
    """The replaced-token-detection model of `args` (fresh from a preset or config, or around a checkpoint) and what
    was done: `continued` (the discriminator's weights came from a checkpoint), `new_weights`."""
    config, continued = discriminator_config(args.discriminator, tokenizer, args.architecture)
    check_tokenizer(tokenizer, config.vocab_size, f"discriminator {args.discriminator}")
    check_max_seq_length(config, args.max_seq_length, args.discriminator)
    new_weights: list[str] = []
    if continued:
        check_same_vocabulary(args.discriminator, tokenizer)
        discriminator, new_weights = load_discriminator(args.discriminator, config)
    else:
        discriminator = RTDForPreTraining.discriminator_from_config(config)
    if args.generator is None:
        generator = AutoModelForMaskedLM.from_config(generator_config(discriminator.config, args.generator_size))
    elif _has_weights(args.generator):
        generator = AutoModelForMaskedLM.from_pretrained(args.generator)
    else:
        generator = AutoModelForMaskedLM.from_config(_load_config(args.generator))
    model = RTDForPreTraining.from_generator_discriminator(generator, discriminator,
                                                           discriminator_weight=args.discriminator_weight)
    return model, {"continued": continued, "new_weights": new_weights}


def build_mlm_model(args: PretrainingArguments, tokenizer) -> tuple[PreTrainedModel, dict]:
    """The masked-LM baseline: the discriminator's architecture and size with its masked-LM head."""
    config, continued = discriminator_config(args.discriminator, tokenizer, args.architecture)
    check_tokenizer(tokenizer, config.vocab_size, f"model {args.discriminator}")
    check_max_seq_length(config, args.max_seq_length, args.discriminator)
    MaskedLMObjective().check_member(config, args.discriminator)
    if continued:
        check_same_vocabulary(args.discriminator, tokenizer)
        model, info = AutoModelForMaskedLM.from_pretrained(args.discriminator, output_loading_info=True)
        return model, {"continued": True, "new_weights": sorted(info["missing_keys"])}
    return AutoModelForMaskedLM.from_config(config), {"continued": False, "new_weights": []}


def rtd_collator(tokenizer, mlm_probability: float = 0.15, seed: int | None = None) -> MaskedLMCollator:
    """The replaced-token batch: `mlm_probability` of the tokens selected, 85% of those masked, 15% kept; `labels`
    the original ids at the selected positions."""
    return MaskedLMCollator(tokenizer, mlm_probability=mlm_probability, mask_replace_prob=RTD_MASK_REPLACE_PROB,
                            random_replace_prob=0.0, seed=seed)


# ---- trainer --------------------------------------------------------------------------------------------------------
def rtd_metrics(counts: Counter) -> dict[str, float]:
    """Generator MLM accuracy, discriminator accuracy (and the all-original baseline's), precision and recall on
    replaced tokens, fraction replaced, and both losses, from the counts `RTDTrainer` gathers."""
    if not counts.get("tokens"):
        return {}

    def ratio(a, b):
        return counts[a] / counts[b] if counts[b] else 0.0

    return {
        "generator_accuracy": ratio("generator_correct", "selected"),
        "discriminator_accuracy": ratio("correct", "tokens"),
        "all_original_accuracy": 1.0 - ratio("replaced", "tokens"),
        "replaced_precision": counts["true_positive"] / max(1, counts["true_positive"] + counts["false_positive"]),
        "replaced_recall": ratio("true_positive", "replaced"),
        "replaced_fraction": ratio("replaced", "tokens"),
        "mlm_loss": ratio("mlm_loss", "batches"),
        "discriminator_loss": ratio("discriminator_loss", "batches"),
    }


class RTDTrainer(AtomicCheckpointMixin, Trainer):
    """The stock `Trainer` for [`RTDForPreTraining`], which also logs the replaced-token metrics (`rtd_metrics`) with
    every training log (over the steps since the last one) and every evaluation (prefixed `eval_`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rtd_counts = {"train": Counter(), "eval": Counter()}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        with torch.no_grad():
            counts = self._rtd_counts["train" if model.training else "eval"]
            attention_mask = inputs.get("attention_mask")
            active = attention_mask.bool() if attention_mask is not None else torch.ones_like(outputs.replaced).bool()
            predicted, replaced = outputs.logits > 0, outputs.replaced.bool()
            selected = inputs["labels"] != -100
            counts.update({
                "tokens": int(active.sum()),
                "replaced": int((replaced & active).sum()),
                "correct": int(((predicted == replaced) & active).sum()),
                "true_positive": int((predicted & replaced & active).sum()),
                "false_positive": int((predicted & ~replaced & active).sum()),
                "selected": int(selected.sum()),
                "generator_correct": int((outputs.generator_predictions == inputs["labels"][selected]).sum()),
                "batches": 1,
            })
            counts["mlm_loss"] += float(outputs.mlm_loss)
            counts["discriminator_loss"] += float(outputs.discriminator_loss)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def log(self, logs: dict[str, float], *args, **kwargs) -> None:
        split = "eval" if any(k.startswith("eval_") for k in logs) else "train" if "loss" in logs else None
        if split is not None:
            prefix = "eval_" if split == "eval" else ""
            logs.update({prefix + k: round(v, 4) for k, v in rtd_metrics(self._rtd_counts[split]).items()})
            self._rtd_counts[split].clear()
        super().log(logs, *args, **kwargs)


# ---- the adaptation objective ---------------------------------------------------------------------------------------
class RTDObjective(AdaptationObjective):
    """Replaced-token detection as a member's adaptation objective: the member is the discriminator (its new one-unit
    head, or ELECTRA's own), a fresh generator (1/4 of its size) shares its word embeddings."""

    name = "rtd"
    generator_size = 0.25
    trainer_class = RTDTrainer  # logs the replaced-token metrics while a member adapts, too

    def check_member(self, config, name: str) -> None:
        if config.model_type != "electra" and config.model_type not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES:
            raise ValueError(f"Member {name!r} is a {type(config).__name__} ({config.model_type!r}), an architecture "
                             f"with no token classifier in transformers: it cannot be a replaced-token "
                             f"discriminator. Leave it out with --adapt_members.")

    def _wrap(self, discriminator: PreTrainedModel) -> RTDForPreTraining:
        generator = AutoModelForMaskedLM.from_config(generator_config(discriminator.config, self.generator_size))
        return RTDForPreTraining.from_generator_discriminator(generator, discriminator)

    def from_checkpoint(self, checkpoint: str, **kwargs) -> tuple[PreTrainedModel, list[str]]:
        model = self._wrap(load_discriminator(checkpoint)[0])
        return model, self.head_parameters(model)

    def from_member(self, member: PreTrainedModel) -> tuple[PreTrainedModel, list[str]]:
        config = copy.deepcopy(member.config)
        if config.model_type != "electra":
            config.update(_replaced_label(config))
        discriminator = RTDForPreTraining.discriminator_from_config(config)
        result = discriminator.base_model.load_state_dict(member.state_dict(), strict=False)
        unexpected = [k for k in result.unexpected_keys if not k.startswith("pooler.")]
        if unexpected or result.missing_keys:
            raise ValueError(f"The member's weights do not fit {type(discriminator).__name__}: missing "
                             f"{result.missing_keys}, unexpected {unexpected}.")
        model = self._wrap(discriminator)
        return model, self.head_parameters(model)

    def data_collator(self, tokenizer, args: AdaptationArguments, seed: int | None = None) -> MaskedLMCollator:
        return rtd_collator(tokenizer, args.mlm_probability, seed=seed)

    def encoder(self, model: PreTrainedModel):
        return model.discriminator.base_model


register_objective(RTDObjective(), overwrite=True)


# ---- the entry point ------------------------------------------------------------------------------------------------
def pretrain(args: PretrainingArguments, corpus: DatasetDict, training_args: TrainingArguments) -> dict:
    """Pretrain (or continue pretraining) a model on `corpus` (a `load_corpus` result) and save it to
    `training_args.output_dir` (see the module's docstring). Returns the report also written to
    `pretraining_results.json`: settings, `model` (sizes, whether continued), `train` and `eval` metrics, seconds,
    and the training log."""
    for split in ("train", "validation"):
        if split not in corpus or len(corpus[split]) == 0:
            raise ValueError(f"The corpus has no {split!r} text: build it with load_corpus.")
    output_dir = training_args.output_dir
    check_training_length(training_args)
    run_args = {**{f"pretraining.{k}": v for k, v in dataclasses.asdict(args).items() if k != "overwrite_output_dir"},
                **training_record(training_args)}
    results = os.path.join(output_dir, RESULTS_FILE)
    if training_args.resume_from_checkpoint not in (None, "", "false", "False") and run_finished(output_dir) and (
            os.path.isfile(results)):
        check_resume_args(output_dir, run_args, list(run_args))
        logger.warning(f"The run in {output_dir} is finished: nothing to resume, nothing trained or saved again. "
                       f"Pass --overwrite_output_dir true to pretrain it again.")
        with open(results, encoding="utf-8") as f:
            return json.load(f)
    checkpoint = resolve_resume(output_dir, training_args.resume_from_checkpoint)
    prepare_output_dir(output_dir, overwrite=args.overwrite_output_dir, resuming=checkpoint is not None,
                       create=False)  # refused early; created once the inputs below are checked
    source = args.tokenizer or (args.discriminator if args.discriminator not in PRESETS else None)
    if source is None:
        raise ValueError(f"A preset ({args.discriminator}) has no vocabulary of its own: give --tokenizer.")
    tokenizer = AutoTokenizer.from_pretrained(source)
    set_seed(training_args.seed)
    build = build_rtd_model if args.objective == "rtd" else build_mlm_model
    model, info = build(args, tokenizer)

    tokenized = tokenize_corpus(corpus, tokenizer, max_seq_length=args.max_seq_length, line_by_line=args.line_by_line,
                                two_segments=args.two_segments, seed=training_args.seed)
    if len(tokenized["train"]) == 0 or len(tokenized["validation"]) == 0:
        raise ValueError("The corpus gives no training or held-out example after tokenization (too short for a "
                         "two-segment block?).")
    if args.objective == "rtd":
        collator = rtd_collator(tokenizer, args.mlm_probability)
    else:
        collator = MaskedLMObjective().data_collator(tokenizer, AdaptationArguments(
            mlm_probability=args.mlm_probability, max_seq_length=args.max_seq_length))
    eval_dataset = mask_once(tokenized["validation"], collator, seed=training_args.seed)
    phase = copy.deepcopy(training_args)
    phase.remove_unused_columns = False  # the collator needs `special_tokens_mask`
    phase.prediction_loss_only = True
    common = {"model": model, "args": phase, "train_dataset": tokenized["train"], "eval_dataset": eval_dataset,
              "data_collator": collator, "processing_class": tokenizer}
    trainer = (RTDTrainer(**common) if args.objective == "rtd"
               else AdaptationTrainer(**common, encoder=model.base_model))
    prepare_output_dir(output_dir, overwrite=args.overwrite_output_dir, resuming=checkpoint is not None)
    if checkpoint is not None:  # resuming with other arguments would be a silently different model
        check_resume_args(output_dir, run_args, list(run_args))
    write_run_args(output_dir, run_args)

    start = time.time()
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    seconds = time.time() - start
    check_finite_weights(model)
    eval_metrics = trainer.evaluate()
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_metrics("eval", eval_metrics)
    trainer.save_state()

    kept = model.discriminator if args.objective == "rtd" else model

    def save(folder):
        kept.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        if args.objective == "rtd" and args.save_generator:
            model.generator.save_pretrained(os.path.join(folder, GENERATOR_FOLDER))
            tokenizer.save_pretrained(os.path.join(folder, GENERATOR_FOLDER))

    save_into(output_dir, save)
    report = {
        "objective": args.objective,
        "settings": {**dataclasses.asdict(args), "max_steps": training_args.max_steps,
                     "per_device_train_batch_size": training_args.per_device_train_batch_size,
                     "learning_rate": training_args.learning_rate, "seed": training_args.seed,
                     "train_examples": len(tokenized["train"]), "eval_examples": len(eval_dataset),
                     "torch_threads": torch.get_num_threads()},
        "model": {"architecture": type(kept).__name__, "continued": info["continued"],
                  "new_weights": info["new_weights"],
                  "parameters": sum(p.numel() for p in kept.parameters()),
                  **({"generator_parameters": sum(p.numel() for n, p in model.generator.named_parameters()
                                                  if "word_embeddings" not in n),
                      "generator": model.generator.config.to_diff_dict()} if args.objective == "rtd" else {})},
        "train": train_result.metrics,
        "train_seconds": round(seconds, 1),
        "eval": eval_metrics,
        "log_history": trainer.state.log_history,
    }
    with open(os.path.join(output_dir, RESULTS_FILE), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, default=str)
    logger.info(f"Pretrained ({args.objective}) in {seconds:.0f}s; held-out: {eval_metrics}; saved to {output_dir}.")
    return report


__all__ = [
    "PRESETS",
    "PRETRAINING_DEFAULTS",
    "PretrainingArguments",
    "RTDObjective",
    "RTDTrainer",
    "build_mlm_model",
    "build_rtd_model",
    "check_tokenizer",
    "default_pretraining_arguments",
    "discriminator_config",
    "generator_config",
    "load_discriminator",
    "pretrain",
    "rtd_collator",
    "rtd_metrics",
]
