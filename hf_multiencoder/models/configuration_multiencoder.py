"""MultiEncoder configuration: several member encoders, a fusion method and a task head.

This file is shipped next to the weights (``trust_remote_code``): it may import only ``transformers`` and
relative modules.
"""

from __future__ import annotations

import json
from typing import Any

from transformers import AutoConfig

try:  # transformers 5.x
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x: the shipped files load there too
    from transformers import PretrainedConfig as PreTrainedConfig

from .fusion_multiencoder import FUSION_MAPPING

POOLING_METHODS = ("cls", "mean", "last4", "last4_mean")
WORD_POOLING_METHODS = ("first", "mean")
FUSION_GATINGS = ("softmax", "sigmoid")
# How `encode` fuses the members' sentence vectors (see embedding_multiencoder.py).
EMBEDDING_FUSIONS = ("normalized_concat", "fused")
# Earlier names of the values above, still accepted (saved configs and user code): "model" meant the fused vector.
EMBEDDING_FUSION_ALIASES = {"model": "fused"}
# Attribute that holds the hidden dropout in each architecture's config (default: ``hidden_dropout_prob``).
_DROPOUT_ATTRIBUTES = ("hidden_dropout_prob", "dropout", "hidden_dropout", "resid_pdrop")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"Unknown {name} {value!r}; allowed values are: {', '.join(allowed)}.")


def _check_dropout(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1):
        raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}.")


def _per_member(name: str, value: Any, n: int) -> list[Any]:
    """Broadcast a scalar option to one value per member; check a list's length."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(
                f"`{name}` has {len(value)} values but the model has {n} member encoders; give one value per member "
                f"or a single value for all."
            )
        return list(value)
    return [value] * n


def check_unique_names(names: list[str]) -> None:
    """Members' display names key fusion weights and per-member options: the same name twice (the same checkpoint
    given twice, with no names) is an error saying to name them."""
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"`encoder_names` must be unique, got {names} ({repeated} more than once; the same "
                         f"checkpoint twice needs names): pass encoder_names=[...] with a distinct name per member.")


def member_hidden_size(config: PreTrainedConfig) -> int:
    """Width of a member's token states (``dim`` for DistilBERT, ``hidden_size`` elsewhere)."""
    for attr in ("hidden_size", "dim", "d_model"):
        value = getattr(config, attr, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"Cannot tell the hidden size of a {type(config).__name__}.")


def set_member_dropout(config: PreTrainedConfig, p: float) -> None:
    """Override a member's hidden dropout, whatever its architecture calls it."""
    for attr in _DROPOUT_ATTRIBUTES:
        if hasattr(config, attr):
            setattr(config, attr, p)
            return
    raise ValueError(f"{type(config).__name__} has no hidden dropout attribute among {_DROPOUT_ATTRIBUTES}.")


