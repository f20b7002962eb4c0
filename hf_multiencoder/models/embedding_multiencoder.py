"""Sentence embeddings from a multi-encoder: ``encode`` and ``similarity`` on every model.

Each member embeds the sentence with its own tokenizer and pools its token states per its ``pooling`` (``mean``, the
way all-MiniLM-L6-v2 and all-mpnet-base-v2 were trained; ``last4``, the seed's recipe; ``cls``; ``last4_mean``). The
members' vectors are then fused in one of two ways (``embedding_fusion``):

- ``"normalized_concat"`` needs no training: each member's vector is L2-normalised, multiplied by its weight
  (``embedding_weights``, default 1) and the results are concatenated. The cosine of two such vectors is the weighted
  mean of the members' own cosines, ``sum_i w_i^2 cos_i / sum_i w_i^2``, so a member with larger raw vectors does not
  drown the others (raw concatenation would let it). The default for ``concat`` models.
- ``"fused"``: the model's own fused vector (``pooler_output``, what a task head sees). The default for ``dme``,
  ``cdme`` and ``mean``, whose projections are only meaningful once trained: a freshly assembled model warns that its
  embedding is a random projection. (A token-classification model fuses words, not sentences: its sentence embedding
  is always ``"normalized_concat"``.) The earlier name ``"model"`` is still accepted.

Shipped next to the weights (``trust_remote_code``): imports only ``torch``, ``transformers`` and relative modules.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F
from transformers.utils import logging

from .configuration_multiencoder import EMBEDDING_FUSION_ALIASES, EMBEDDING_FUSIONS
from .precision_multiencoder import autocast

logger = logging.get_logger(__name__)

# `encode` shows a progress bar (unless asked otherwise) when the sentences span more batches than this.
_PROGRESS_BAR_MIN_BATCHES = 10


def normalized_concat(member_embeddings: list[torch.Tensor], weights: list[float] | None = None) -> torch.Tensor:
    """The training-free fusion: ``cat_i(w_i * e_i / ||e_i||)``, ``(batch, sum_i d_i)``."""
    weights = weights or [1.0] * len(member_embeddings)
    return torch.cat([w * F.normalize(e, p=2, dim=-1) for w, e in zip(weights, member_embeddings)], dim=-1)


def check_batch_size(batch_size) -> None:
    """`batch_size` of `encode` and the predict helpers: a positive integer (a bool is not one)."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")


def as_text_list(sentences) -> list:
    """The texts of `encode` and the predict helpers as a list: one string, a list, or any iterable (a generator)."""
    if isinstance(sentences, str):
        return [sentences]
    if sentences is None or isinstance(sentences, (bytes, bytearray, dict)) or not hasattr(sentences, "__iter__"):
        raise ValueError(f"`sentences` is {type(sentences).__name__}: give a string, or a list (any iterable) of "
                         f"strings" + (" (decode bytes first: `data.decode('utf-8')`)." if isinstance(
                             sentences, (bytes, bytearray)) else "."))
    return list(sentences)


def _as_2d_tensor(x, name: str) -> torch.Tensor:
    try:
        x = torch.as_tensor(x)  # numpy arrays too, without importing numpy here
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"`{name}` is {type(x).__name__}{'' if x is None else ' ' + repr(x)[:40]}, not embeddings: "
                         f"pass the vectors `encode` returned (a tensor or array of shape (n, dim) or (dim,)), not "
                         f"the texts.") from None
    if x.dim() == 1:
        x = x.unsqueeze(0)
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be one embedding (dim) or a batch of them (n, dim); got shape "
                         f"{tuple(x.shape)}.")
    return x.float()


