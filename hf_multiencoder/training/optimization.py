"""Optimizer factory for multi-encoders: per-member learning rates, a head ("decoder") rate, layer-wise decay.

Use it with the stock Trainer, which still builds the scheduler::

    optimizer = create_multiencoder_optimizer(model, training_args, encoder_learning_rates=[2e-5, 1e-5],
                                              head_learning_rate=1e-3)
    trainer = Trainer(model, training_args, ..., optimizers=(optimizer, None))

Every trainable parameter lands in exactly one group (the fusion layers included: the prior art's per-encoder option
left its DME layers out of the optimizer, so they never trained); frozen parameters in none. Groups are built in a
fixed order, so a checkpoint's optimizer state restores onto them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import nn
from transformers.trainer_pt_utils import get_parameter_names

from ..models.modeling_multiencoder import multiencoder_base, parameter_members

_NO_DECAY_PATTERNS = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layer|layers|block|blocks)\.(\d+)\.")


def freeze_encoders(model: nn.Module, encoders: Sequence[int | str]) -> list[int]:
    """Freeze members by index or display name (the head-only baseline). Returns the frozen indices."""
    base = multiencoder_base(model)
    indices = sorted({base.config.encoder_index(e) for e in encoders})
    for i in indices:
        for p in base.encoders[i].parameters():
            p.requires_grad_(False)
    return indices


def _member_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, k + 1 for layer k, num_layers + 1 for anything above the layers."""
    if "embeddings" in name:
        return 0
    match = _LAYER_INDEX.search(name)
    if match:
        return int(match.group(1)) + 1
    return num_layers + 1


