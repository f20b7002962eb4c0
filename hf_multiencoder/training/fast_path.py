"""The run scripts' precision and optimizer choice: bf16 autocast where the hardware computes bf16, the fused AdamW.

Every run script takes `--fast_path auto|off` (default `auto`):

- `auto`: bf16 mixed precision where it pays ([`bf16_pays`]: a CPU with AMX or AVX512-BF16, or a GPU with bf16),
  fp32 elsewhere; the fused AdamW (`--optim adamw_torch_fused`, the Trainer's own default from torch 2.8 on).
  An explicit `--bf16`, `--fp16` or `--optim` (on the command line or in the config file) always wins.
- `off`: what plain transformers does with the arguments given (fp32 unless `--bf16`/`--fp16`).

The environment variable `HF_MULTIENCODER_FAST_PATH=off` turns `auto` off everywhere (scripts, `encode`, the feature
cache, adaptation and pretraining defaults). The choice and its reason are logged, recorded in `run_args.json`
(`training.bf16`, `training.optim`, `training.fast_path`) and written in the model card.

Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..models.precision_multiencoder import FAST_PATH_ENV, bf16_pays, fast_path_enabled

logger = logging.getLogger(__name__)

FAST_PATH_CHOICES = ("auto", "off")
FUSED_OPTIM = "adamw_torch_fused"


FAST_PATH_HELP = ("auto: bf16 autocast where the hardware computes bf16 natively (a CPU with AMX or AVX512-BF16, a "
                  "GPU with bf16), fp32 elsewhere, and the fused AdamW; an explicit --bf16/--fp16/--optim wins. off: "
                  f"fp32 and the arguments as given. {FAST_PATH_ENV}=off in the environment also turns it off.")


def fast_path_field():
    """The `--fast_path` argument, for a script's argument dataclass."""
    return field(default="auto", metadata={"help": FAST_PATH_HELP})


@dataclass
class FastPathArguments:
    fast_path: str = fast_path_field()

    def __post_init__(self):
        if self.fast_path not in FAST_PATH_CHOICES:
            raise ValueError(f"`fast_path` must be one of {', '.join(FAST_PATH_CHOICES)}, got {self.fast_path!r}.")


def given_options(argv: list[str]) -> set[str]:
    """The `--option` names present in `argv` (`--bf16`, `--bf16=true` and `--bf16 true` alike)."""
    return {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}


def apply_fast_path(training_args, argv: list[str] | None = None, fast_path: str = "auto") -> dict:
    """Set `training_args.bf16` and `training_args.optim` as `fast_path` says (module docstring), leaving every
    option given in `argv` alone. Logs the choice and returns it (`{"fast_path", "bf16", "optim", "reason"}`) for
    `run_args.json` and the model card."""
    if fast_path not in FAST_PATH_CHOICES:
        raise ValueError(f"`fast_path` must be one of {', '.join(FAST_PATH_CHOICES)}, got {fast_path!r}.")
    given = given_options(argv or [])
    device_type = training_args.device.type
    pays, why = bf16_pays(device_type)
    if fast_path == "off" or not fast_path_enabled():
        mode = "off" if fast_path == "off" else f"off ({FAST_PATH_ENV})"
        reason = "precision and optimizer as given"
    else:
        mode = "auto"
        if given & {"bf16", "fp16"}:
            reason = "precision as given (--bf16/--fp16)"
        else:
            training_args.bf16 = pays
            # TrainingArguments derives the Trainer's `mixed_precision` in __post_init__: keep it in step
            if pays:
                training_args.mixed_precision = "bf16"
            elif getattr(training_args, "mixed_precision", "no") == "bf16":
                training_args.mixed_precision = "no"
            reason = ("bf16 autocast: " if pays else "fp32: ") + why
        if "optim" not in given and str(getattr(training_args.optim, "value", training_args.optim)) != FUSED_OPTIM:
            training_args.optim = FUSED_OPTIM
    if training_args.bf16 and device_type == "cpu" and not pays:
        logger.warning(f"--bf16 on this CPU: {why}. Leave --bf16 out (or pass --fast_path auto) for fp32.")
    choice = {"fast_path": mode, "bf16": bool(training_args.bf16), "fp16": bool(training_args.fp16),
              "optim": str(getattr(training_args.optim, "value", training_args.optim)), "reason": reason}
    training_args.fast_path_choice = choice  # read by the model card (not a TrainingArguments field)
    logger.warning(f"Precision and optimizer on {device_type}: {describe(choice)}.")
    return choice


def auto_training_kwargs(given=()) -> dict:
    """`TrainingArguments` keywords of the fast path for the library's own defaults (adaptation, pretraining):
    bf16 where it pays (with `use_cpu` on a CPU-only machine, which TrainingArguments requires for bf16 there) and the
    fused AdamW; only the fused AdamW where bf16 does not pay or the fast path is off by the environment. Keywords
    in `given` (the caller's own choices) are left to the caller: `bf16`, `fp16` or `use_cpu` there means no
    precision choice here, `optim` no optimizer choice."""
    import torch

    given = set(given)
    kwargs = {} if "optim" in given else {"optim": FUSED_OPTIM}
    if not fast_path_enabled() or given & {"bf16", "fp16", "use_cpu"}:
        return kwargs
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if bf16_pays(device_type)[0]:
        kwargs["bf16"] = True
        if device_type == "cpu":
            kwargs["use_cpu"] = True
    return kwargs


def pin_memory(use_cpu: bool = False) -> bool:
    """`dataloader_pin_memory` for this machine: only with a GPU the run uses (without one there is nothing to pin to,
    and every DataLoader warns about it)."""
    import torch

    return torch.cuda.is_available() and not use_cpu


def fast_path_choice(training_args) -> dict | None:
    """The choice [`apply_fast_path`] made for these arguments (None if it did not run)."""
    return getattr(training_args, "fast_path_choice", None)


def describe(choice: dict) -> str:
    """One line for the model card: `bf16 autocast, adamw_torch_fused (fast path auto: ...)`."""
    precision = "bf16 autocast" if choice.get("bf16") else "fp16 autocast" if choice.get("fp16") else "fp32"
    return f"{precision}, {choice.get('optim')} (fast path {choice.get('fast_path')}: {choice.get('reason')})"


__all__ = ["FAST_PATH_CHOICES", "FAST_PATH_HELP", "FastPathArguments", "apply_fast_path", "auto_training_kwargs",
           "describe", "fast_path_choice", "fast_path_field", "given_options", "pin_memory"]
