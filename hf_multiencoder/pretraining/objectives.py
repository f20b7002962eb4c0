"""The registry of member-pretraining objectives (as peft's `register_peft_method`): each objective registers itself
here from its own module (masked LM from `adaptation.py`, replaced-token detection from `rtd.py`), so that neither
module imports the other to be complete. `adapt_members(..., objective=name)` and `--objective` look names up here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel

    from .adaptation import AdaptationArguments


class AdaptationObjective:
    """A pretraining objective for one member: how to put a head on it, collate its batches and take the adapted
    encoder back out. Subclass it and `register_objective` it to adapt members with another objective."""

    name: str = ""
    # the loss needs the head's output at the labelled positions only (`AdaptationTrainer`)
    sparse_head: bool = False
    # the Trainer that runs this objective (a `Trainer` subclass may log the objective's own metrics)
    trainer_class: type | None = None  # None: `AdaptationTrainer`
    # the held-out loss is a masked-LM cross-entropy, whose exponential is a perplexity
    reports_perplexity: bool = False

    def check_member(self, config, name: str) -> None:
        """Raise a `ValueError` naming the member if its architecture cannot take this objective."""

    def from_checkpoint(self, checkpoint: str, **kwargs) -> tuple[PreTrainedModel, list[str]]:
        """The member with the objective's head, from its checkpoint; and the names of the head's new weights."""
        raise NotImplementedError

    def from_member(self, member: PreTrainedModel) -> tuple[PreTrainedModel, list[str]]:
        """The same from a live member (inside a multi-encoder)."""
        raise NotImplementedError

    def data_collator(self, tokenizer, args: AdaptationArguments, seed: int | None = None):
        raise NotImplementedError

    def needs_offsets(self, args: AdaptationArguments) -> bool:
        return False

    def encoder(self, model: PreTrainedModel) -> nn.Module:
        """The member inside the model with its head."""
        return model.base_model

    def head_parameters(self, model: PreTrainedModel) -> list[str]:
        """Names of the head's parameters (everything outside the member)."""
        inside = {id(p) for p in self.encoder(model).parameters()}
        return [n for n, p in model.named_parameters() if id(p) not in inside]


OBJECTIVES: dict[str, AdaptationObjective] = {}


def register_objective(objective: AdaptationObjective, overwrite: bool = False) -> AdaptationObjective:
    """Make `objective` available as `adapt_members(..., objective=objective.name)` and `--objective`."""
    if objective.name in OBJECTIVES and not overwrite:
        raise ValueError(f"Objective {objective.name!r} is already registered; pass overwrite=True to replace it.")
    OBJECTIVES[objective.name] = objective
    return objective
