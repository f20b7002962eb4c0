"""A sentence-transformers input module that embeds with a multi-encoder: several members, each with its own
tokenizer, their sentence vectors fused as [`MultiEncoderModel.encode`] fuses them.

Saved in the root of a SentenceTransformer folder (``modules.json`` names it
``sentence_transformers_multiencoder.MultiEncoderTransformer``) next to the multi-encoder's weights, its
``config.json``, its multi-tokenizer and the code files, so that ``SentenceTransformer(folder,
trust_remote_code=True)`` loads it where ``hf_multiencoder`` is not installed.

Shipped next to the weights (remote code): imports only ``sentence_transformers``, ``torch``, ``transformers`` and
relative modules.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch
from sentence_transformers.base.modules import InputModule
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.utils import logging

from .configuration_multiencoder import MultiEncoderConfig
from .modeling_multiencoder import MultiEncoderModel
from .tokenization_multiencoder import MultiEncoderTokenizer

# Every save writes `auto_map` and ships the code, also when these classes come from a folder's remote code.
MultiEncoderConfig.register_for_auto_class()
MultiEncoderModel.register_for_auto_class("AutoModel")
MultiEncoderTokenizer.register_for_auto_class("AutoTokenizer")

logger = logging.get_logger(__name__)

_MEMBER_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def member_feature_name(key: str, i: int) -> str:
    """The feature that holds member ``i``'s ``key``: ``input_ids`` for the first member, ``input_ids_1`` for the
    second, ... sentence-transformers moves only top-level tensors to the device and finds a column's features by
    their ``input_ids`` suffix, so each member's tensors are top-level features of their own."""
    return key if i == 0 else f"{key}_{i}"


class MultiEncoderTransformer(InputModule):
    """Input module of a SentenceTransformer built on a multi-encoder.

    Args:
        model ([`MultiEncoderPreTrainedModel`]): The multi-encoder (a head's members and fusion are used; the head is
            not part of an embedding).
        tokenizer ([`MultiEncoderTokenizer`]): Its multi-tokenizer.
        max_seq_length (`int`, *optional*): Truncation length for every member (default: each member tokenizer's
            `model_max_length`).
    """

    config_file_name = "sentence_multiencoder_config.json"
    config_keys = ["max_seq_length"]
    save_in_root = True  # remote code must lie in the folder's root, next to modules.json

    def __init__(self, model, tokenizer: MultiEncoderTokenizer, max_seq_length: int | None = None):
        super().__init__()
        if not hasattr(tokenizer, "check_model"):
            raise ValueError(f"MultiEncoderTransformer needs the model's MultiEncoderTokenizer, got "
                             f"{type(tokenizer).__name__}: pass MultiEncoderTokenizer.from_encoders([...]) (or "
                             f".from_pretrained(folder) for a saved model).")
        tokenizer.check_model(model)
        if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
            raise ValueError(f"`max_seq_length` must be a positive integer or None, got {max_seq_length!r}.")
        self.model = model.base_model  # members + fusion
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    @property
    def num_encoders(self) -> int:
        return self.model.config.num_encoders

    def get_embedding_dimension(self) -> int:
        return self.model.get_embedding_dimension()

    def preprocess(self, inputs, prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Tokenize texts (or ``(text, text_pair)`` pairs) for every member: one set of top-level tensors per member
        (see [`member_feature_name`]). ``max_length`` (from the trainer's data collator) overrides
        ``max_seq_length``."""
        texts, pairs = [], []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                texts.append(item)
                pairs.append(None)
            elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(t, str) for t in item):
                texts.append(item[0])
                pairs.append(item[1])
            else:
                raise ValueError(f"MultiEncoderTransformer embeds text: input {i} is a {type(item).__name__}, not a "
                                 f"string or a pair of strings.")
        if prompt:
            texts = self._prepend_prompt(texts, prompt)
        if any(p is not None for p in pairs) and not all(p is not None for p in pairs):
            raise ValueError("A batch mixes single texts and text pairs.")
        max_length = kwargs.get("max_length") or self.max_seq_length
        batch = self.tokenizer(texts, text_pair=pairs if pairs and pairs[0] is not None else None, padding=True,
                               truncation=True, max_length=max_length, return_tensors="pt")
        features = {}
        for key in _MEMBER_KEYS:
            if key in batch:
                for i, tensor in enumerate(batch[key]):
                    features[member_feature_name(key, i)] = tensor
        return features

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Adds ``sentence_embedding`` ``(batch, dim)``: the members' pooled vectors fused as ``encode`` fuses them
        (``config.embedding_fusion``), with gradients when training."""
        device = self.model.device
        member_inputs = {}
        for key in _MEMBER_KEYS:
            values = [features.get(member_feature_name(key, i)) for i in range(self.num_encoders)]
            if key == "input_ids" and any(v is None for v in values):
                raise ValueError(f"The features hold no `input_ids` for some of the {self.num_encoders} members: "
                                 f"build them with this module's `preprocess`.")
            member_inputs[key] = None if values[0] is None else [v.to(device) for v in values]
        features["sentence_embedding"] = self.model.sentence_embedding(**member_inputs)
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """The multi-encoder (``save_pretrained``: weights, ``config.json`` with ``auto_map``), its tokenizer, this
        module's config, and the code files (this one and those it imports)."""
        if not type(self).__module__.startswith("transformers_modules."):
            logger.warning_once(
                f"This MultiEncoderTransformer is the {type(self).__module__} class: sentence-transformers will name "
                f"it so in modules.json, and the folder will load only where hf_multiencoder is installed. Build the "
                f"model with hf_multiencoder.to_sentence_transformer (or load a saved folder with "
                f"trust_remote_code=True) for a folder that loads anywhere."
            )
        self.model.save_pretrained(output_path)
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)
        for path in [__file__, *get_relative_import_files(__file__)]:
            target = os.path.join(output_path, os.path.basename(path))
            if os.path.abspath(path) != os.path.abspath(target):
                shutil.copy(path, target)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        backend: str = "torch",
        **kwargs,
    ) -> MultiEncoderTransformer:
        if backend != "torch":
            raise ValueError(f"MultiEncoderTransformer runs with the torch backend only, not {backend!r}.")
        config_path = os.path.join(model_name_or_path, subfolder, cls.config_file_name)
        if os.path.isdir(model_name_or_path) and not os.path.isfile(config_path):
            raise FileNotFoundError(f"{config_path} is missing: it holds the module's settings (max_seq_length). "
                                    f"Copy it from the saved folder, or save the SentenceTransformer again.")
        try:
            config = cls.load_config(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                     revision=revision, local_files_only=local_files_only)
        except ValueError as err:  # json.JSONDecodeError
            raise OSError(f"{config_path} is damaged (not JSON: {err}): save the SentenceTransformer again, or "
                          f"restore the file from a copy.") from None
        hub_kwargs = {"token": token, "cache_dir": cache_folder, "revision": revision,
                      "local_files_only": local_files_only}
        if subfolder:
            hub_kwargs["subfolder"] = subfolder
        model_kwargs = {k: v for k, v in (model_kwargs or {}).items() if k != "trust_remote_code"}
        model = MultiEncoderModel.from_pretrained(model_name_or_path, **hub_kwargs, **model_kwargs)
        tokenizer = MultiEncoderTokenizer.from_pretrained(model_name_or_path, **hub_kwargs)
        return cls(model, tokenizer, **{k: v for k, v in config.items() if k in cls.config_keys})


__all__ = ["MultiEncoderTransformer", "member_feature_name"]
