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
        if len(self.pooling) == 1:
            self.pooling = self.pooling[0]
        if self.encoder_dropout is not None and len(self.encoder_dropout) == 1:
            self.encoder_dropout = self.encoder_dropout[0]


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
