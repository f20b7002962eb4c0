"""Pushing multi-encoders to the Hugging Face Hub with their model card.

- [`MultiEncoderTrainer`]: the stock `Trainer`, plus a [`ModelCardCallback`] and a `create_model_card` that writes the
  multi-encoder card, so `trainer.push_to_hub()` (and `--push_to_hub`) uploads weights, config with `auto_map`, the
  code files, the multi-tokenizer, `README.md` and the fusion-weight plot in one commit.
- [`push_multiencoder_to_hub`]: the same for a model outside a Trainer.

Both then pin the card's usage snippet to the commit they made (a second, README-only commit), since
`trust_remote_code=True` should always come with a `revision`.

Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from huggingface_hub import CommitInfo, HfApi
from transformers import Trainer

from .distributed import check_fsdp_layer_classes
from .model_card import README_NAME, ModelCardCallback, MultiEncoderModelCardData, save_model_card
from .runs import AtomicCheckpointMixin

logger = logging.getLogger(__name__)


def _hf_api() -> HfApi:
    from .. import __version__

    return HfApi(library_name="hf_multiencoder", library_version=__version__)


def pin_model_card_revision(folder: str | os.PathLike, card_data: MultiEncoderModelCardData, repo_id: str,
                            commit: CommitInfo, token: str | bool | None = None, revision: str | None = None,
                            ) -> CommitInfo:
    """Point the card's usage snippet at ``commit`` (the one holding the code and weights) and upload the card.

    A commit cannot name its own hash, so the pinned card is a second commit holding only ``README.md``.
    """
    card_data.revision = commit.oid
    card_data.model_id = repo_id
    readme = os.path.join(folder, README_NAME)
    save_model_card(folder, card_data, plot=False)
    return _hf_api().upload_file(
        path_or_fileobj=readme,
        path_in_repo=README_NAME,
        repo_id=repo_id,
        commit_message=f"Pin the model card's usage snippet to revision {commit.oid[:7]}",
        token=token,
        revision=revision,
    )


class MultiEncoderTrainer(AtomicCheckpointMixin, Trainer):
    """A `Trainer` whose model card is the multi-encoder's, and that stops on a non-finite loss.

    Adds a [`ModelCardCallback`] (unless one is given in `callbacks`) and overrides `create_model_card`, which
    `push_to_hub` calls, so the card lists the members with their learning rates and mean fusion weights, the
    evaluation results (`model-index`) and a `trust_remote_code` snippet pinned to the pushed revision.

    Under FSDP, layer classes to wrap that the model does not have are an error naming the members' layer classes.

    A NaN or infinite training loss raises a `FloatingPointError` at once (the stock Trainer filters such losses out
    of its logs and trains on, ending with NaN weights and exit code 0). With a `MultiEncoderTokenizer` as
    `processing_class`, the tokenizer is checked against the model (`check_model`).

    Args:
        model_card_data ([`MultiEncoderModelCardData`], *optional*): what only you know (dataset, language,
            license, ...); the callback fills the rest. Reachable afterwards as `trainer.model_card_data`.
        All other arguments are the `Trainer`'s (pass them by keyword).
    """

    def __init__(self, *args, model_card_data: MultiEncoderModelCardData | None = None, **kwargs):
        callbacks = list(kwargs.pop("callbacks", None) or [])
        card_callback = next((c for c in callbacks if isinstance(c, ModelCardCallback)), None)
        if card_callback is None:
            card_callback = ModelCardCallback(model_card_data)
            callbacks.append(card_callback)
        elif model_card_data is not None:
            card_callback.card_data = model_card_data
        super().__init__(*args, callbacks=callbacks, **kwargs)
        self.model_card_callback = card_callback
        if getattr(self, "is_fsdp_enabled", False) and self.model is not None:  # a wrong class fails here, not later
            check_fsdp_layer_classes(self.model, self.accelerator.state.fsdp_plugin.transformer_cls_names_to_wrap)
        if hasattr(self.processing_class, "check_model") and self.model is not None:
            self.processing_class.check_model(self.model)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not torch.isfinite(loss).all():  # one scalar check a step (the stock loop makes the same for its logs)
            raise FloatingPointError(
                f"The training loss is {loss.item()} at step {self.state.global_step + 1}: training stopped, nothing "
                f"more is saved. Check the labels for NaN or infinite values, and lower the learning rate (or use "
                f"bf16 instead of fp16)."
            )
        return loss

    @property
    def model_card_data(self) -> MultiEncoderModelCardData:
        return self.model_card_callback.card_data

    def create_model_card(
        self,
        language: str | None = None,
        license: str | None = None,
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | list[str] | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
        **kwargs,
    ) -> None:
        """Write the multi-encoder card (`README.md`, `fusion_weights.png`) into `args.output_dir`. Takes the
        arguments of `Trainer.create_model_card`; rewriting it is safe (the card is rendered anew each time)."""
        if not self.is_world_process_zero():
            return
        data = self.model_card_data
        data.update_from_trainer_kwargs(language=language, license=license, tags=tags, finetuned_from=finetuned_from,
                                        tasks=tasks, dataset_tags=dataset_tags, dataset=dataset,
                                        dataset_args=dataset_args)
        repo_id = getattr(self, "hub_model_id", None) or self.args.hub_model_id
        # `push_to_hub` always passes the repository's name as `model_name`: keep the card's own name unless the
        # caller chose another.
        default_name = repo_id.split("/")[-1] if repo_id else Path(self.args.output_dir).name
        if model_name and model_name != default_name:
            data.model_name = model_name
        if repo_id and data.model_id != repo_id:
            data.model_id, data.revision = repo_id, None
        elif not repo_id and not data.model_id:  # a local run: the card's snippet loads the folder it sits in
            data.model_id = self.args.output_dir
        save_model_card(self.args.output_dir, data, model=self.accelerator.unwrap_model(self.model))

    def push_to_hub(self, commit_message: str | None = "End of training", blocking: bool = True,
                    token: str | None = None, revision: str | None = None, private: bool | None = None,
                    pin_revision: bool = True, **kwargs):
        """`Trainer.push_to_hub` (model, tokenizer, code, card), then, with `pin_revision`, a README-only commit
        that pins the card's usage snippet to the pushed revision. Returns the first commit's `CommitInfo` (or
        its `Future` with `blocking=False`, in which case the snippet is not pinned)."""
        commit = super().push_to_hub(commit_message=commit_message, blocking=blocking, token=token,
                                     revision=revision, private=private, **kwargs)
        if pin_revision and isinstance(commit, CommitInfo) and self.is_world_process_zero() and not commit.pr_url:
            pin_model_card_revision(self.args.output_dir, self.model_card_data, self.hub_model_id, commit,
                                    token=token if token is not None else self.args.hub_token,
                                    revision=revision if revision is not None else self.args.hub_revision)
        return commit


def push_multiencoder_to_hub(
    model,
    repo_id: str,
    tokenizer=None,
    card_data: MultiEncoderModelCardData | None = None,
    *,
    commit_message: str = "Upload multi-encoder",
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    pin_revision: bool = True,
    extra_files: list[str | os.PathLike] | None = None,
) -> CommitInfo:
    """Upload a multi-encoder with everything a user needs, in one commit: weights (safetensors, fusion and head
    included), `config.json` with `auto_map`, the code files, the multi-tokenizer, `README.md` and the fusion-weight
    plot (plus ``extra_files``, e.g. `results.json`). Then, with `pin_revision`, pin the card's snippet to it.

    Args:
        model: a multi-encoder, or a `Trainer` holding one (its tokenizer and card data are then the defaults).
        repo_id: `"user/name"`; the repository is created if needed.
        tokenizer: the [`MultiEncoderTokenizer`] (strongly advised: the model is unusable without it).
        card_data: the card's data; a `MultiEncoderTrainer`'s when `model` is one, else read from the model.

    Returns:
        The `CommitInfo` of the commit holding the model (the one the card pins).
    """
    if isinstance(model, Trainer):
        trainer = model
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = tokenizer if tokenizer is not None else trainer.processing_class
        if card_data is None and isinstance(trainer, MultiEncoderTrainer):
            card_data = trainer.model_card_data
    if tokenizer is None:
        logger.warning("Pushing a multi-encoder without its tokenizer: users will not be able to run it.")
    card_data = card_data if card_data is not None else MultiEncoderModelCardData()
    api = _hf_api()
    repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
    if card_data.model_id != repo_id:
        card_data.model_id, card_data.revision = repo_id, None
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        for path in extra_files or []:
            shutil.copy(path, os.path.join(folder, os.path.basename(path)))
        save_model_card(folder, card_data, model=model)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message, token=token,
                                   revision=revision, create_pr=create_pr)
        if pin_revision and not create_pr:
            pin_model_card_revision(folder, card_data, repo_id, commit, token=token, revision=revision)
    return commit


__all__ = ["MultiEncoderTrainer", "pin_model_card_revision", "push_multiencoder_to_hub"]
