"""LoRA on the members of a multi-encoder, through peft (the optional extra `hf_multiencoder[peft]`).

Each architecture names its attention projections differently (BERT `attention.self.query`, DistilBERT
`attention.q_lin`, MPNet `attention.attn.q`), so the target modules are chosen per member, by a regular expression
over the module names inside that member. The fusion and the head are new, so they train fully (peft's
`modules_to_save`); everything else is frozen::

    model = MultiEncoderForSequenceClassification.from_encoders(names, fusion="dme", num_labels=2)
    peft_model = get_multiencoder_lora_model(model, r=8, lora_alpha=16)          # LoRA in every member
    optimizer = create_multiencoder_optimizer(peft_model, args)                  # groups by member, as usual
    ... Trainer(peft_model, args, optimizers=(optimizer, None), ...).train()
    peft_model.save_pretrained("out/adapter")                                    # adapters + fusion + head
    merged = peft_model.merge_and_unload()                                       # an ordinary multi-encoder
    merged.save_pretrained("out")                                                # loads with trust_remote_code

Training-side helper (imports peft, lazily): not shipped with the weights.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from torch import nn

from ..models.modeling_multiencoder import multiencoder_base

# Attention projections by member `model_type`, as regexes over module names inside the member (re.fullmatch).
# Query and value, as peft's own defaults and the LoRA paper; other architectures fall back to peft's mapping.
MEMBER_LORA_TARGETS = {
    "bert": r".*\.attention\.self\.(query|value)",
    "roberta": r".*\.attention\.self\.(query|value)",
    "xlm-roberta": r".*\.attention\.self\.(query|value)",
    "camembert": r".*\.attention\.self\.(query|value)",
    "electra": r".*\.attention\.self\.(query|value)",
    "distilbert": r".*\.attention\.(q_lin|v_lin)",
    "mpnet": r".*\.attention\.attn\.(q|v)",
    "deberta-v2": r".*\.attention\.self\.(query_proj|value_proj)",
}


def _require_peft():
    try:
        import peft
    except ImportError as err:
        raise ImportError("LoRA needs peft: pip install 'hf_multiencoder[peft]' (or pip install peft).") from err
    return peft


def default_lora_target(model_type: str) -> str:
    """The attention projections of a member type, as a regex over its module names."""
    if model_type in MEMBER_LORA_TARGETS:
        return MEMBER_LORA_TARGETS[model_type]
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_defaults

    if model_type in peft_defaults:
        return r"(.*\.)?(" + "|".join(re.escape(name) for name in peft_defaults[model_type]) + ")"
    raise ValueError(f"No default LoRA target modules for members of type {model_type!r}: give a regex over the "
                     f"member's module names (e.g. `.*\\.attention\\..*\\.query`).")


def _member_prefixes(model: nn.Module) -> list[str]:
    """The qualified name of each member inside `model` (a head, a MultiEncoderModel or a wrapper), found by
    identity."""
    base = multiencoder_base(model)
    names = {id(module): name for name, module in model.named_modules()}
    return [names[id(member)] for member in base.encoders]


def lora_target_modules(model: nn.Module, members: Sequence[int | str] | None = None,
                        target_modules: Sequence[str] | str | None = None) -> str:
    """One regex (peft's `target_modules`, matched with `re.fullmatch` on module names) that selects, in each member of
    `members` (default: all), the modules its own regex names (default: its attention query and value projections).

    Args:
        members: indices or display names of the members to adapt.
        target_modules: one regex per member of `members` (or one for all), matched with `re.fullmatch` against the
            module names inside the member (`encoder.layer.0.attention.self.query`).

    Raises a `ValueError` naming the member whose regex matches no `nn.Linear` in it.
    """
    base = multiencoder_base(model)
    config = base.config
    indices = list(range(config.num_encoders)) if members is None else [config.encoder_index(m) for m in members]
    if len(set(indices)) != len(indices):
        raise ValueError(f"LoRA members {list(members)} name a member twice.")
    if not indices:
        raise ValueError("No LoRA members given.")
    if target_modules is None:
        targets = [default_lora_target(base.encoders[i].config.model_type) for i in indices]
    elif isinstance(target_modules, str):
        targets = [target_modules] * len(indices)
    else:
        targets = list(target_modules)
        if len(targets) == 1:
            targets = targets * len(indices)
        if len(targets) != len(indices):
            raise ValueError(f"{len(targets)} LoRA target regexes for {len(indices)} LoRA members: give one, or one "
                             f"per member.")
    prefixes = _member_prefixes(model)
    parts = []
    for i, target in zip(indices, targets):
        try:
            pattern = re.compile(target)
        except re.error as err:
            raise ValueError(f"LoRA target regex {target!r} for member {i} ({config.encoder_names[i]}) is not a "
                             f"regular expression: {err}.") from err
        linear = [name for name, module in base.encoders[i].named_modules() if isinstance(module, nn.Linear)]
        if not any(pattern.fullmatch(name) for name in linear):
            shown = ", ".join(linear[:4]) + (", ..." if len(linear) > 4 else "")
            raise ValueError(f"LoRA target regex {target!r} matches no linear layer of member {i} "
                             f"({config.encoder_names[i]}, {base.encoders[i].config.model_type}); its linear layers "
                             f"are named like: {shown}.")
        parts.append(f"{re.escape(prefixes[i])}\\.(?:{target})")
    return "|".join(f"(?:{p})" for p in parts)


def modules_to_save(model: nn.Module) -> list[str]:
    """Qualified names of what is not a member and has weights: the fusion (and its LayerNorm) and the head."""
    base = multiencoder_base(model)
    members = {id(p) for member in base.encoders for p in member.parameters()}
    names = []
    for name, module in model.named_modules():
        if not name or module is base or any(id(p) in members for p in module.parameters()):
            continue  # the model itself, the base, members and the containers holding them
        if any(True for _ in module.parameters()) and not any(name.startswith(n + ".") for n in names):
            names.append(name)
    return names


def get_multiencoder_lora_model(
    model: nn.Module,
    r: int = 8,
    lora_alpha: float | None = None,
    members: Sequence[int | str] | None = None,
    target_modules: Sequence[str] | str | None = None,
    lora_dropout: float = 0.0,
    **lora_kwargs,
):
    """Wrap a multi-encoder in a peft `PeftModel` with LoRA in the attention of `members` (default: all), the
    fusion and the head trained fully (`modules_to_save`), everything else frozen.

    Args:
        r, lora_alpha, lora_dropout: LoRA's rank, scale (default `2 * r`) and dropout.
        members, target_modules: see [`lora_target_modules`].
        lora_kwargs: more `peft.LoraConfig` fields (`use_rslora`, `init_lora_weights`, ...).

    Returns:
        The `PeftModel`. [`create_multiencoder_optimizer`] groups its trainable parameters by member as usual
        (LoRA weights under their member's rate, fusion and head under the head's).
    """
    peft = _require_peft()
    if r < 1:
        raise ValueError(f"LoRA rank `r` must be a positive integer, got {r}.")
    config = peft.LoraConfig(
        r=r,
        lora_alpha=2 * r if lora_alpha is None else lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=lora_target_modules(model, members, target_modules),
        modules_to_save=modules_to_save(model),
        **lora_kwargs,
    )
    return peft.get_peft_model(model, config)


def is_peft_model(model: nn.Module) -> bool:
    """Whether `model` is a peft `PeftModel` (False where peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


ADAPTER_FOLDER = "adapter"


def merge_lora_after_training(trainer, adapter_dir: str | None = None):
    """End of a LoRA run: save the adapters (LoRA weights, fusion and head: peft's folder) to `adapter_dir` (default
    `output_dir/adapter`), merge them into the members (`merge_and_unload`) and hand the Trainer the merged model, an
    ordinary multi-encoder: `trainer.save_model()` then writes what a user deploys, and later evaluations score it.

    Every process merges (each holds the whole model under DDP); only the main process writes. Returns the merged
    model.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    if not is_peft_model(model):
        raise ValueError(f"The Trainer's model is a {type(model).__name__}, not a peft model: nothing to merge.")
    if getattr(trainer, "is_fsdp_enabled", False):
        raise ValueError("Merging LoRA adapters of an FSDP-sharded model is not supported: train LoRA with DDP "
                         "(its frozen members need no sharding of optimizer state).")
    adapter_dir = adapter_dir or os.path.join(trainer.args.output_dir, ADAPTER_FOLDER)
    if trainer.is_world_process_zero():
        model.save_pretrained(adapter_dir)
    merged = model.merge_and_unload()
    trainer.model = trainer.model_wrapped = merged
    trainer.accelerator.wait_for_everyone()
    return merged


__all__ = ["ADAPTER_FOLDER", "MEMBER_LORA_TARGETS", "default_lora_target", "get_multiencoder_lora_model",
           "is_peft_model", "lora_target_modules", "merge_lora_after_training", "modules_to_save"]