class MultiEncoderConfig(PreTrainedConfig):
    r"""
    Configuration of a [`MultiEncoderModel`]: several pretrained encoders tuned together.

    Args:
        encoders (`list[dict]`):
            The full config of every member (``member_config.to_dict()``), so that a saved model rebuilds without
            the original checkpoints.
        encoder_names (`list[str]`, *optional*):
            A display name per member (the checkpoint it came from by default). Fusion weights are keyed by it.
        fusion (`str`, *optional*, defaults to `"dme"`):
            One of `"concat"`, `"dme"`, `"cdme"`, `"mean"`.
        fusion_dim (`int`, *optional*):
            Common size members are projected to by `dme`, `cdme` and `mean`. Defaults to the widest pooled member.
        fusion_gating (`str`, *optional*, defaults to `"softmax"`):
            `"softmax"` over members (weights sum to 1) or independent `"sigmoid"` gates.
        cdme_hidden_size (`int`, *optional*, defaults to 64):
            Hidden size per direction of the BiLSTM that scores members in `cdme`.
        fusion_dropout (`float`, *optional*, defaults to 0.1):
            Dropout applied to the fused vector.
        fusion_layer_norm (`bool`, *optional*, defaults to `False`):
            Apply a LayerNorm to the fused vector.
        pooling (`str` or `list[str]`, *optional*, defaults to `"mean"`):
            Sentence pooling per member: `"cls"`, `"mean"`, `"last4"` (mean over tokens of each of the last four
            layers, concatenated: 4 x width) or `"last4_mean"` (the same four averaged).
        encoder_dropout (`float` or `list[float | None]`, *optional*):
            Overrides each member's hidden dropout (``None`` keeps the member's own).
        word_pooling (`str`, *optional*, defaults to `"first"`):
            Token classification: a word's vector is its `"first"` subword or the `"mean"` of its subwords.
        classifier_dropout (`float`, *optional*):
            Dropout before the classifier; defaults to no extra dropout (``fusion_dropout`` already applies).
        embedding_fusion (`str`, *optional*):
            How `encode` (and the sentence-transformers module) fuses the members' sentence vectors:
            `"normalized_concat"` (each L2-normalised, times its `embedding_weights`, concatenated; needs no training)
            or `"model"` (the fused vector the head sees). Default: `"normalized_concat"` for `concat`, else
            `"model"`.
        embedding_weights (`list[float]`, *optional*):
            One positive weight per member for `"normalized_concat"` (default: all 1).
        tokenizer_fingerprints (`list[str]`, *optional*):
            A fingerprint of each member's tokenizer (vocabulary and special tokens; None where unknown), recorded
            by `from_encoders` from each member checkpoint's own tokenizer (else the first time a
            [`MultiEncoderTokenizer`] is checked against the model), so that a loaded model, and loading the
            tokenizer from the model's folder, refuse another tokenizer.

    The config is written the classic way (an explicit ``__init__``), so the shipped file works on transformers 4.x and
    on every 5.x release alike.
    """

    model_type = "multiencoder"
    # Outputs the Trainer's prediction loop leaves out (it keeps logits, fusion weights and the word mask).
    keys_to_ignore_at_inference = ["pooler_output", "member_embeddings"]

    def __init__(
        self,
        encoders: list | None = None,
        encoder_names: list[str] | None = None,
        fusion: str = "dme",
        fusion_dim: int | None = None,
        fusion_gating: str = "softmax",
        cdme_hidden_size: int = 64,
        fusion_dropout: float = 0.1,
        fusion_layer_norm: bool = False,
        pooling: str | list[str] = "mean",
        encoder_dropout: float | list[float | None] | None = None,
        word_pooling: str = "first",
        classifier_dropout: float | None = None,
        embedding_fusion: str | None = None,
        embedding_weights: list[float] | None = None,
        initializer_range: float = 0.02,
        tokenizer_fingerprints: list[str] | None = None,
        **kwargs,
    ):
        # Plain JSON-safe dicts, so that a config in memory equals its saved and reloaded self.
        self.encoders = [json.loads(c.to_json_string(use_diff=False)) if isinstance(c, PreTrainedConfig) else dict(c)
                         for c in (encoders or [])]
        self.encoder_names = encoder_names
        self.fusion = fusion
        self.fusion_dim = fusion_dim
        self.fusion_gating = fusion_gating
        self.cdme_hidden_size = cdme_hidden_size
        self.fusion_dropout = fusion_dropout
        self.fusion_layer_norm = fusion_layer_norm
        self.pooling = pooling
        self.encoder_dropout = encoder_dropout
        self.word_pooling = word_pooling
        self.classifier_dropout = classifier_dropout
        self.embedding_fusion = EMBEDDING_FUSION_ALIASES.get(embedding_fusion, embedding_fusion)
        self.embedding_weights = embedding_weights
        self.initializer_range = initializer_range
        self.tokenizer_fingerprints = tokenizer_fingerprints
        self._validate()
        super().__init__(**kwargs)

    def _validate(self) -> None:
        n = len(self.encoders)
        for i, member in enumerate(self.encoders):
            if not member.get("model_type"):
                raise ValueError(f"Member encoder {i}'s config has no `model_type`: give each member's full config "
                                 f"(`AutoConfig.from_pretrained(...)`, or its `to_dict()`), not a bare dict.")
        _check_choice("fusion", self.fusion, tuple(FUSION_MAPPING))
        _check_choice("fusion_gating", self.fusion_gating, FUSION_GATINGS)
        _check_choice("word_pooling", self.word_pooling, WORD_POOLING_METHODS)
        for p in _per_member("pooling", self.pooling, n):
            _check_choice("pooling", p, POOLING_METHODS)
        for p in _per_member("encoder_dropout", self.encoder_dropout, n):
            _check_dropout("encoder_dropout", p)
        _check_dropout("fusion_dropout", self.fusion_dropout)
        _check_dropout("classifier_dropout", self.classifier_dropout)
        for name in ("fusion_dim", "cdme_hidden_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"`{name}` must be a positive whole number, got {value!r}.")
        if self.embedding_fusion is not None:
            _check_choice("embedding_fusion", self.embedding_fusion, EMBEDDING_FUSIONS)
        if self.embedding_weights is not None:
            if not isinstance(self.embedding_weights, (list, tuple)) or len(self.embedding_weights) != n:
                raise ValueError(f"`embedding_weights` needs one weight per member encoder ({n}), got "
                                 f"{self.embedding_weights!r}.")
            if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and 0 < w < float("inf")
                       for w in self.embedding_weights):
                raise ValueError(f"`embedding_weights` must be positive numbers, got {self.embedding_weights!r}.")
            self.embedding_weights = [float(w) for w in self.embedding_weights]
        if self.encoder_names is None:
            self.encoder_names = [c.get("_name_or_path") or f"{c.get('model_type', 'encoder')}_{i}" for i, c in
                                  enumerate(self.encoders)]
        if not isinstance(self.encoder_names, (list, tuple)):
            raise ValueError(f"`encoder_names` must be a list with one name per member encoder ({n}), got "
                             f"{self.encoder_names!r}.")
        self.encoder_names = [str(name) for name in self.encoder_names]
        if len(self.encoder_names) != n:
            raise ValueError(f"`encoder_names` has {len(self.encoder_names)} names for {n} member encoders: give one "
                             f"name per member, in the members' order (or leave it out).")
        check_unique_names(self.encoder_names)
        if self.tokenizer_fingerprints is not None and len(self.tokenizer_fingerprints) != n:
            raise ValueError(f"`tokenizer_fingerprints` has {len(self.tokenizer_fingerprints)} entries for {n} "
                             f"member encoders.")

    # ---- members ---------------------------------------------------------------------------------------------
    @classmethod
    def from_encoder_configs(cls, encoder_configs: list[PreTrainedConfig], encoder_names=None, **kwargs):
        """Build from live member configs (as ``VisionTextDualEncoderConfig.from_vision_text_configs`` does)."""
        if not encoder_configs:
            raise ValueError("A MultiEncoderConfig needs at least one member encoder.")
        return cls(encoders=list(encoder_configs), encoder_names=encoder_names, **kwargs)

    @property
    def num_encoders(self) -> int:
        return len(self.encoders)

    def get_encoder_config(self, i: int) -> PreTrainedConfig:
        """Member ``i``'s config object, with its dropout override applied."""
        d = dict(self.encoders[i])
        model_type = d.pop("model_type")
        for key in ("transformers_version", "architectures", "_name_or_path", "auto_map"):
            d.pop(key, None)
        config = AutoConfig.for_model(model_type, **d)
        dropout = self.encoder_dropouts[i]
        if dropout is not None:
            set_member_dropout(config, dropout)
        return config

    @property
    def encoder_poolings(self) -> list[str]:
        return _per_member("pooling", self.pooling, self.num_encoders)

    @property
    def encoder_dropouts(self) -> list[float | None]:
        return _per_member("encoder_dropout", self.encoder_dropout, self.num_encoders)

    def encoder_index(self, key: int | str) -> int:
        """A member's index from its index or display name."""
        if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
            i = int(key)
            if not 0 <= i < self.num_encoders:
                raise ValueError(f"Member index {i} is out of range: the model has {self.num_encoders} members.")
            return i
        if key not in self.encoder_names:
            raise ValueError(f"No member named {key!r}; members are {self.encoder_names}.")
        return self.encoder_names.index(key)

    # ---- widths ----------------------------------------------------------------------------------------------
    @property
    def encoder_hidden_sizes(self) -> list[int]:
        return [member_hidden_size(self.get_encoder_config(i)) for i in range(self.num_encoders)]

    def pooled_sizes(self, word_level: bool = False) -> list[int]:
        """Width of each member's pooled vector (``last4`` quadruples it; word vectors are never ``last4``)."""
        if word_level:
            return self.encoder_hidden_sizes
        return [h * 4 if p == "last4" else h for h, p in zip(self.encoder_hidden_sizes, self.encoder_poolings)]

    def fused_size(self, word_level: bool = False) -> int:
        sizes = self.pooled_sizes(word_level)
        if self.fusion == "concat":
            return sum(sizes)
        return self.fusion_dim or max(sizes)

    @property
    def hidden_size(self) -> int:
        """Width of the fused sentence vector, so generic HF code that reads ``config.hidden_size`` works."""
        return self.fused_size() if self.encoders else 0


__all__ = ["MultiEncoderConfig"]
