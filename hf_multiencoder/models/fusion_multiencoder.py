"""Fusion of the members' vectors: concatenation, DME, contextual DME, projected mean.

Every fusion takes one tensor per member, ``(batch, d_i)`` for sentences or ``(batch, words, d_i)`` for words, and
returns the fused tensor ``(batch, [words,] fused_dim)`` and the fusion weights ``(batch, [words,] n_members)`` (or
``None`` for methods without weights). Adding a method means one class here and one entry in ``FUSION_MAPPING``.

Shipped next to the weights (``trust_remote_code``): imports only ``torch`` and relative modules.
"""

from __future__ import annotations

import torch
from torch import nn


class Fusion(nn.Module):
    """Base class. ``output_size`` is the fused width; ``has_weights`` whether ``forward`` returns weights."""

    has_weights = False
    needs_context = False

    def __init__(self, input_sizes: list[int], fusion_dim: int | None = None, **kwargs):
        super().__init__()
        self.input_sizes = list(input_sizes)
        self.output_size = fusion_dim or max(self.input_sizes)

    def forward(self, embeddings: list[torch.Tensor], contexts=None, member_mask=None):
        """``member_mask`` ``(batch, [words,] n)``: False where a member has no vector (a word it cut off)."""
        raise NotImplementedError


class ConcatFusion(Fusion):
    """Concatenate the members' vectors (no weights)."""

    def __init__(self, input_sizes, fusion_dim=None, **kwargs):
        super().__init__(input_sizes)
        self.output_size = sum(self.input_sizes)

    def forward(self, embeddings, contexts=None, member_mask=None):
        return torch.cat(embeddings, dim=-1), None  # a missing member's vector is already zeros


class _ProjectedFusion(Fusion):
    """Shared part of the projected methods: one linear projection per member to ``fusion_dim``."""

    def __init__(self, input_sizes, fusion_dim=None, **kwargs):
        super().__init__(input_sizes, fusion_dim)
        self.projections = nn.ModuleList(nn.Linear(d, self.output_size) for d in self.input_sizes)

    def project(self, embeddings):
        return torch.stack([proj(e) for proj, e in zip(self.projections, embeddings)], dim=-2)  # (..., n, dim)


class MeanFusion(_ProjectedFusion):
    """Project every member to a common size and average them, unweighted."""

    def forward(self, embeddings, contexts=None, member_mask=None):
        projected = self.project(embeddings)  # (batch, [words,] n, dim)
        if member_mask is None:
            return projected.mean(dim=-2), None
        mask = member_mask.unsqueeze(-1).to(projected.dtype)
        return (projected * mask).sum(dim=-2) / mask.sum(dim=-2).clamp(min=1), None


def _gate(scores: torch.Tensor, gating: str, member_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Scores ``(..., n)`` to weights: softmax over members, or an independent sigmoid gate per member.

    Members masked out get weight 0 (softmax renormalises over the others); where no member is present the
    weights are left as they are (such positions are ignored downstream). The weights are computed and returned in
    float32 whatever the scores' precision (under bf16 autocast they would otherwise be rounded to bf16 and sum to 1
    only within 4e-3).
    """
    scores = scores.float()
    if member_mask is not None:
        keep = member_mask | ~member_mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~keep, float("-inf")) if gating == "softmax" else scores
    weights = torch.softmax(scores, dim=-1) if gating == "softmax" else torch.sigmoid(scores)
    if member_mask is not None and gating != "softmax":
        weights = weights * keep.to(weights.dtype)
    return weights


def _weighted_sum(projected: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``sum_i a_i p_i`` over the member axis, in the projections' precision (the float32 weights cast to it)."""
    return (weights.to(projected.dtype).unsqueeze(-1) * projected).sum(dim=-2)


class DMEFusion(_ProjectedFusion):
    """Dynamic Meta-Embeddings (Kiela et al., 2018).

    ``p_i = P_i e_i``; ``a = softmax_i(w . p_i)`` (or ``sigmoid(w . p_i + b)``); ``fused = sum_i a_i p_i``.
    """

    has_weights = True

    def __init__(self, input_sizes, fusion_dim=None, fusion_gating="softmax", **kwargs):
        super().__init__(input_sizes, fusion_dim)
        self.gating = fusion_gating
        # A bias shared by every member cancels in a softmax (its gradient is exactly zero): only sigmoid gates
        # get one.
        self.scorer = nn.Linear(self.output_size, 1, bias=fusion_gating != "softmax")

    def forward(self, embeddings, contexts=None, member_mask=None):
        projected = self.project(embeddings)  # (batch, [words,] n, dim)
        weights = _gate(self.scorer(projected).squeeze(-1), self.gating, member_mask)  # (batch, [words,] n)
        return _weighted_sum(projected, weights), weights


