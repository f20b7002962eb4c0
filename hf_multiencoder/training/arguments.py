"""What the run scripts share about their arguments (run_glue_multi.py, run_multitask.py, run_mlm_multi.py,
run_pretraining.py): the members' and fusion's `ModelArguments`, a leading YAML/JSON config file turned into
command-line arguments (`config_file_argv`), the train-and-evaluate default, and the tokenizer and `from_encoders`
arguments those model arguments give. As transformers keeps `HfArgumentParser` in the library: no script imports
another script.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

import yaml
from transformers import HfArgumentParser

from ..models.tokenization_multiencoder import MultiEncoderTokenizer
from .fast_path import fast_path_field

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    encoders: list[str] | None = field(
        default=None, metadata={"help": "Member checkpoints: Hub names or folders that AutoModel accepts."}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A saved multi-encoder to start from instead of `encoders`."}
    )
    encoder_names: list[str] | None = field(default=None, metadata={"help": "Display names of the members."})
    fusion: str = field(default="dme", metadata={"help": "concat, dme, cdme or mean."})
    fusion_dim: int | None = field(default=None, metadata={"help": "Common projection size (default: widest)."})
    fusion_gating: str = field(default="softmax", metadata={"help": "softmax or sigmoid."})
    fusion_layer_norm: bool = field(default=False, metadata={"help": "LayerNorm after fusion."})
    pooling: list[str] = field(
        default_factory=lambda: ["mean"], metadata={"help": "cls, mean, last4 or last4_mean; one or one per member."}
    )
    word_pooling: str = field(default="first", metadata={"help": "Token tasks: first or mean subword per word."})
    encoder_dropout: list[float] | None = field(
        default=None, metadata={"help": "Hidden dropout per member (one value or one per member)."}
    )
    fusion_dropout: float = field(default=0.1, metadata={"help": "Dropout on the fused vector."})
    classifier_dropout: float | None = field(default=None, metadata={"help": "Extra dropout before the head."})
    encoder_learning_rates: list[float] | None = field(
        default=None, metadata={"help": "One learning rate per member (default: --learning_rate)."}
    )
    head_learning_rate: float | None = field(
        default=None, metadata={"help": "Learning rate of fusion + classifier (the head); default learning_rate."}
    )
    layerwise_lr_decay: float | None = field(default=None, metadata={"help": "Layer-wise LR decay inside members."})
    freeze_encoders: list[str] | None = field(
        default=None, metadata={"help": "Members to freeze, by index or name (head-only baseline)."}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where to store downloaded checkpoints."})
    lora_r: int | None = field(
        default=None, metadata={"help": "Train LoRA adapters of this rank in the members' attention (needs peft) "
                                        "instead of the members' weights; fusion and head train fully. The output "
                                        "folder holds the merged model, the adapters are in its adapter/."}
    )
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA scale alpha (default 2 * lora_r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA path."})
    lora_members: list[str] | None = field(
        default=None, metadata={"help": "Members that get LoRA, by index or name (default: all not frozen); the "
                                        "others stay frozen."}
    )
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Regex over module names inside a member (re.fullmatch), one for all or one "
                                        "per LoRA member (default: each member's attention query and value)."}
    )
    adaptive_mlm_epochs: float = field(
        default=0.0, metadata={"help": "Task-adaptive pretraining first: epochs of masked-LM adaptation of the "
                                       "members on the task's training texts (0: none). See run_mlm_multi.py."}
    )
    adaptive_mlm_learning_rate: float = field(default=1e-5, metadata={"help": "Members' rate in that adaptation."})
    adaptive_mlm_members: list[str] | None = field(
        default=None, metadata={"help": "Members to adapt, by index or name (default: all)."}
    )
    fast_path: str = fast_path_field()
    frozen_feature_cache: str | None = field(
        default=None, metadata={"help": "A folder: run the frozen members (--freeze_encoders) once and train the head "
                                        "on their stored vectors (members in eval mode; reused across seeds)."}
    )

    def __post_init__(self):
        if not self.encoders and not self.model_name_or_path:
            raise ValueError("Give `encoders` (a list of member checkpoints) or `model_name_or_path`.")
        if self.lora_r is None:
            given = [name for name in ("lora_alpha", "lora_members", "lora_target_modules") if getattr(self, name)]
            if given:
                raise ValueError(f"--{given[0]} is a LoRA option: give --lora_r too.")
        elif self.lora_r < 1:
            raise ValueError(f"--lora_r must be a positive rank, got {self.lora_r}.")
        if not self.adaptive_mlm_epochs >= 0:  # NaN too
            raise ValueError(f"--adaptive_mlm_epochs must be >= 0 (0: no adaptation), got {self.adaptive_mlm_epochs}.")
        if self.encoders:
            check_member_lists(self, len(self.encoders))
            twice = sorted({e for e in self.encoders if self.encoders.count(e) > 1})
            if twice and not self.encoder_names:
                raise ValueError(f"--encoders names {twice} more than once: pass --encoder_names to tell the members "
                                 f"apart (one name per member).")
        if len(self.pooling) == 1:
            self.pooling = self.pooling[0]
        if self.encoder_dropout is not None and len(self.encoder_dropout) == 1:
            self.encoder_dropout = self.encoder_dropout[0]


# Options that hold one value per member, in member order: they belong to the members they were written for.
MEMBER_OPTIONS = ("encoder_names", "encoder_learning_rates", "encoder_dropout", "pooling", "freeze_encoders",
                  "lora_members", "lora_target_modules", "adaptive_mlm_members")
# of those, the ones that must have exactly one value per member (the others: one value for all, or one per member)
_ONE_PER_MEMBER = ("encoder_names", "encoder_learning_rates")
_ONE_OR_PER_MEMBER = ("encoder_dropout", "pooling")


def check_member_lists(args, n_members: int) -> None:
    """Raise a `ValueError` naming a per-member option whose length does not fit the `n_members` members."""
    for name in (*_ONE_PER_MEMBER, *_ONE_OR_PER_MEMBER):
        values = getattr(args, name, None)
        if values is None or isinstance(values, (str, int, float)):
            continue
        allowed = (n_members,) if name in _ONE_PER_MEMBER else (1, n_members)
        if len(values) not in allowed:
            need = f"{n_members}" if name in _ONE_PER_MEMBER else f"1 or {n_members}"
            raise ValueError(f"--{name} has {len(values)} value(s) ({list(values)}) for {n_members} member(s) "
                             f"(--encoders): give {need}.")


def check_run_limits(args) -> None:
    """The options of a run script's data arguments that must be positive or distinct: `--seeds` without repeats,
    `--max_train_samples` / `--max_eval_samples` / `--max_predict_samples` of at least 1."""
    seeds = getattr(args, "seeds", None)
    if seeds and len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {' '.join(map(str, seeds))} repeats a seed: each seed is one run (and folder).")
    for name in ("max_train_samples", "max_eval_samples", "max_predict_samples"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be at least 1 (leave it out for all examples), got {value}.")


def check_max_seq_length(value: int, option: str = "--max_seq_length") -> None:
    """Raise a `ValueError` for a length that holds no text (0 or 1 would silently become the member's maximum)."""
    if value is None or value < 2:
        raise ValueError(f"{option} must be at least 2 (a special token and a subword), got {value}.")


def _option_values(argv: list[str], name: str) -> list[str] | None:
    """The values given to `--name` on a command line (the last occurrence), or None."""
    found = None
    for i, token in enumerate(argv):
        if token == f"--{name}":
            values = []
            for value in argv[i + 1:]:
                if value.startswith("--"):
                    break
                values.append(value)
            found = values
        elif token.startswith(f"--{name}="):
            found = [token.split("=", 1)[1]]
    return found


def check_member_override(config: dict, argv: list[str], path: str) -> None:
    """Raise a `ValueError` when the command line replaces the config file's `encoders` but not the per-member
    options the file wrote for its own members (names, learning rates, dropout, pooling, ...): they would silently
    label and train the new members as the old ones."""
    given = _option_values(argv, "encoders")
    if given is None or "encoders" not in config or [str(e) for e in (config["encoders"] or [])] == given:
        return
    stale = []
    for name in MEMBER_OPTIONS:
        value = config.get(name)
        if value is None or _option_values(argv, name) is not None:
            continue
        if name in _ONE_OR_PER_MEMBER and not (isinstance(value, (list, tuple)) and len(value) > 1):
            continue  # one value for every member: not tied to the config's members
        stale.append(name)
    if stale:
        raise ValueError(f"The command line replaces the members of {path} (--encoders {' '.join(given)}) but not "
                         f"its per-member option(s) {', '.join(stale)}, written for its members "
                         f"{config['encoders']}: give {', '.join('--' + n for n in stale)} for the new members on the "
                         f"command line too.")


# ---- config file + overrides --------------------------------------------------------------------------------------
def config_to_argv(config: dict) -> list[str]:
    """Turn a config mapping into command-line arguments (argparse keeps the last occurrence, so CLI wins)."""
    argv = []
    for key, value in config.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            argv += [f"--{key}", *[str(v) for v in value]]
        elif isinstance(value, dict):
            argv += [f"--{key}", json.dumps(value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def config_file_argv(parser: HfArgumentParser, argv: list[str]) -> list[str]:
    """A leading YAML/JSON config file becomes arguments (the command line after it wins); unknown keys are an error.
    run_mlm_multi.py and run_multitask.py read their config files the same way."""
    if argv and argv[0].endswith((".yaml", ".yml", ".json")):
        path = argv.pop(0)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Config file {path} does not exist.")
        with open(path, encoding="utf-8") as f:
            config = json.load(f) if path.endswith(".json") else yaml.safe_load(f)
        if not isinstance(config, dict):
            raise ValueError(f"Config file {path} must hold a mapping of argument names to values.")
        known = {a.dest for a in parser._actions}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"Unknown argument(s) in {path}: {', '.join(unknown)}.")
        check_member_override(config, argv, path)
        argv = config_to_argv(config) + argv
    return argv


def metric_for_best_model_given(argv: list[str]) -> bool:
    return any(a == "--metric_for_best_model" or a.startswith("--metric_for_best_model=") for a in argv)


def default_to_train_and_eval(training_args, argv: list[str]) -> None:
    """No --do_train, --do_eval or --do_predict on the command line: train and evaluate."""
    given = {a.split("=", 1)[0] for a in argv}
    if not given & {"--do_train", "--do_eval", "--do_predict"}:
        # no action asked for (TrainingArguments turns do_eval on by itself when an eval_strategy is set): a task
        # given means train and evaluate, not an evaluation of untrained heads
        training_args.do_train = training_args.do_eval = True
        logger.warning("Neither --do_train, --do_eval nor --do_predict given: training and evaluating.")


def build_tokenizer(model_args: ModelArguments):
    if model_args.model_name_or_path:
        return MultiEncoderTokenizer.from_pretrained(model_args.model_name_or_path, cache_dir=model_args.cache_dir)
    return MultiEncoderTokenizer.from_encoders(model_args.encoders, encoder_names=model_args.encoder_names,
                                               **({"cache_dir": model_args.cache_dir} if model_args.cache_dir else {}))


def from_encoders_kwargs(model_args: ModelArguments, tokenizer: MultiEncoderTokenizer) -> dict:
    """The `from_encoders` arguments the model arguments set: member names and the fusion, pooling and dropout
    options, and the fingerprints of the run's tokenizer (built from the same members: `from_encoders` need not load
    each member's tokenizer a second time to record them)."""
    return {
        "tokenizer_fingerprints": tokenizer.member_fingerprints(),
        "encoder_names": model_args.encoder_names,
        "encoder_kwargs": {"cache_dir": model_args.cache_dir} if model_args.cache_dir else None,
        "fusion": model_args.fusion,
        "fusion_dim": model_args.fusion_dim,
        "fusion_gating": model_args.fusion_gating,
        "fusion_layer_norm": model_args.fusion_layer_norm,
        "fusion_dropout": model_args.fusion_dropout,
        "pooling": model_args.pooling,
        "word_pooling": model_args.word_pooling,
        "encoder_dropout": model_args.encoder_dropout,
        "classifier_dropout": model_args.classifier_dropout,
    }