class MultiEncoderEmbeddingMixin:
    """``encode``, ``similarity`` and ``sentence_embedding`` for [`MultiEncoderPreTrainedModel`] and its heads."""

    # ---- what the embedding is -------------------------------------------------------------------------------
    def _embedding_fusion(self, embedding_fusion: str | None = None) -> str:
        """The fusion an embedding uses: the argument, else the config's, else the default for the model's fusion."""
        fusion = embedding_fusion or self.config.embedding_fusion
        fusion = EMBEDDING_FUSION_ALIASES.get(fusion, fusion)
        if fusion is None:  # a word-level model's fusion fuses words: its members' sentence vectors are concatenated
            fusion = "normalized_concat" if self.config.fusion == "concat" or self.base_model.word_level else "fused"
        if fusion not in EMBEDDING_FUSIONS:
            raise ValueError(f"Unknown embedding_fusion {fusion!r}; allowed values are: "
                             f"{', '.join(EMBEDDING_FUSIONS)}.")
        if fusion == "fused" and self.base_model.word_level:
            raise ValueError("This model fuses word vectors (token classification), not sentence vectors: its fusion "
                             "cannot give a sentence embedding. Use embedding_fusion='normalized_concat'.")
        return fusion

    def get_embedding_dimension(self, embedding_fusion: str | None = None) -> int:
        """Width of the vectors ``encode`` returns."""
        if self._embedding_fusion(embedding_fusion) == "fused":
            return self.base_model.output_size
        return sum(self.config.pooled_sizes())

    def _warn_if_untrained(self, fusion: str, once: bool = False) -> None:
        if fusion == "fused" and getattr(self.base_model, "_untrained_fusion", False):
            (logger.warning_once if once else logger.warning)(
                f"This model's `{self.config.fusion}` fusion has not been trained: its embedding is a random "
                f"projection of the members' vectors. Train it first, or embed with "
                f"embedding_fusion='normalized_concat' (each member's vector L2-normalised, then concatenated), "
                f"which needs no training."
            )

    # ---- the differentiable embedding (training: sentence-transformers calls this) ----------------------------
    def sentence_embedding(
        self,
        input_ids: list[torch.Tensor],
        attention_mask: list[torch.Tensor] | None = None,
        token_type_ids: list[torch.Tensor | None] | None = None,
        embedding_fusion: str | None = None,
    ) -> torch.Tensor:
        """The fused sentence embedding ``(batch, get_embedding_dimension())`` of a member-major batch, with
        gradients (wrap in ``torch.no_grad()`` for inference, or use ``encode``)."""
        fusion = self._embedding_fusion(embedding_fusion)
        if not torch.is_grad_enabled():
            self._warn_if_untrained(fusion, once=True)
        return self._fused_embedding(input_ids, attention_mask, token_type_ids, fusion)

    def _fused_embedding(self, input_ids, attention_mask, token_type_ids, fusion: str) -> torch.Tensor:
        base = self.base_model
        if not base.word_level:
            out = base(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            if fusion == "fused":
                return out.pooler_output
            return normalized_concat(list(out.member_embeddings), self.config.embedding_weights)
        members = base.sentence_member_embeddings(input_ids, attention_mask, token_type_ids)
        return normalized_concat(members, self.config.embedding_weights)

    # ---- inference ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def encode(
        self,
        sentences: str | list[str],
        tokenizer=None,
        batch_size: int = 32,
        max_length: int | list[int] | None = None,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        normalize_embeddings: bool = False,
        device: str | torch.device | None = None,
        embedding_fusion: str | None = None,
        bf16: bool | None = None,
    ):
        """Embed sentences, as ``SentenceTransformer.encode`` does.

        Args:
            sentences (`str` or `list[str]`): One sentence (a 1-D result) or a list (2-D; an empty list gives an
                empty `(0, dim)` result).
            tokenizer ([`MultiEncoderTokenizer`]): The model's multi-tokenizer (checked against the members).
            batch_size (`int`): Sentences per forward pass; sentences are sorted by length first, so each batch pads
                little, and returned in the given order.
            max_length (`int` or one per member, *optional*): Truncation length (default: each member tokenizer's
                `model_max_length`).
            show_progress_bar (`bool`, *optional*): Default: shown for lists longer than 10 batches (transformers'
                `disable_progress_bar()` turns it off).
            convert_to_numpy (`bool`, defaults to `True`): A numpy array (else a torch tensor, on the CPU).
            convert_to_tensor (`bool`, defaults to `False`): A torch tensor on the model's device (overrides
                `convert_to_numpy`).
            normalize_embeddings (`bool`): L2-normalise the returned vectors (then dot product = cosine).
            device (`str` or `torch.device`, *optional*): Move the model there first (default: where it is).
            embedding_fusion (`str`, *optional*): `"normalized_concat"` or `"fused"` (module docstring); default:
                `config.embedding_fusion`, else `"normalized_concat"` for `concat` models and `"fused"` otherwise.
            bf16 (`bool`, *optional*): Run the members under bf16 autocast (vectors returned in float32). Default:
                where the hardware computes bf16 natively (a CPU with AMX or AVX512-BF16, a GPU with bf16) unless
                `HF_MULTIENCODER_FAST_PATH=off`; fp32 elsewhere (bf16 is emulated, and slow, on other CPUs).
        """
        if tokenizer is None:
            raise ValueError("`encode` needs the model's MultiEncoderTokenizer: pass tokenizer=MultiEncoderTokenizer."
                             "from_encoders([...]) (or .from_pretrained(folder) for a saved model).")
        tokenizer.check_model(self)
        check_batch_size(batch_size)
        single = isinstance(sentences, str)
        sentences = as_text_list(sentences)
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise ValueError(f"`sentences` must be strings; item {i} is a {type(sentence).__name__}.")
        fusion = self._embedding_fusion(embedding_fusion)
        self._warn_if_untrained(fusion)
        if device is not None:
            self.to(device)
        self.eval()
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # longest first, as ST does
        starts = range(0, len(sentences), batch_size)
        if show_progress_bar is None:
            show_progress_bar = len(starts) > _PROGRESS_BAR_MIN_BATCHES
        chunks = []
        for start in logging.tqdm(starts, desc="Batches", disable=not show_progress_bar):
            batch = tokenizer([sentences[i] for i in order[start:start + batch_size]], padding=True,
                              truncation=True, max_length=max_length, return_tensors="pt").to(self.device)
            with autocast(self.device.type, bf16):
                chunks.append(self._fused_embedding(batch["input_ids"], batch["attention_mask"],
                                                    batch.get("token_type_ids"), fusion).float())
        if chunks:
            embeddings = torch.cat(chunks)[torch.argsort(torch.tensor(order))]  # back to the given order
        else:
            embeddings = torch.zeros(0, self.get_embedding_dimension(fusion), device=self.device)
        if normalize_embeddings:
            embeddings = F.normalize(embeddings, p=2, dim=-1)
        if single:
            embeddings = embeddings[0]
        if convert_to_tensor:
            return embeddings
        embeddings = embeddings.float().cpu()
        return embeddings.numpy() if convert_to_numpy else embeddings

    def similarity(self, embeddings1, embeddings2) -> torch.Tensor:
        """Cosine similarity of every pair: ``(n, m)`` for embeddings ``(n, dim)`` and ``(m, dim)`` (numpy or torch;
        one 1-D embedding counts as ``n = 1``), as ``SentenceTransformer.similarity`` with its default cosine."""
        a, b = _as_2d_tensor(embeddings1, "embeddings1"), _as_2d_tensor(embeddings2, "embeddings2")
        if a.size(-1) != b.size(-1):
            raise ValueError(f"Embeddings of different widths ({a.size(-1)} and {b.size(-1)}) cannot be compared: "
                             f"were they made with the same model and embedding_fusion?")
        return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T

    def similarity_pairwise(self, embeddings1, embeddings2) -> torch.Tensor:
        """Cosine similarity of row ``i`` of ``embeddings1`` with row ``i`` of ``embeddings2``: ``(n,)``."""
        a, b = _as_2d_tensor(embeddings1, "embeddings1"), _as_2d_tensor(embeddings2, "embeddings2")
        if a.shape != b.shape:
            raise ValueError(f"Pairwise similarity needs embeddings of the same shape, got {tuple(a.shape)} and "
                             f"{tuple(b.shape)}.")
        return F.cosine_similarity(a, b, dim=-1)


__all__ = ["MultiEncoderEmbeddingMixin", "as_text_list", "check_batch_size", "normalized_concat"]
