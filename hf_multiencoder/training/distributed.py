"""Several processes or GPUs: checks that turn a wrong FSDP setting into a clear error before training starts.

The engines are the ecosystem's own: `torchrun` / `accelerate launch` with the stock Trainer (DDP, FSDP). The model
sets `_no_split_modules` per instance to its members' layer classes (`member_layer_classes`), which FSDP's
auto-wrap shards as units; [`check_fsdp_layer_classes`] refuses class names the model does not have.

Training-side helper: not shipped with the weights.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import nn

from ..models.modeling_multiencoder import member_layer_classes, multiencoder_base


def check_fsdp_layer_classes(model: nn.Module, class_names: Iterable[str] | str | None) -> list[str]:
    """The FSDP auto-wrap classes (`fsdp_transformer_layer_cls_to_wrap`), checked against the model: returns them
    (the members' layer classes when none are given), or raises a `ValueError` naming the classes the model does
    not have and, per member, the layer classes it does have."""
    base = multiencoder_base(model)
    if isinstance(class_names, str):
        class_names = [name.strip() for name in class_names.split(",") if name.strip()]
    if not class_names:
        return member_layer_classes(base.encoders)
    present = {type(m).__name__ for m in model.modules()}
    unknown = [name for name in class_names if name not in present]
    if unknown:
        per_member = "; ".join(f"{name}: {', '.join(member_layer_classes([member]))}"
                               for name, member in zip(base.config.encoder_names, base.encoders))
        raise ValueError(f"FSDP layer class(es) {unknown} are not in this model. Its members' layer classes are "
                         f"{per_member}. Leave fsdp_transformer_layer_cls_to_wrap unset to wrap those (the model's "
                         f"_no_split_modules), or name some of them.")
    return list(class_names)


__all__ = ["check_fsdp_layer_classes"]