def _reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first ``lengths[b]`` steps in place of a right-padded ``(batch, seq, dim)`` tensor.

    Vectorised (a gather), so a backward LSTM over the result never sees padding before real tokens.
    """
    seq = x.size(1)
    steps = torch.arange(seq, device=x.device).unsqueeze(0)  # (1, seq)
    lengths = lengths.unsqueeze(1)  # (batch, 1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (batch, seq)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


class CDMEFusion(DMEFusion):
    """Contextual DME (Kiela et al., 2018, CDME).

    A member's score comes from a small BiLSTM (shared by all members) run over that member's *projected* sequence:
    its token states for sentences (the BiLSTM states are mean-pooled over the tokens, then scored), its word vectors
    for words (scored per word). The scores so depend on the context, not only on the pooled vector. The fused
    vector is the weighted sum of the projected pooled vectors, as in DME.
    """

    needs_context = True

    def __init__(self, input_sizes, fusion_dim=None, fusion_gating="softmax", cdme_hidden_size=64,
                 context_sizes=None, **kwargs):
        super().__init__(input_sizes, fusion_dim, fusion_gating)
        # Token states can be narrower than the pooled vector (``last4`` pooling): they get their own projection.
        context_sizes = list(context_sizes or input_sizes)
        self.context_projections = nn.ModuleList(
            nn.Identity() if c == d else nn.Linear(c, self.output_size) for c, d in zip(context_sizes, input_sizes)
        )
        self.lstm_fw = nn.LSTM(self.output_size, cdme_hidden_size, batch_first=True)
        self.lstm_bw = nn.LSTM(self.output_size, cdme_hidden_size, batch_first=True)
        self.scorer = nn.Linear(2 * cdme_hidden_size, 1, bias=fusion_gating != "softmax")

    def _bilstm(self, x, mask):
        """BiLSTM over a right-padded sequence ``(batch, seq, dim)``; padded steps never reach real ones."""
        lengths = mask.long().sum(dim=1).clamp(min=1)  # (batch,)
        fw, _ = self.lstm_fw(x)
        bw, _ = self.lstm_bw(_reverse_padded(x, lengths))
        return torch.cat([fw, _reverse_padded(bw, lengths)], dim=-1)  # (batch, seq, 2 * hidden)

    def forward(self, embeddings, contexts=None, member_mask=None):
        if contexts is None:
            raise ValueError("`cdme` fusion needs each member's token (or word) sequence and mask.")
        projected = self.project(embeddings)  # (batch, [words,] n, dim)
        scores = []
        for i, (states, mask) in enumerate(contexts):
            if projected.dim() == 4:  # word level: the sequence is the member's word vectors themselves
                seq = projected[:, :, i]  # (batch, words, dim)
            else:
                context_projection = self.context_projections[i]
                if isinstance(context_projection, nn.Identity):
                    seq = self.projections[i](states)  # (batch, seq, dim)
                else:
                    seq = context_projection(states)
            mask = mask.to(seq.dtype)
            hidden = self._bilstm(seq * mask.unsqueeze(-1), mask)  # (batch, seq, 2h)
            if projected.dim() == 4:
                scores.append(self.scorer(hidden).squeeze(-1))  # (batch, words)
            else:
                pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
                scores.append(self.scorer(pooled).squeeze(-1))  # (batch,)
        weights = _gate(torch.stack(scores, dim=-1), self.gating, member_mask)  # (batch, [words,] n)
        return _weighted_sum(projected, weights), weights


FUSION_MAPPING: dict[str, type[Fusion]] = {
    "concat": ConcatFusion,
    "dme": DMEFusion,
    "cdme": CDMEFusion,
    "mean": MeanFusion,
}


def build_fusion(name: str, input_sizes: list[int], **kwargs) -> Fusion:
    if name not in FUSION_MAPPING:
        raise ValueError(f"Unknown fusion {name!r}; allowed values are: {', '.join(FUSION_MAPPING)}.")
    return FUSION_MAPPING[name](input_sizes, **kwargs)
