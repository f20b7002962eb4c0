#!/usr/bin/env python
"""Fine-tune one multi-encoder on several tasks at once (shared members and fusion, one head per task), with the
stock Trainer: every optimizer step trains one task, picked by a sampling schedule (MT-DNN style).

    python run_multitask.py configs/multitask/conll_trec.yaml [--any_argument value ...]

The first argument may be a YAML or JSON file holding any of the arguments below; command-line arguments override
it (mappings such as `--tasks` take JSON). Tasks are registered task names (`hf_multiencoder.data.tasks`); the model,
member and Trainer options are `run_glue_multi.py`'s.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field

import torch
from accelerate import PartialState
from transformers import EarlyStoppingCallback, HfArgumentParser, TrainingArguments, set_seed

from hf_multiencoder import MultiEncoderForMultiTask, create_multiencoder_optimizer, freeze_encoders
from hf_multiencoder.data.tasks import TASKS, import_task_modules
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
from hf_multiencoder.training.fast_path import apply_fast_path
from hf_multiencoder.training.multitask import (
    MULTITASK_SCORE,
    SAMPLING_SCHEDULES,
    FreezeHeadsCallback,
    MultiTaskTrainer,
    freeze_all_but_head,
    freeze_heads,
    load_multitask_data,
    task_heads,
)
from hf_multiencoder.training.results import format_summary, mean_by_key, summarize
from hf_multiencoder.training.runs import prepare_runs, setup_run, start_seed_run, train_and_save

logger = logging.getLogger(__name__)

_TASK_KEYS = ("task_name", "max_train_samples", "max_eval_samples")
_FREEZE_KEYS = ("encoders", "heads", "all_but_head", "heads_after")


def _mapping(value, name: str) -> dict | None:
    """A mapping argument: a dict (from a config file) or its JSON text (from the command line)."""
    if value is None or isinstance(value, dict):
        return value
    try:
        value = json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"`{name}` must be a mapping (JSON on the command line), got {value!r}: {err}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"`{name}` must be a mapping, got {value!r}.")
    return value


@dataclass
class MultiTaskArguments:
    task_module: list[str] | None = field(
        default=None, metadata={"help": "Python module(s) (dotted names or .py files) imported first: tasks they "
                                        "add with register_task(...) can be named in --tasks."}
    )
    tasks: dict | str | None = field(
        default=None, metadata={"help": "The tasks: {head name: registered task name, or {task_name: ..., "
                                        "max_train_samples: ..., max_eval_samples: ...}}. "
                                        f"Registered tasks: {', '.join(TASKS)}."}
    )
    data_dir: str | None = field(default=None, metadata={"help": "The data folder (default ../shared/data)."})
    max_seq_length: int = field(default=128, metadata={"help": "Maximum subword length, per member."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Default training subset of every task."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Default evaluation subset of every task."})
    task_sampling: str = field(
        default="proportional", metadata={"help": f"Which task each step trains: {', '.join(SAMPLING_SCHEDULES)}."}
    )
    sampling_temperature: float = field(default=2.0, metadata={"help": "T of `temperature` sampling: p ∝ n^(1/T)."})
    loss_weights: dict | str | None = field(default=None, metadata={"help": "{task: weight} of the training loss."})
    task_score_weights: dict | str | None = field(
        default=None, metadata={"help": "{task: weight} of the tasks' main metrics in multitask_score (default "
                                        "equal: the best checkpoint is chosen by their mean)."}
    )
    freeze: dict | str | None = field(
        default=None, metadata={"help": "{encoders: [members], heads: [tasks], all_but_head: task, "
                                        "heads_after: {task: optimizer steps}}."}
    )
    seeds: list[int] | None = field(
        default=None, metadata={"help": "Train once per seed and write a results table (median, mean, std)."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Start afresh in a non-empty --output_dir (its old checkpoints are deleted). "
                                         "Without it a non-empty output folder is an error, unless resuming."}
    )
    early_stopping_patience: int | None = field(default=None, metadata={"help": "Evaluations without gain to stop."})

    def __post_init__(self):
        import_task_modules(self.task_module)
        check_max_seq_length(self.max_seq_length)
        check_run_limits(self)
        tasks = _mapping(self.tasks, "tasks")
        if not tasks:
            raise ValueError("Give `tasks`: a mapping {head name: registered task name, ...}.")
        self.tasks = {}
        for name, task in tasks.items():
            task = {"task_name": task} if isinstance(task, str) else dict(task or {})
            unknown = sorted(set(task) - set(_TASK_KEYS))
            if unknown or "task_name" not in task:
                raise ValueError(f"Task {name!r}: give `task_name` (and optionally max_train_samples, "
                                 f"max_eval_samples); got {sorted(task)}.")
            key = str(task["task_name"]).lower()
            if key not in TASKS:
                raise ValueError(f"Task {name!r}: unknown task {task['task_name']!r}; known tasks: "
                                 f"{', '.join(TASKS)}.")
            self.tasks[name] = task
        if self.task_sampling not in SAMPLING_SCHEDULES:
            raise ValueError(f"Unknown task_sampling {self.task_sampling!r}; allowed values are: "
                             f"{', '.join(SAMPLING_SCHEDULES)}.")
        self.loss_weights = _mapping(self.loss_weights, "loss_weights")
        if self.loss_weights:
            bad = {t: w for t, w in self.loss_weights.items()
                   if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0}
            if bad:
                raise ValueError(f"--loss_weights must be finite numbers >= 0; got {bad}.")
            if all(self.loss_weights.get(task, 1.0) == 0 for task in self.tasks):
                raise ValueError(f"--loss_weights {self.loss_weights} are all 0: no task would train. Give at least "
                                 f"one task a positive weight.")
        self.task_score_weights = _mapping(self.task_score_weights, "task_score_weights")
        self.freeze = _mapping(self.freeze, "freeze") or {}
        unknown = sorted(set(self.freeze) - set(_FREEZE_KEYS))
        if unknown:
            raise ValueError(f"Unknown key(s) {unknown} in `freeze`; allowed keys are: {', '.join(_FREEZE_KEYS)}.")
        for key in ("loss_weights", "task_score_weights"):
            extra = sorted(set(getattr(self, key) or {}) - set(self.tasks))
            if extra:
                raise ValueError(f"`{key}` names task(s) {extra} that are not among the tasks {list(self.tasks)}.")
        named = [*(self.freeze.get("heads") or []), *(self.freeze.get("heads_after") or {})]
        if self.freeze.get("all_but_head"):
            named.append(self.freeze["all_but_head"])
        extra = sorted(set(named) - set(self.tasks))
        if extra:
            raise ValueError(f"`freeze` names task(s) {extra} that are not among the tasks {list(self.tasks)}.")


def parse_args(argv: list[str] | None = None):
    parser = HfArgumentParser((ModelArguments, MultiTaskArguments, TrainingArguments), description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    argv = config_file_argv(parser, list(sys.argv[1:] if argv is None else argv))
    model_args, task_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    default_to_train_and_eval(training_args, argv)
    apply_fast_path(training_args, argv, model_args.fast_path)
    if model_args.adaptive_mlm_epochs or model_args.frozen_feature_cache or model_args.lora_r:
        raise ValueError("run_multitask.py does not support --adaptive_mlm_epochs, --frozen_feature_cache or --lora_r "
                         "(single-task options of run_glue_multi.py): adapt the members first with run_mlm_multi.py "
                         "and pass the adapted members as --encoders.")
    if not metric_for_best_model_given(argv):
        # the best checkpoint is the one with the best combination of the tasks' main metrics
        training_args.metric_for_best_model = MULTITASK_SCORE
        training_args.greater_is_better = True
    return model_args, task_args, training_args


# ---- model ----------------------------------------------------------------------------------------------------
def build_model(model_args: ModelArguments, specs, tokenizer) -> MultiEncoderForMultiTask:
    """Members from `--encoders` (or a saved multi-task model) with a head per task from the registry."""
    tasks = task_heads(specs)
    if model_args.model_name_or_path:
        return MultiEncoderForMultiTask.from_pretrained(model_args.model_name_or_path, tasks=tasks,
                                                        cache_dir=model_args.cache_dir)
    return MultiEncoderForMultiTask.from_encoders(model_args.encoders, tasks=tasks,
                                                  **from_encoders_kwargs(model_args, tokenizer))


def apply_freezing(model, model_args: ModelArguments, task_args: MultiTaskArguments) -> list:
    """Freeze what `--freeze` (and `--freeze_encoders`) ask; returns the callbacks of scheduled freezing."""
    spec = task_args.freeze
    members = [*(model_args.freeze_encoders or []), *(spec.get("encoders") or [])]
    if members:
        frozen = freeze_encoders(model, members)
        logger.info(f"Frozen members: {[model.config.encoder_names[i] for i in frozen]}")
    if spec.get("heads"):
        logger.info(f"Frozen heads: {freeze_heads(model, spec['heads'])}")
    if spec.get("all_but_head"):
        trainable = freeze_all_but_head(model, spec["all_but_head"])
        logger.info(f"Everything frozen but the head of {spec['all_but_head']!r}: {trainable}")
    return [FreezeHeadsCallback(spec["heads_after"])] if spec.get("heads_after") else []


# ---- one run --------------------------------------------------------------------------------------------------
def train_one(model_args, task_args, training_args, data, specs, tokenizer) -> dict:
    set_seed(training_args.seed)
    model = build_model(model_args, specs, tokenizer)
    tokenizer.check_model(model)
    callbacks = apply_freezing(model, model_args, task_args)
    if task_args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=task_args.early_stopping_patience))
    model.to(training_args.device)
    optimizer = create_multiencoder_optimizer(
        model, training_args, encoder_learning_rates=model_args.encoder_learning_rates,
        head_learning_rate=model_args.head_learning_rate, layerwise_lr_decay=model_args.layerwise_lr_decay,
    ) if training_args.do_train else None
    if training_args.do_eval and not data["validation"]:
        raise ValueError("--do_eval needs validation data; none of the tasks has a validation split.")
    trainer = MultiTaskTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"] if training_args.do_train else None,
        eval_dataset=data["validation"] or None,
        processing_class=tokenizer,
        task_specs=specs,
        task_sampling=task_args.task_sampling,
        sampling_temperature=task_args.sampling_temperature,
        loss_weights=task_args.loss_weights,
        task_score_weights=task_args.task_score_weights,
        optimizers=(optimizer, None),
        callbacks=callbacks,
    )
    card_data = trainer.model_card_data
    logger.info(f"Tasks are picked by {trainer.describe_sampling()}; multitask_score = {trainer.describe_score()}")
    result = {"seed": training_args.seed}
    start = time.time()
    if training_args.do_train:
        train_and_save(trainer, training_args)
        sampler = trainer.task_sampler or trainer.build_task_sampler()  # a finished run resumed: not trained again
        result["task_steps"] = sampler.task_counts(trainer.state.global_step)
        logger.info(f"Optimizer steps per task: {result['task_steps']}")
    result["train_seconds"] = round(time.time() - start, 1)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        result["eval"] = metrics
        result["scores"] = {task: metrics.get(f"eval_{task}_{spec.main_metric}") for task, spec in specs.items()}
        result[MULTITASK_SCORE] = metrics.get(f"eval_{MULTITASK_SCORE}")
        result["fusion_weights"] = card_data.task_fusion_weights.get(card_data.eval_split)
        history = [e for e in trainer.state.log_history if f"eval_{MULTITASK_SCORE}" in e]
        result["best_multitask_score"] = max((e[f"eval_{MULTITASK_SCORE}"] for e in history), default=None)
    card_kwargs = {"tasks": "feature-extraction"}
    if training_args.push_to_hub:
        trainer.push_to_hub(**card_kwargs)
    else:
        trainer.create_model_card(**card_kwargs)
    del trainer, model
    return result


def write_results_table(results: list[dict], specs, task_args, model_args, output_dir: str) -> dict:
    """`results.json` and `results.md`: each task's main metric (x100) per seed, and their summaries."""
    table = {
        "tasks": {task: {"task_name": spec.name, "metric": spec.main_metric,
                         "final": summarize((r["scores"].get(task) for r in results), scale=100)}
                  for task, spec in specs.items()},
        MULTITASK_SCORE: summarize((r.get(MULTITASK_SCORE) for r in results), scale=100),
        "task_sampling": task_args.task_sampling,
        "sampling_temperature": task_args.sampling_temperature if task_args.task_sampling == "temperature" else None,
        "freeze": task_args.freeze,
        "members": model_args.encoder_names or model_args.encoders or [model_args.model_name_or_path],
        "fusion": model_args.fusion,
        "mean_fusion_weights": {task: mean_by_key((r.get("fusion_weights") or {}).get(task) for r in results)
                                for task in specs},
        "runs": results,
    }
    with open(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump(table, f, indent=2)
    tasks = list(specs)
    lines = [f"# {', '.join(tasks)}: main metrics x100, {len(results)} seed(s), {task_args.task_sampling} sampling",
             "",
             "| seed | " + " | ".join(f"{t} {specs[t].main_metric}" for t in tasks) + " | steps per task | train s |",
             "|---" * (len(tasks) + 3) + "|"]
    for r in results:
        scores = " | ".join("-" if r["scores"].get(t) is None else f"{r['scores'][t] * 100:.2f}" for t in tasks)
        steps = ", ".join(f"{t} {n}" for t, n in (r.get("task_steps") or {}).items())
        lines.append(f"| {r['seed']} | {scores} | {steps} | {r['train_seconds']} |")
    lines.append("")
    for task in tasks:
        lines.append(f"{task} {specs[task].main_metric}: {format_summary(table['tasks'][task]['final'])}  ")
    with open(os.path.join(output_dir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return table


def main(argv: list[str] | None = None) -> dict:
    model_args, task_args, training_args = parse_args(argv)
    setup_run(training_args, logger.name)
    seeds, base_output, run_args, resuming = prepare_runs(model_args, task_args, training_args)
    tokenizer = build_tokenizer(model_args)
    with training_args.main_process_first(desc="dataset map pre-processing"):
        data, specs = load_multitask_data(
            {name: task["task_name"] for name, task in task_args.tasks.items()}, tokenizer,
            data_dir=task_args.data_dir, max_length=task_args.max_seq_length,
            max_train_samples={n: t.get("max_train_samples", task_args.max_train_samples)
                               for n, t in task_args.tasks.items()},
            max_eval_samples={n: t.get("max_eval_samples", task_args.max_eval_samples)
                              for n, t in task_args.tasks.items()},
            seed=training_args.data_seed if training_args.data_seed is not None else 0,
        )
    logger.info("Tasks: " + "; ".join(f"{name} = {spec.name} ({len(data['train'][name])} training examples)"
                                      for name, spec in specs.items()))
    results = []
    for seed in seeds:
        start_seed_run(training_args, base_output, seed, seeds, run_args, resuming, task_args.overwrite_output_dir)
        results.append(train_one(model_args, task_args, training_args, data, specs, tokenizer))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    training_args.output_dir = base_output
    table = write_results_table(results, specs, task_args, model_args, base_output) if training_args.do_eval else {}
    for task, row in table.get("tasks", {}).items():
        logger.info(f"{task} {row['metric']} x100: {format_summary(row['final'])}")
    return table


if __name__ == "__main__":
    main()
    PartialState().destroy_process_group()  # under torchrun: gloo's threads joined before exit, not aborted