def create_multiencoder_optimizer(
    model: nn.Module,
    training_args=None,
    *,
    encoder_learning_rates: Sequence[float] | None = None,
    head_learning_rate: float | None = None,
    learning_rate: float | None = None,
    weight_decay: float | None = None,
    layerwise_lr_decay: float | None = None,
    optimizer_cls: type[torch.optim.Optimizer] | None = None,
    **optimizer_kwargs,
) -> torch.optim.Optimizer:
    """Build an optimizer whose parameter groups give each member its own learning rate.

    Args:
        model: a `MultiEncoderFor...` head or a `MultiEncoderModel`.
        training_args: `TrainingArguments`; supplies `learning_rate`, `weight_decay` and Adam's betas/epsilon
            unless given here.
        encoder_learning_rates: one rate per member (default: `learning_rate` for all).
        head_learning_rate: rate for everything that is not a member: fusion (projections, scorer, BiLSTM),
            fusion LayerNorm and classifier (default: `learning_rate`).
        learning_rate: base rate (default: `training_args.learning_rate`, else 5e-5).
        weight_decay: applied to all weights except biases and normalisation weights (default:
            `training_args.weight_decay`, else 0).
        layerwise_lr_decay: if set (e.g. 0.9), inside each member the rate of layer k of L is
            `rate * decay ** (L - k)` (embeddings `decay ** (L + 1)`; what sits above the layers keeps `rate`).
        optimizer_cls, optimizer_kwargs: the optimizer to build and its extra arguments (default: what the stock
            Trainer builds for `training_args.optim`, e.g. the fused AdamW for `adamw_torch_fused`, its default from
            torch 2.8 on; without `training_args`, `torch.optim.AdamW`). Arguments given here win.

    Each group carries a `name` (e.g. `encoder_0.decay`, `encoder_1.no_decay.depth_3`, `head.decay`).
    """
    base = multiencoder_base(model)
    n = base.config.num_encoders
    if learning_rate is None:
        learning_rate = training_args.learning_rate if training_args is not None else 5e-5
    if weight_decay is None:
        weight_decay = training_args.weight_decay if training_args is not None else 0.0
    if encoder_learning_rates is None:
        encoder_learning_rates = [learning_rate] * n
    encoder_learning_rates = [float(lr) for lr in encoder_learning_rates]
    if len(encoder_learning_rates) != n:
        raise ValueError(f"`encoder_learning_rates` has {len(encoder_learning_rates)} rates but the model has {n} "
                         f"member encoders ({base.config.encoder_names}); give one rate per member.")
    if head_learning_rate is None:
        head_learning_rate = learning_rate
    if layerwise_lr_decay is not None and not 0 < layerwise_lr_decay <= 1:
        raise ValueError(f"`layerwise_lr_decay` must be in (0, 1], got {layerwise_lr_decay}.")
    if optimizer_cls is None and training_args is not None:
        # the Trainer's own resolver: every `--optim` is honoured as the stock Trainer honours it (with its betas,
        # epsilon, `fused`/`foreach` and `--optim_args`); the rates and weight decay are set per group below
        from transformers import Trainer

        optimizer_cls, resolved = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
        if not isinstance(optimizer_cls, type):  # a factory (GaLore, layer-wise ...): it builds its own groups
            raise ValueError(f"--optim {training_args.optim} builds its own parameter groups, so the per-member "
                             f"learning rates cannot be applied; use an AdamW-style --optim (adamw_torch_fused).")
        resolved.pop("lr", None)
        optimizer_kwargs = {**resolved, **optimizer_kwargs}
    elif optimizer_cls is None:
        optimizer_cls = torch.optim.AdamW
    if training_args is not None and optimizer_cls in (torch.optim.AdamW, torch.optim.Adam):
        optimizer_kwargs.setdefault("betas", (training_args.adam_beta1, training_args.adam_beta2))
        optimizer_kwargs.setdefault("eps", training_args.adam_epsilon)

    decay_names = set(get_parameter_names(model, [nn.LayerNorm], _NO_DECAY_PATTERNS))
    members = parameter_members(model)
    # (sort key, group name) -> (lr, weight decay, params); insertion follows named_parameters, keys fix the order.
    groups: dict[tuple, dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decays = name in decay_names
        kind = "decay" if decays else "no_decay"
        i = members[name]
        if i is not None:
            lr = encoder_learning_rates[i]
            depth_tag, sort_depth = "", 0
            if layerwise_lr_decay is not None:
                num_layers = base.encoders[i].config.num_hidden_layers
                depth = _member_depth(name, num_layers)
                lr = lr * layerwise_lr_decay ** (num_layers + 1 - depth) if depth <= num_layers else lr
                depth_tag, sort_depth = f".depth_{depth}", depth
            key = (i, sort_depth, kind)
            group_name = f"encoder_{i}.{kind}{depth_tag}"
        else:
            lr = head_learning_rate
            key = (n, 0, kind)
            group_name = f"head.{kind}"
        group = groups.setdefault(key, {"name": group_name, "lr": lr, "weight_decay": weight_decay if decays else 0.0,
                                        "params": []})
        group["params"].append(param)

    param_groups = [groups[k] for k in sorted(groups)]
    seen = [id(p) for g in param_groups for p in g["params"]]
    trainable = [id(p) for p in model.parameters() if p.requires_grad]
    if len(seen) != len(set(seen)) or set(seen) != set(trainable):  # the invariant the prior art broke
        raise RuntimeError("Optimizer groups do not cover every trainable parameter exactly once.")
    if optimizer_cls is torch.optim.AdamW and "fused" not in optimizer_kwargs and "foreach" not in optimizer_kwargs:
        # No TrainingArguments: the fused kernel where every parameter is on the GPU.
        if all(p.is_cuda for g in param_groups for p in g["params"]):
            optimizer_kwargs["fused"] = True
    if optimizer_kwargs.get("fused"):
        devices = {p.device.type for g in param_groups for p in g["params"]}
        if not devices <= {"cpu", "cuda"}:  # torch's fused AdamW runs on CPU and CUDA
            optimizer_kwargs.pop("fused")
    return optimizer_cls(param_groups, lr=learning_rate, **optimizer_kwargs)
