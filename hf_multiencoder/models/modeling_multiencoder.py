"""MultiEncoder models: several pretrained encoders, each with its own tokenizer, fused into one model.

Inputs are per member: ``input_ids``, ``attention_mask`` and (optionally) ``token_type_ids`` and ``word_ids`` are
*lists* with one ``(batch, seq_i)`` tensor per member, each padded to that member's own longest sequence.
[`MultiEncoderTokenizer`] and [`MultiEncoderDataCollator`] produce them; the stock ``Trainer`` and ``pipeline`` pass
them through unchanged.

Shipped next to the weights (``trust_remote_code``): imports only ``torch``, ``transformers`` and relative modules.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import ModelOutput, logging

try:  # transformers 5.x: initialisers that skip weights already loaded
    from transformers import initialization as init
except ImportError:  # transformers 4.x: the shipped files load there too
    from torch.nn import init

from .configuration_multiencoder import MultiEncoderConfig, _check_dropout, _per_member, set_member_dropout
from .embedding_multiencoder import MultiEncoderEmbeddingMixin, as_text_list, check_batch_size
from .fusion_multiencoder import build_fusion
from .pipeline_multiencoder import CLASSIFICATION_TASK, CUSTOM_PIPELINES, NER_TASK
from .precision_multiencoder import bf16_pays  # noqa: F401 (transformers < 5 copies direct relative imports only)
from .tokenization_multiencoder import check_local_source, check_member_source, pad_rows, tokenizer_fingerprint

_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "word_ids")
# Members' poolers are kept (an exported member loads clean) but unused; checkpoints of earlier versions lack them.
_MEMBER_POOLER = re.compile(r"(^|\.)encoders\.\d+\.pooler\.")
logger = logging.get_logger(__name__)


# ---- outputs ---------------------------------------------------------------------------------------------------
@dataclass
class MultiEncoderModelOutput(ModelOutput):
    """
    Output of [`MultiEncoderModel`].

    Args:
        pooler_output (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
            The fused sentence vector (sentence mode, no `word_ids` given).
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, num_words, hidden_size)`):
            The fused word vectors (word mode, `word_ids` given).
        fusion_weights (`torch.FloatTensor` of shape `(batch_size, [num_words,] num_encoders)`):
            How much each member contributed to each fused vector (rows sum to 1 with softmax gating). `None` for
            fusions without weights (`concat`, `mean`).
        member_embeddings (`tuple(torch.FloatTensor)`):
            Each member's pooled vector `(batch_size, d_i)` (or word vectors `(batch_size, num_words, d_i)`) before
            fusion.
        word_mask (`torch.LongTensor` of shape `(batch_size, num_words)`):
            Word mode: 1 for words that at least one member saw (not cut off by every member's `max_length`).
    """

    pooler_output: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    fusion_weights: torch.FloatTensor | None = None
    member_embeddings: tuple[torch.FloatTensor, ...] | None = None
    word_mask: torch.LongTensor | None = None


@dataclass
class MultiEncoderSequenceClassifierOutput(ModelOutput):
    """
    Output of [`MultiEncoderForSequenceClassification`].

    Args:
        loss (`torch.FloatTensor` of shape `(1,)`, *optional*, returned when `labels` is provided):
            Classification (or regression if `config.num_labels == 1`) loss.
        logits (`torch.FloatTensor` of shape `(batch_size, num_labels)`):
            Classification (or regression) scores, before softmax.
        fusion_weights (`torch.FloatTensor` of shape `(batch_size, num_encoders)`):
            The weight of each member in each sentence's fused vector (DME/CDME; `None` for `concat`/`mean`).
            `config.encoder_names` names the columns.
        pooler_output (`torch.FloatTensor` of shape `(batch_size, hidden_size)`):
            The fused sentence vector the classifier saw.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    fusion_weights: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None


@dataclass
class MultiEncoderTokenClassifierOutput(ModelOutput):
    """
    Output of [`MultiEncoderForTokenClassification`]. Positions are *words*, not subword tokens.

    Args:
        loss (`torch.FloatTensor` of shape `(1,)`, *optional*, returned when `labels` is provided):
            Cross-entropy over words whose label is not -100.
        logits (`torch.FloatTensor` of shape `(batch_size, num_words, num_labels)`):
            Scores per word.
        fusion_weights (`torch.FloatTensor` of shape `(batch_size, num_words, num_encoders)`):
            The weight of each member for each word (DME/CDME; `None` for `concat`/`mean`).
        word_mask (`torch.LongTensor` of shape `(batch_size, num_words)`):
            1 for real words that at least one member saw, 0 for padding and words every member cut off.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    fusion_weights: torch.FloatTensor | None = None
    word_mask: torch.LongTensor | None = None


# ---- pooling -----------------------------------------------------------------------------------------------------
def _masked_mean(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
    return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def pool_sentence(method: str, last_hidden_state, hidden_states, attention_mask) -> torch.Tensor:
    """One vector per sentence from a member's token states."""
    if method == "cls":
        return last_hidden_state[:, 0]
    if method == "mean":
        return _masked_mean(last_hidden_state, attention_mask)
    last4 = [_masked_mean(h, attention_mask) for h in hidden_states[-4:]]  # 4 x (batch, width)
    if method == "last4":
        return torch.cat(last4, dim=-1)  # (batch, 4 * width)
    return torch.stack(last4, dim=0).mean(dim=0)  # last4_mean: (batch, width)


def pool_words(method: str, states: torch.Tensor, word_ids: torch.Tensor, num_words: int):
    """Subword states ``(batch, seq, dim)`` to word vectors ``(batch, num_words, dim)``, vectorised.

    ``word_ids[b, t]`` is the word subword ``t`` belongs to, or -1 (special tokens, padding). Returns the word
    vectors and a ``(batch, num_words)`` mask of the words this member saw (a word cut off by the member's
    ``max_length`` has no subword: its vector is zero and its mask 0).
    """
    batch, seq, dim = states.shape
    valid = word_ids >= 0
    index = torch.where(valid, word_ids, torch.full_like(word_ids, num_words))  # padding goes to a spare slot
    counts = states.new_zeros(batch, num_words + 1).scatter_add_(1, index, valid.to(states.dtype))
    present = counts[:, :num_words] > 0  # (batch, num_words)
    if method == "mean":
        summed = states.new_zeros(batch, num_words + 1, dim)
        summed.scatter_add_(1, index.unsqueeze(-1).expand(-1, -1, dim), states)
        words = summed[:, :num_words] / counts[:, :num_words].clamp(min=1).unsqueeze(-1)
    else:  # first subword of each word
        positions = torch.arange(seq, device=states.device).expand(batch, seq)
        first = torch.full((batch, num_words + 1), seq, dtype=positions.dtype, device=states.device)
        first = first.scatter_reduce(1, index, positions, reduce="amin", include_self=True)[:, :num_words]
        padded = torch.cat([states, states.new_zeros(batch, 1, dim)], dim=1)  # index `seq` reads zeros
        words = padded.gather(1, first.unsqueeze(-1).expand(-1, -1, dim))
    return words, present


def _max_positions(member) -> int:
    """How many tokens a member takes: its position embeddings, less the offset of RoBERTa-style positions (which
    start after the padding index)."""
    limit = getattr(member.config, "max_position_embeddings", None) or 10**9
    embeddings = getattr(member, "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    return limit - (padding_idx + 1) if isinstance(padding_idx, int) else limit


def member_layer_classes(encoders) -> list[str]:
    """Class names of the members' blocks that must not be split across devices (and that FSDP wraps as units): each
    member's own ``_no_split_modules`` where its class declares them, else the class of its repeated layers (the
    longest ``nn.ModuleList`` of one class, e.g. DistilBERT's ``TransformerBlock``, MPNet's ``MPNetLayer``)."""
    names = []
    for member in encoders:
        present = {type(m).__name__ for m in member.modules()}
        # sorted: transformers keeps an instance's `_no_split_modules` as a set (its order varies between runs)
        declared = sorted(n for n in (getattr(member, "_no_split_modules", None) or []) if n in present)
        if not declared:
            lists = [m for m in member.modules() if isinstance(m, nn.ModuleList) and len(m) > 0
                     and len({type(x) for x in m}) == 1]
            declared = [type(max(lists, key=len)[0]).__name__] if lists else []
        names += [n for n in declared if n not in names]
    return names


def _is_example_major(value) -> bool:
    """``pipeline(..., batch_size>1)`` collates our per-example inputs as a list with, per example, the list of its
    members' ``(1, seq_i)`` tensors (its padding collator pads plain tensors only)."""
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], (list, tuple))


def _member_major(value, n: int, key: str, pad_values: list[int]) -> list[torch.Tensor]:
    """Example-major per-member tensors to one right-padded ``(batch, max seq_i)`` tensor per member."""
    for b, example in enumerate(value):
        if len(example) != n:
            raise ValueError(f"`{key}` of example {b} has inputs for {len(example)} member encoders but the model "
                             f"has {n}.")
    return [pad_rows([example[i] for example in value], pad_values[i]) for i in range(n)]  # (batch, max seq_i)


def _as_list(value, n: int, key: str) -> list:
    if value is None:
        return [None] * n
    if isinstance(value, torch.Tensor) or not isinstance(value, (list, tuple)):
        raise ValueError(
            f"`{key}` must be a list with one tensor per member encoder ({n}), got {type(value).__name__}. Build "
            f"batches with MultiEncoderTokenizer / MultiEncoderDataCollator."
        )
    if len(value) != n:
        raise ValueError(
            f"`{key}` has inputs for {len(value)} member encoders but the model has {n}: every member needs its own "
            f"inputs (was the tokenizer built for other members?)."
        )
    return list(value)


# ---- reading outputs: fusion weights by member, word tags --------------------------------------------------------
def mean_fusion_weights(weights, encoder_names: list[str], mask=None) -> dict[str, float]:
    """Each member's mean fusion weight, keyed by its display name: ``{"MiniLM": 0.26, "MPNet": 0.74}``.

    The one place fusion weights are averaged: the metrics (``eval_fusion_weight_<member>``), ``fusion_weights.json``,
    the model card, the demo and the sweeps all use it. ``weights``: ``(batch, n)`` or ``(batch, words, n)``, a tensor
    or an array (a whole data set's, concatenated); ``mask``: ``(batch,)`` or ``(batch, words)``, true for the rows
    that count (word level: the real words).
    """
    w = torch.as_tensor(weights).double()
    if w.size(-1) != len(encoder_names):
        raise ValueError(f"Fusion weights for {w.size(-1)} members but {len(encoder_names)} member names.")
    w = w.reshape(-1, w.size(-1))
    if mask is not None:
        w = w[torch.as_tensor(mask).reshape(-1).bool()]
    return {name: float(w[:, i].mean()) for i, name in enumerate(encoder_names)}


def fusion_weights_per_example(weights, encoder_names: list[str], lengths=None, digits: int = 4) -> list:
    """Per example ``{member: weight}`` (sentence level) or one such dict per word, cut to ``lengths[b]`` words (word
    level), rounded to ``digits``."""
    rows = torch.as_tensor(weights).float().cpu().tolist()

    def named(row):
        return {name: round(w, digits) for name, w in zip(encoder_names, row)}

    if rows and isinstance(rows[0][0], list):  # word level
        return [[named(word) for word in example[:None if lengths is None else lengths[b]]]
                for b, example in enumerate(rows)]
    return [named(row) for row in rows]


def word_tags(logits, word_mask, keep, id2label: dict, outside: str = "O") -> list[list[str]]:
    """Word-level logits to one tag per kept word: the one decoding of token-classification outputs.

    ``logits``: ``(batch, words, labels)``; ``word_mask``: ``(batch, words)``, 0 where no member saw the word (all cut
    it off; tagged ``outside``); ``keep``: ``(batch, words)``, true for the words to return (the real words: padding
    and ignored positions left out). ``predict_tags``, the metrics and ``run_glue_multi.py --do_predict`` use it.
    """
    pred = torch.as_tensor(logits).argmax(-1)  # (batch, words)
    seen = torch.as_tensor(word_mask) != 0
    keep = torch.as_tensor(keep).bool()
    return [[id2label[int(pred[b, j])] if seen[b, j] else outside for j in torch.nonzero(keep[b]).flatten().tolist()]
            for b in range(pred.size(0))]


# ---- losses (one definition for every head) ----------------------------------------------------------------------
def multiencoder_base(model: nn.Module) -> nn.Module:
    """The `MultiEncoderModel` (members + fusion) inside a head, a wrapper (peft, DDP) or the model itself."""
    for module in model.modules():
        if isinstance(getattr(module, "encoders", None), nn.ModuleList) and hasattr(module, "fusion"):
            return module
    raise ValueError(f"{type(model).__name__} is not a multi-encoder model (no `encoders` and `fusion`).")


def parameter_members(model: nn.Module) -> dict[str, int | None]:
    """Each parameter's member: `{name: member index}`, None for what is not in a member (fusion, head).

    The one map from parameters to members (the optimizer groups, the model card's learning rates, freezing): by
    identity, so parameter names, prefixes and wrappers do not matter.
    """
    base = multiencoder_base(model)
    owner = {id(p): i for i, member in enumerate(base.encoders) for p in member.parameters()}
    return {name: owner.get(id(p)) for name, p in model.named_parameters()}


def check_class_labels(labels: torch.Tensor, num_labels: int) -> None:
    """Class ids must be integers in ``0..num_labels-1`` (-100: ignored): say so, instead of a cross-entropy error
    about target types or bounds. The range is checked where it costs no device synchronisation (labels on the CPU)."""
    if labels.is_floating_point():
        raise ValueError(f"Classification labels must be class ids (integers 0..{num_labels - 1}), got floats "
                         f"({labels.flatten()[:3].tolist()}...). For a score, use problem_type='regression' "
                         f"(num_labels=1); for several labels per example, 'multi_label_classification'.")
    if labels.device.type == "cpu":
        given = labels[labels != -100]
        if given.numel() and (int(given.min()) < 0 or int(given.max()) >= num_labels):
            bad = int(given.min()) if int(given.min()) < 0 else int(given.max())
            raise ValueError(f"Label {bad} is out of range for a model with {num_labels} labels (0..{num_labels - 1}; "
                             f"-100 is ignored): check the data's labels, or build the model with more `num_labels`.")


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """The loss of sentence logits ``(batch, num_labels)`` by ``problem_type``, as transformers' heads compute it:
    MSE on squeezed tensors for ``"regression"``, cross-entropy for ``"single_label_classification"``, BCE with logits
    on multi-hot floats for ``"multi_label_classification"``."""
    labels = labels.to(logits.device)
    if labels.dim() == 0 or labels.size(0) != logits.size(0):
        raise ValueError(f"{1 if labels.dim() == 0 else labels.size(0)} label(s) for a batch of {logits.size(0)} "
                         f"examples: give one label per example (`labels` of shape (batch,), or (batch, num_labels) "
                         f"for multi-label classification).")
    if problem_type == "regression":
        return MSELoss()(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
    if problem_type == "single_label_classification":
        check_class_labels(labels, logits.size(-1))
        return CrossEntropyLoss()(logits.view(-1, logits.size(-1)), labels.view(-1))
    if problem_type == "multi_label_classification":
        return BCEWithLogitsLoss()(logits, labels.to(logits.dtype))
    raise ValueError(f"Unknown problem_type {problem_type!r}; allowed values are: regression, "
                     f"single_label_classification, multi_label_classification.")


def word_loss(logits: torch.Tensor, labels: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of word logits ``(batch, words, num_labels)`` against word labels (-100 ignored); words no member
    saw (``word_mask`` 0: cut off by every member) carry no signal."""
    check_class_labels(labels, logits.size(-1))
    labels = labels.to(logits.device).masked_fill(word_mask == 0, -100)
    return CrossEntropyLoss()(logits.view(-1, logits.size(-1)), labels.view(-1))


# ---- models ------------------------------------------------------------------------------------------------------
# The task heads: a folder saved with one of them is refused by another (same `classifier` shapes would load silently).
_HEAD_CLASSES = ("MultiEncoderForSequenceClassification", "MultiEncoderForTokenClassification",
                 "MultiEncoderForMultiTask")


class MultiEncoderPreTrainedModel(MultiEncoderEmbeddingMixin, PreTrainedModel):
    config_class = MultiEncoderConfig
    base_model_prefix = "multiencoder"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    # The loss is a plain mean over the batch: let the Trainer scale it for gradient accumulation.
    accepts_loss_kwargs = False

    def post_init(self):
        # Set per instance (the members decide): the members' layer classes, which `device_map` keeps whole and
        # FSDP's auto-wrap (accelerate reads the top model's `_no_split_modules`) shards as units.
        self._no_split_modules = member_layer_classes(self.base_model.encoders)
        super().post_init()

    def get_input_embeddings(self):
        """None: every member has its own input embeddings (``base_model.encoders[i].get_input_embeddings()``), and
        code that asks for the model's one embedding (accelerate's FSDP2 preparation, ``enable_input_require_grads``)
        then skips it, instead of failing."""
        return None

    def _set_gradient_checkpointing(self, *args, **kwargs):
        """transformers' switch (``gradient_checkpointing_enable``, ``--gradient_checkpointing``), which reaches every
        member's layers; members whose architecture has no checkpointing in transformers (MPNet, ALBERT) run without
        it, and are named in a warning."""
        super()._set_gradient_checkpointing(*args, **kwargs)
        if not kwargs.get("enable", args[0] if args else True):
            return
        without = [f"{name} ({type(member).__name__})" for name, member in zip(self.config.encoder_names,
                                                                               self.base_model.encoders)
                   if not getattr(member, "supports_gradient_checkpointing", False)]
        if without:
            logger.warning(f"Gradient checkpointing: members {without} do not support it in transformers and keep "
                           f"their activations; the other members recompute theirs in the backward pass.")

    @torch.no_grad()
    def _init_weights(self, module):
        """Initialise only what is new (fusion, head); members initialise themselves or come pretrained."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, expected_differences: tuple[str, ...] = (),
                        **kwargs):
        """`PreTrainedModel.from_pretrained`, strict about what the checkpoint and the model disagree on: a weight the
        model has and the checkpoint lacks (it would be random), or one the checkpoint has and the model does not (a
        config edited after saving, e.g. `fusion` changed from dme to mean, or another head) is an error. New fusion
        layers and heads are built with `from_encoders` only. Members' unused pooler weights may be absent, and so
        may the weights under `expected_differences` (name prefixes: the multi-task model's heads of tasks added or
        dropped on purpose)."""
        output_loading_info = kwargs.pop("output_loading_info", False)
        if kwargs.get("config") is None:
            cls._check_saved_folder(pretrained_model_name_or_path, kwargs.get("subfolder") or "")
        try:
            model, info = super().from_pretrained(pretrained_model_name_or_path, *model_args,
                                                  output_loading_info=True, **kwargs)
        except Exception as err:
            if type(err).__name__ != "SafetensorError":
                raise
            raise OSError(f"{pretrained_model_name_or_path}: a weights file is damaged ({err}): it was cut off or "
                          f"overwritten. Save the model again, or copy the file anew.") from err
        saved = (getattr(model.config, "architectures", None) or [None])[0]
        if cls.__name__ in _HEAD_CLASSES and saved in _HEAD_CLASSES and saved != cls.__name__:
            raise ValueError(f"{pretrained_model_name_or_path} was saved as a {saved}, not a {cls.__name__}: its head "
                             f"predicts something else. Load it with {saved}.from_pretrained (or the base "
                             f"MultiEncoderModel for its members and fusion).")
        expected = tuple(expected_differences)
        problems = {kind: sorted(k for k in info.get(f"{kind}_keys", ())
                                 if not _MEMBER_POOLER.search(k) and not k.startswith(expected))
                    for kind in ("missing", "unexpected")}
        if problems["missing"] or problems["unexpected"]:
            raise ValueError(
                f"{pretrained_model_name_or_path} does not match {cls.__name__} built from its config: "
                + "; ".join(f"{kind} weights {keys[:6]}{' ...' if len(keys) > 6 else ''}"
                            for kind, keys in problems.items() if keys)
                + ". Was config.json edited after saving (fusion, pooling, members), or is this another head? Load "
                  "it with the class it was saved as; build new fusion layers or heads with from_encoders."
            )
        model.base_model.freeze_member_poolers()
        return (model, info) if output_loading_info else model

    @classmethod
    def _check_saved_folder(cls, path, subfolder: str = "") -> None:
        """A local path that is no saved multi-encoder is an error saying what it is and what to give instead (not a
        Hub error about repo ids, nor an error from deep inside the config)."""
        check_local_source(path, "Model folder")
        if not isinstance(path, (str, os.PathLike)) or not os.path.exists(path):
            return  # a Hub id
        if os.path.isfile(path):
            raise ValueError(f"{os.fspath(path)!r} is a file: give the folder the model was saved in (the one holding "
                             f"config.json and model.safetensors).")
        folder = os.path.join(path, subfolder) if subfolder else os.fspath(path)
        config_file = os.path.join(folder, "config.json")
        if not os.path.isfile(config_file):
            raise FileNotFoundError(
                f"{folder} holds no config.json: it is not a saved model. Give the folder `save_pretrained` wrote, "
                f"or assemble a new model from pretrained members with {cls.__name__}.from_encoders([...]).")
        try:
            with open(config_file, encoding="utf-8") as f:
                model_type = json.load(f).get("model_type")
        except (ValueError, UnicodeDecodeError) as err:
            raise OSError(f"{config_file} is damaged (not JSON: {err}): save the model again, or restore the file "
                          f"from a copy.") from None
        if not str(model_type).startswith("multiencoder"):  # the multi-task model's folders load as a base too
            raise ValueError(
                f"{folder} holds a {model_type!r} model, not a multi-encoder: load it with "
                f"AutoModel.from_pretrained, or make it a member with {cls.__name__}.from_encoders([{str(folder)!r}, "
                f"...]).")
        weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
        if not any(os.path.isfile(os.path.join(folder, name)) for name in weights):
            raise FileNotFoundError(f"{folder} has config.json but no weights (model.safetensors): the save was "
                                    f"interrupted or the weights were not copied. Save the model again, or copy "
                                    f"model.safetensors into it.")

    def estimate_tokens(self, input_dict) -> int:
        """Tokens in a batch, summed over members (``input_ids`` is a list here)."""
        ids = input_dict.get("input_ids")
        if isinstance(ids, (list, tuple)):
            return sum(int(t.numel()) for t in ids if t is not None)
        return super().estimate_tokens(input_dict)

    def export_encoder(self, encoder, save_directory, tokenizer=None, **kwargs) -> str:
        """Save member ``encoder`` (index or display name), as tuned inside the stack, as a standalone HF model:
        its weights and config (loadable with ``AutoModel.from_pretrained``) and, given the multi-tokenizer, its own
        tokenizer. Returns the folder."""
        base = self.base_model
        i = self.config.encoder_index(encoder)
        member = base.encoders[i]
        member.save_pretrained(save_directory, **kwargs)
        if tokenizer is not None:
            tokenizer.check_model(self)
            tokenizer.tokenizers[i].save_pretrained(save_directory)
        return str(save_directory)

    @classmethod
    def from_encoders(cls, encoders, encoder_names=None, encoder_kwargs=None, **kwargs):
        """Assemble a model from pretrained member checkpoints (any name or folder ``AutoModel`` accepts).

        Each member is loaded once, with its dropout override (``encoder_dropout``) already in its config, and becomes
        part of the model as it is (no random copy, no weight copying): only the fusion and the head are new.
        Members load in float32, whatever dtype their checkpoint was saved in: a half-precision checkpoint (common on
        the Hub) would otherwise load as stored (transformers 5 reads ``dtype="auto"``) and fine-tune without fp32
        master weights, which loses small updates and can turn the gradients to NaN; mixed precision belongs to the
        Trainer (``--bf16``). ``encoder_kwargs={"dtype": ...}`` loads them otherwise.
        ``kwargs`` go to the config (``fusion=``, ``pooling=``, ``num_labels=``, ``id2label=``, ...).
        """
        if isinstance(encoders, str) or not encoders:
            raise ValueError("`encoders` must be a non-empty list of checkpoint names or folders.")
        encoder_kwargs = dict(encoder_kwargs or {})
        # checked before the members load (each member's config would refuse a bad value in its own words)
        dropouts = _per_member("encoder_dropout", kwargs.get("encoder_dropout"), len(encoders))
        for dropout in dropouts:
            _check_dropout("encoder_dropout", dropout)
        members = []
        for name, dropout in zip(encoders, dropouts):
            check_member_source(name)
            member_config = AutoConfig.from_pretrained(name, **encoder_kwargs)
            if dropout is not None:
                set_member_dropout(member_config, dropout)
            members.append(AutoModel.from_pretrained(name, config=member_config, **_member_dtype(encoder_kwargs)))
        if "tokenizer_fingerprints" not in kwargs:
            kwargs["tokenizer_fingerprints"] = _member_tokenizer_fingerprints(encoders, encoder_kwargs)
        config = cls.config_class.from_encoder_configs(
            [m.config for m in members], encoder_names=encoder_names or [str(e) for e in encoders], **kwargs
        )
        model = cls(config, encoders=members)
        model.base_model._untrained_fusion = config.fusion != "concat"  # `encode` warns until a training step
        return model


def _member_dtype(encoder_kwargs: dict) -> dict:
    """`encoder_kwargs` with float32 weights unless they name a dtype (`from_encoders`)."""
    if "dtype" in encoder_kwargs or "torch_dtype" in encoder_kwargs:
        return encoder_kwargs
    return {**encoder_kwargs, "dtype": torch.float32}


def _member_tokenizer_fingerprints(encoders, encoder_kwargs) -> list[str | None] | None:
    """Each member checkpoint's own tokenizer fingerprint (None for a checkpoint without a tokenizer), recorded at
    assembly so that a tokenizer swapped later is refused (`MultiEncoderTokenizer.check_model` and its loading)."""
    prints = []
    for name in encoders:
        try:
            prints.append(tokenizer_fingerprint(AutoTokenizer.from_pretrained(name, **encoder_kwargs)))
        except (OSError, ValueError, TypeError, KeyError):  # no tokenizer files: nothing to record for this member
            prints.append(None)
    return prints if any(p is not None for p in prints) else None


class MultiEncoderModel(MultiEncoderPreTrainedModel):
    """Members + fusion. Returns the fused vector(s) and the fusion weights.

    Sentence mode (no ``word_ids``): each member's token states are pooled per ``config.pooling``; word mode
    (``word_ids`` and ``word_mask`` given): each member's subword states are pooled per word
    (``config.word_pooling``) and the word vectors are fused word by word.
    """

    def __init__(self, config: MultiEncoderConfig, word_level: bool = False, encoders: list | None = None):
        r"""
        encoders (`list[PreTrainedModel]`, *optional*):
            Live member models (as ``VisionTextDualEncoderModel(vision_model=, text_model=)`` takes them), used as they
            are; by default each member is built from its config in ``config.encoders`` (random weights, to be
            overwritten by ``from_pretrained``).
        """
        super().__init__(config)
        if config.num_encoders == 0:
            raise ValueError("MultiEncoderConfig has no member encoders: build it with `encoders=[...]`.")
        if encoders is not None and len(encoders) != config.num_encoders:
            raise ValueError(f"{len(encoders)} live member models for a config with {config.num_encoders} members.")
        self.word_level = word_level
        self.encoders = nn.ModuleList()
        for i in range(config.num_encoders):
            member = encoders[i] if encoders is not None else AutoModel.from_config(config.get_encoder_config(i))
            self.encoders.append(member)
        self.freeze_member_poolers()
        self._takes_token_type_ids = [
            "token_type_ids" in inspect.signature(m.forward).parameters for m in self.encoders
        ]
        self.max_positions = [_max_positions(m) for m in self.encoders]
        self._inputs_checked = False
        self._needs_hidden_states = [p.startswith("last4") for p in config.encoder_poolings] if not word_level else [
            False] * config.num_encoders
        self.fusion, self.fusion_norm = self.build_fusion_layers(word_level)
        self.fusion_dropout = nn.Dropout(config.fusion_dropout)
        self.post_init()

    def build_fusion_layers(self, word_level: bool) -> tuple[nn.Module, nn.Module]:
        """A new fusion for sentence or word vectors, as ``config`` describes it, and its optional LayerNorm."""
        config = self.config
        fusion = build_fusion(config.fusion, config.pooled_sizes(word_level), fusion_dim=config.fusion_dim,
                              fusion_gating=config.fusion_gating, cdme_hidden_size=config.cdme_hidden_size,
                              context_sizes=config.encoder_hidden_sizes)
        return fusion, nn.LayerNorm(fusion.output_size) if config.fusion_layer_norm else nn.Identity()

    def fusion_layers(self, word_level: bool) -> tuple[nn.Module, nn.Module]:
        """The fusion (and its norm) that fuses vectors of this level. A model fuses one level; a subclass that
        holds a fusion per level (the multi-task model) returns the one asked for."""
        if word_level != self.word_level:
            raise ValueError(
                "This model works on words: pass `word_ids` and `word_mask` (tokenize with is_split_into_words=True)."
                if self.word_level else "`word_ids` given to a sentence-level model; drop them."
            )
        return self.fusion, self.fusion_norm

    @property
    def output_size(self) -> int:
        return self.fusion.output_size

    def member_max_lengths(self, max_length: int | None = None) -> list[int]:
        """Per member, ``max_length`` (default 512) capped at what the member takes."""
        return [min(max_length or 512, limit) for limit in self.max_positions]

    def freeze_member_poolers(self) -> None:
        """Members' poolers are unused (members are pooled per ``config.pooling``): kept, so that an exported member
        loads without new weights, and frozen, so that every trainable parameter trains (DDP without
        ``find_unused_parameters``)."""
        for member in self.encoders:
            pooler = getattr(member, "pooler", None)
            if isinstance(pooler, nn.Module):
                pooler.requires_grad_(False)

    def _infer_attention_mask(self, i: int, ids: torch.Tensor) -> torch.Tensor:
        """A member's mask from its pad token id when none was given (transformers' members would attend to the
        padding, and pooling would average it in)."""
        pad = self.config.encoders[i].get("pad_token_id")
        if pad is None:
            return torch.ones_like(ids)
        mask = (ids != pad).long()
        if not torch.compiler.is_compiling() and not bool(mask.all()):
            logger.warning_once("No `attention_mask` was given with padded `input_ids`: each member's mask is "
                                "inferred from its pad token id. Pass the tokenizer's `attention_mask`.")
        return mask

    def _check_inputs(self, input_ids, attention_mask, token_type_ids) -> None:
        """Shapes and lengths on every call (no synchronisation); token ids within each member's vocabulary on every
        CPU call and the first accelerator call (a tensor comparison synchronises the device). Skipped while the model
        is traced or exported (ONNX): python checks on concrete values would be frozen into the graph or trip on
        traced sizes, so the exported model's runner checks its inputs instead."""
        if torch.jit.is_tracing() or torch.compiler.is_exporting():
            return
        names = self.config.encoder_names
        batch_sizes = {}
        for i, ids in enumerate(input_ids):
            if ids is None:
                continue
            if ids.dim() != 2:
                raise ValueError(f"Member {i} ({names[i]}): `input_ids` must be a (batch, seq) tensor, got shape "
                                 f"{tuple(ids.shape)}: tokenize with return_tensors='pt' (a batch of one text is "
                                 f"(1, seq)).")
            batch_sizes[i] = ids.size(0)
            if len(set(batch_sizes.values())) > 1:
                first = next(iter(batch_sizes))
                raise ValueError(f"Member {i} ({names[i]}) got a batch of {ids.size(0)} examples but member {first} "
                                 f"({names[first]}) of {batch_sizes[first]}: every member needs the same examples, in "
                                 f"the same order; tokenize the batch once with MultiEncoderTokenizer.")
            for key, other in (("attention_mask", attention_mask[i]), ("token_type_ids", token_type_ids[i])):
                if other is not None and other.shape != ids.shape:
                    raise ValueError(f"Member {i} ({names[i]}): `{key}` has shape {tuple(other.shape)} but "
                                     f"`input_ids` {tuple(ids.shape)}: were the members' inputs given in another "
                                     f"order?")
            if ids.size(1) > self.max_positions[i]:
                raise ValueError(f"Member {i} ({names[i]}) takes at most {self.max_positions[i]} tokens, got "
                                 f"{ids.size(1)}: tokenize with truncation=True and max_length <= "
                                 f"{self.max_positions[i]} for it.")
            if torch.compiler.is_compiling() or (self._inputs_checked and ids.device.type != "cpu"):
                continue
            vocab = self.config.encoders[i].get("vocab_size")
            if vocab is not None and ids.numel() and int(ids.max()) >= vocab:
                raise ValueError(f"Member {i} ({names[i]}) got token id {int(ids.max())} but its vocabulary has "
                                 f"{vocab} tokens: the members' inputs are in another order than the model's "
                                 f"{names}, or come from a tokenizer built for other members.")
        self._inputs_checked = True

    def encode_member(self, i, input_ids, attention_mask, token_type_ids=None, output_hidden_states=None):
        """Run member ``i``; returns its last hidden state and (if its pooling needs them, or when asked) all hidden
        states."""
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None and self._takes_token_type_ids[i]:
            kwargs["token_type_ids"] = token_type_ids
        if output_hidden_states is None:
            output_hidden_states = self._needs_hidden_states[i]
        out = self.encoders[i](**kwargs, output_hidden_states=output_hidden_states, return_dict=True)
        return out.last_hidden_state, out.hidden_states

    def sentence_member_embeddings(self, input_ids, attention_mask=None, token_type_ids=None) -> list[torch.Tensor]:
        """Each member's sentence vector ``(batch, d_i)``, pooled per ``config.pooling``, also for a word-level model
        (whose forward pools words instead)."""
        n = self.config.num_encoders
        input_ids = _as_list(input_ids, n, "input_ids")
        attention_mask = [self._infer_attention_mask(i, ids) if m is None else m
                          for i, (ids, m) in enumerate(zip(input_ids, _as_list(attention_mask, n, "attention_mask")))]
        token_type_ids = _as_list(token_type_ids, n, "token_type_ids")
        self._check_inputs(input_ids, attention_mask, token_type_ids)
        embeddings = []
        for i, pooling in enumerate(self.config.encoder_poolings):
            last, hidden = self.encode_member(i, input_ids[i], attention_mask[i], token_type_ids[i],
                                              output_hidden_states=pooling.startswith("last4"))
            embeddings.append(pool_sentence(pooling, last, hidden, attention_mask[i]))  # (batch, d_i)
        return embeddings

    def forward(
        self,
        input_ids: list[torch.Tensor] | None = None,
        attention_mask: list[torch.Tensor] | None = None,
        token_type_ids: list[torch.Tensor | None] | None = None,
        word_ids: list[torch.Tensor] | None = None,
        word_mask: torch.Tensor | None = None,
        encoder_features: list[torch.Tensor | None] | None = None,
        **kwargs,
    ) -> MultiEncoderModelOutput:
        r"""
        encoder_features (`list[torch.FloatTensor | None]`, *optional*):
            Precomputed pooled vectors `(batch, d_i)` of (frozen) members, e.g. from a feature cache; those members
            are not run. Sentence mode only, and not with `cdme` (it needs the token states).
        """
        n = self.config.num_encoders
        if input_ids is None:
            raise ValueError("`input_ids` is required: a list with one (batch, seq) tensor per member encoder.")
        if self.training and torch.is_grad_enabled():
            self._untrained_fusion = False  # a training step: the fusion is being trained (`encode` stops warning)
        if _is_example_major(input_ids):  # batched pipeline: pad each member's inputs here, on the device
            pad_ids = [c.get("pad_token_id") or 0 for c in self.config.encoders]
            input_ids = _member_major(input_ids, n, "input_ids", pad_ids)
            attention_mask = None if attention_mask is None else _member_major(attention_mask, n, "attention_mask",
                                                                                 [0] * n)
            if _is_example_major(token_type_ids):
                token_type_ids = _member_major(token_type_ids, n, "token_type_ids", [0] * n)
            if _is_example_major(word_ids):
                word_ids = _member_major(word_ids, n, "word_ids", [-1] * n)
        input_ids = _as_list(input_ids, n, "input_ids")
        attention_mask = _as_list(attention_mask, n, "attention_mask")
        token_type_ids = _as_list(token_type_ids, n, "token_type_ids")
        for i, ids in enumerate(input_ids):
            if ids is None and (encoder_features is None or encoder_features[i] is None):
                raise ValueError(f"`input_ids` has no tensor for member {i} ({self.config.encoder_names[i]}).")
        attention_mask = [self._infer_attention_mask(i, ids) if m is None and ids is not None else m
                          for i, (ids, m) in enumerate(zip(input_ids, attention_mask))]
        self._check_inputs(input_ids, attention_mask, token_type_ids)
        word_level = word_ids is not None
        fusion, fusion_norm = self.fusion_layers(word_level)
        if word_level:
            word_ids = _as_list(word_ids, n, "word_ids")
            if word_mask is None:
                raise ValueError("Word mode needs `word_mask` (batch, num_words) next to `word_ids`: tokenize the "
                                 "words with is_split_into_words=True, which returns both.")
            num_words = word_mask.size(1)

        encoder_features = _as_list(encoder_features, n, "encoder_features")
        if any(f is not None for f in encoder_features) and (word_level or fusion.needs_context):
            raise ValueError("`encoder_features` (cached member vectors) work for sentence-level models with a "
                             "fusion that needs no token states (concat, dme, mean).")
        embeddings, contexts, presents = [], [], []
        for i in range(n):
            if encoder_features[i] is not None:
                embeddings.append(encoder_features[i])
                contexts.append(None)
                continue
            last, hidden = self.encode_member(i, input_ids[i], attention_mask[i], token_type_ids[i])
            if word_level:
                words, present = pool_words(self.config.word_pooling, last, word_ids[i], num_words)
                embeddings.append(words)  # (batch, num_words, d_i)
                contexts.append((words, present & word_mask.bool()))
                presents.append(present)
            else:
                pooling = self.config.encoder_poolings[i]
                embeddings.append(pool_sentence(pooling, last, hidden, attention_mask[i]))  # (batch, d_i)
                contexts.append((last, attention_mask[i]))

        member_mask = torch.stack(presents, dim=-1) if word_level else None  # (batch, num_words, n)
        fused, weights = fusion(embeddings, contexts if fusion.needs_context else None, member_mask=member_mask)
        fused = self.fusion_dropout(fusion_norm(fused))
        out_mask = None
        if word_level:
            out_mask = (word_mask.bool() & member_mask.any(dim=-1)).long()
        return MultiEncoderModelOutput(
            pooler_output=None if word_level else fused,
            last_hidden_state=fused if word_level else None,
            fusion_weights=weights,
            member_embeddings=tuple(embeddings),
            word_mask=out_mask,
        )


class MultiEncoderForSequenceClassification(MultiEncoderPreTrainedModel):
    """Multi-encoder with a linear head on the fused sentence vector: single-label or multi-label classification,
    or regression, by ``config.problem_type`` (as transformers' own heads)."""

    def __init__(self, config: MultiEncoderConfig, encoders: list | None = None):
        super().__init__(config)
        _list_pipeline(config, CLASSIFICATION_TASK)
        _check_num_labels(config)
        self.num_labels = config.num_labels
        self.multiencoder = MultiEncoderModel(config, encoders=encoders)
        self.dropout = nn.Dropout(config.classifier_dropout or 0.0)
        self.classifier = nn.Linear(self.multiencoder.output_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: list[torch.Tensor] | None = None,
        attention_mask: list[torch.Tensor] | None = None,
        token_type_ids: list[torch.Tensor | None] | None = None,
        labels: torch.Tensor | None = None,
        encoder_features: list[torch.Tensor | None] | None = None,
        **kwargs,
    ) -> MultiEncoderSequenceClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Class indices in `[0, num_labels)`; floats for regression (`num_labels == 1`); multi-hot floats of shape
            `(batch_size, num_labels)` for multi-label classification.
        """
        out = self.multiencoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                encoder_features=encoder_features)
        logits = self.classifier(self.dropout(out.pooler_output))  # (batch, num_labels)
        loss = None
        if labels is not None:
            if self.config.problem_type is None:
                if self.num_labels == 1:
                    self.config.problem_type = "regression"
                elif labels.dtype in (torch.long, torch.int):
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"
            loss = sequence_loss(logits, labels, self.config.problem_type)
        return MultiEncoderSequenceClassifierOutput(
            loss=loss, logits=logits, fusion_weights=out.fusion_weights, pooler_output=out.pooler_output
        )

    def predict_with_fusion_weights(self, tokenizer, sentences, text_pairs=None, batch_size: int = 32,
                                    max_length: int | None = None) -> dict:
        """Predict a list of sentences and report each one's per-member fusion weights.

        Returns ``{"Sentences": [...], "Predictions": [label, ...], "fusion_weights": [{member: weight}, ...]}``
        (``"fusion_weights"`` holds ``None`` per sentence for fusions without weights), a [`FusionPredictions`]:
        the original project's key ``"DME scores"`` still reads, with a warning. Regression models predict the score.
        Inputs are truncated to ``max_length`` tokens per member (default 512), never beyond a member's own limit.
        """
        regression = self.config.problem_type == "regression" or self.num_labels == 1
        return predict_sentences(self, tokenizer, sentences, text_pairs, batch_size=batch_size, max_length=max_length,
                                 id2label=None if regression else self.config.id2label)


class MultiEncoderForTokenClassification(MultiEncoderPreTrainedModel):
    """Multi-encoder tagger: members' subword states pooled to words, fused per word, a linear head per word."""

    def __init__(self, config: MultiEncoderConfig, encoders: list | None = None):
        super().__init__(config)
        _list_pipeline(config, NER_TASK)
        _check_num_labels(config)
        self.num_labels = config.num_labels
        self.multiencoder = MultiEncoderModel(config, word_level=True, encoders=encoders)
        self.dropout = nn.Dropout(config.classifier_dropout or 0.0)
        self.classifier = nn.Linear(self.multiencoder.output_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: list[torch.Tensor] | None = None,
        attention_mask: list[torch.Tensor] | None = None,
        token_type_ids: list[torch.Tensor | None] | None = None,
        word_ids: list[torch.Tensor] | None = None,
        word_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> MultiEncoderTokenClassifierOutput:
        r"""
        word_ids (`list[torch.LongTensor]`, one `(batch_size, seq_i)` per member):
            The word each subword belongs to; -1 for special tokens and padding.
        word_mask (`torch.LongTensor` of shape `(batch_size, num_words)`):
            1 for real words.
        labels (`torch.LongTensor` of shape `(batch_size, num_words)`, *optional*):
            A label per word; -100 is ignored. Words every member cut off are ignored too.
        """
        if word_ids is None:
            raise ValueError("Token classification needs `word_ids` and `word_mask`: tokenize pre-split words with "
                             "MultiEncoderTokenizer(..., is_split_into_words=True).")
        out = self.multiencoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                word_ids=word_ids, word_mask=word_mask)
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (batch, num_words, num_labels)
        loss = None if labels is None else word_loss(logits, labels, out.word_mask)
        return MultiEncoderTokenClassifierOutput(
            loss=loss, logits=logits, fusion_weights=out.fusion_weights, word_mask=out.word_mask
        )

    def predict_tags(self, tokenizer, sentences, batch_size: int = 32, max_length: int | None = None) -> list[dict]:
        """Tag sentences: a string, a list of strings (each split into words by `tokenizer.pre_tokenize`, as the
        `multiencoder-ner` pipeline splits them: "France." is two words) or a list of word lists.

        Returns, per sentence, ``{"words", "tags", "entities": [{"type", "start", "end", "text"}],
        "fusion_weights": [{member: weight} per word] or None}`` (``end`` exclusive, in words). Words that every
        member cut off at ``max_length`` are tagged ``"O"``.
        """
        return predict_words(self, tokenizer, sentences, batch_size=batch_size, max_length=max_length,
                             id2label=self.config.id2label)


def _check_num_labels(config) -> None:
    """A head needs at least one output (transformers' configs take `num_labels=0` and build an empty head)."""
    if config.num_labels < 1:
        raise ValueError(f"`num_labels` is {config.num_labels}: a head needs at least 1 (1 for regression, the number "
                         f"of classes otherwise); pass num_labels=... or id2label={{0: 'neg', 1: 'pos'}}.")


def _list_pipeline(config, task: str) -> None:
    """List the head's pipeline in the config (`custom_pipelines`), so that a saved folder answers
    `pipeline(task, model=folder, trust_remote_code=True)` and `pipeline(model=folder, ...)` finds the task."""
    if not getattr(config, "custom_pipelines", None):
        config.custom_pipelines = {task: {**CUSTOM_PIPELINES[task], "pt": list(CUSTOM_PIPELINES[task]["pt"])}}


# ---- prediction loops (shared by the task heads and the multi-task model) ------------------------------------------
class FusionPredictions(dict):
    """Sentence predictions with each one's fusion weights: ``{"Sentences", "Predictions", "fusion_weights"}``.
    ``result["DME scores"]``, the original project's name for ``"fusion_weights"``, still reads (with a
    `FutureWarning`); every fusion's weights go by ``fusion_weights`` here, as in the model outputs and pipelines."""

    def __missing__(self, key):
        if key == "DME scores" and "fusion_weights" in self:
            warnings.warn('"DME scores" is now called "fusion_weights"; the old key will go in a later release.',
                          FutureWarning, stacklevel=2)
            return self["fusion_weights"]
        raise KeyError(key)


def _prediction_inputs(sentences, batch_size) -> list:
    """The inputs of a predict helper as a list (one string, a list, or any iterable such as a generator), with the
    batch size checked as `encode` checks it."""
    check_batch_size(batch_size)
    return as_text_list(sentences)


@torch.no_grad()
def predict_sentences(model, tokenizer, sentences, text_pairs=None, batch_size: int = 32,
                      max_length: int | None = None, *, id2label: dict | None, **forward_kwargs) -> dict:
    """`predict_with_fusion_weights` of any model whose output has sentence `logits` and `fusion_weights`:
    `id2label` names the classes (None: regression, the score is predicted); `forward_kwargs` go to every call
    (the multi-task model's `task=`). Inputs are truncated to `max_length` tokens per member (default 512), never
    beyond a member's own limit."""
    sentences = _prediction_inputs(sentences, batch_size)
    if text_pairs is not None:
        text_pairs = _prediction_inputs(text_pairs, batch_size)
    tokenizer.check_model(model)
    model.eval()
    preds, scores = [], []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        pairs = None if text_pairs is None else text_pairs[start:start + batch_size]
        batch = tokenizer(chunk, text_pair=pairs, padding=True, truncation=True,
                          max_length=model.base_model.member_max_lengths(max_length),
                          return_tensors="pt").to(model.device)
        out = model(**batch, **forward_kwargs)
        if id2label is None:
            preds.extend(out.logits.squeeze(-1).tolist())
        else:
            preds.extend(id2label[i] for i in out.logits.argmax(-1).tolist())
        if out.fusion_weights is None:
            scores.extend([None] * len(chunk))
        else:
            scores.extend(fusion_weights_per_example(out.fusion_weights, model.config.encoder_names))
    return FusionPredictions(Sentences=list(sentences), Predictions=preds, fusion_weights=scores)


@torch.no_grad()
def predict_words(model, tokenizer, sentences, batch_size: int = 32, max_length: int | None = None, *,
                  id2label: dict, **forward_kwargs) -> list[dict]:
    """`predict_tags` of any model whose output has word `logits`, `word_mask` and `fusion_weights`;
    `forward_kwargs` go to every call (the multi-task model's `task=`)."""
    sentences = _prediction_inputs(sentences, batch_size)
    for i, s in enumerate(sentences):
        if not isinstance(s, (str, list, tuple)):
            raise ValueError(f"Sentence {i} is {s!r} ({type(s).__name__}): give each sentence as a string or a list "
                             f"of words.")
    words_list = [[w for w, _ in tokenizer.pre_tokenize(s)] if isinstance(s, str) else list(s) for s in sentences]
    empty = [i for i, words in enumerate(words_list) if not words]
    if empty:
        raise ValueError(f"Sentence(s) {empty[:5]} have no words (empty or only spaces): there is nothing to tag; "
                         f"leave them out.")
    tokenizer.check_model(model)
    model.eval()
    results = []
    for start in range(0, len(words_list), batch_size):
        chunk = words_list[start:start + batch_size]
        batch = tokenizer(chunk, is_split_into_words=True, truncation=True,
                          max_length=model.base_model.member_max_lengths(max_length),
                          return_tensors="pt").to(model.device)
        out = model(**batch, **forward_kwargs)
        lengths = [len(words) for words in chunk]
        keep = torch.arange(out.logits.size(1)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
        tags = word_tags(out.logits.cpu(), out.word_mask.cpu(), keep, id2label)
        weights = None if out.fusion_weights is None else fusion_weights_per_example(
            out.fusion_weights, model.config.encoder_names, lengths=lengths)
        for b, words in enumerate(chunk):
            results.append({"words": words, "tags": tags[b], "entities": tags_to_spans(words, tags[b]),
                            "fusion_weights": None if weights is None else weights[b]})
    return results


def tags_to_spans(words: list[str], tags: list[str]) -> list[dict]:
    """IOB2 (or IOB1) tags to entity spans ``{"type", "start", "end", "text"}``, ``end`` exclusive."""
    spans, current = [], None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, kind = tag.partition("-")
        starts = prefix == "B" or (prefix == "I" and (current is None or current["type"] != kind))
        if current is not None and (prefix == "O" or starts):
            current["text"] = " ".join(words[current["start"]:i])
            current["end"] = i
            spans.append(current)
            current = None
        if starts:
            current = {"type": kind, "start": i}
    return [{"type": s["type"], "start": s["start"], "end": s["end"], "text": s["text"]} for s in spans]


__all__ = [
    "FusionPredictions",
    "multiencoder_base",
    "parameter_members",
    "MultiEncoderPreTrainedModel",
    "MultiEncoderModel",
    "MultiEncoderForSequenceClassification",
    "MultiEncoderForTokenClassification",
    "MultiEncoderModelOutput",
    "MultiEncoderSequenceClassifierOutput",
    "MultiEncoderTokenClassifierOutput",
    "fusion_weights_per_example",
    "mean_fusion_weights",
    "member_layer_classes",
    "predict_sentences",
    "predict_words",
    "sequence_loss",
    "tags_to_spans",
    "word_loss",
    "word_tags",
]
