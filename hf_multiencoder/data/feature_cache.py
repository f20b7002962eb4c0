"""Frozen-member feature cache: run each frozen member once over a dataset and train on its stored pooled vectors.

A frozen member gives the same pooled vector for a sentence at every epoch, so running it at every step is wasted
work. [`add_member_features`] runs the members once (eval mode, no gradients) and stores their vectors in an
``encoder_features`` column; [`CachedFeaturesCollator`] hands them to the model as ``encoder_features=[...]`` and
drops those members' token inputs, so the model does not run them::

    freeze_encoders(model, [1])
    train = add_member_features(train, model, members=[1], cache_dir="outputs/feature_cache")
    trainer = Trainer(model, args, train_dataset=train, data_collator=CachedFeaturesCollator(tokenizer), ...)

The column is written with ``dataset.map(new_fingerprint=...)``; the fingerprint hashes the dataset's own fingerprint
(its data and its tokenization), the cached members' weights, configs and pooling, so a stored cache is reused only
while all of them are unchanged.

Cached vectors are computed in eval mode: without the dropout a frozen member in a model in train mode would still
apply. With the cache, training sees the deterministic features (the usual feature-extraction setup); logits in
eval mode are the same with or without it.

Training-side helper (imports ``datasets``): not shipped with the weights.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import torch
import xxhash

from ..models.configuration_multiencoder import POOLING_METHODS
from ..models.modeling_multiencoder import multiencoder_base, pool_sentence
from ..models.precision_multiencoder import auto_bf16
from ..models.tokenization_multiencoder import MemberTensors, pad_rows
from .data_collator import MultiEncoderDataCollator

logger = logging.getLogger(__name__)

FEATURES_COLUMN = "encoder_features"
# Bump when the stored layout or the pooling code changes: old cache files then stop matching.
_CACHE_FORMAT_VERSION = "1"
_TOKEN_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def member_fingerprint(model, i: int) -> str:
    """A hash of member ``i``'s weights (bytes, names, shapes, dtypes), config and pooling method."""
    base = multiencoder_base(model)
    member = base.encoders[i]
    hasher = xxhash.xxh3_128()
    hasher.update(json.dumps(base.config.encoders[i], sort_keys=True).encode())
    hasher.update(base.config.encoder_poolings[i].encode())
    for name, tensor in sorted(member.state_dict().items()):
        tensor = tensor.detach().contiguous().cpu()
        hasher.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        hasher.update(tensor.reshape(-1).view(torch.uint8).numpy())  # hashed in place, no copy
    return hasher.hexdigest()


def _check_cacheable(base, indices: list[int]) -> None:
    if base.word_level:
        raise ValueError("The feature cache works for sentence-level models only: token classification pools every "
                         "word from the member's token states, which a cache of pooled vectors cannot supply.")
    if base.fusion.needs_context:
        raise ValueError(f"`{base.config.fusion}` fusion scores members from their token states, so its members "
                         f"cannot be replaced by cached pooled vectors; use concat, dme or mean.")
    for i in indices:
        trainable = [n for n, p in base.encoders[i].named_parameters() if p.requires_grad]
        if trainable:
            raise ValueError(
                f"Member {i} ({base.config.encoder_names[i]}) has trainable parameters (e.g. {trainable[0]}): its "
                f"cached features would go stale after the first optimizer step. Freeze it first "
                f"(`freeze_encoders(model, [{i}])`) or leave it out of `members`."
            )


@torch.inference_mode()
def _encode_batch(batch: dict, base, indices, pad_ids, column: str, poolings=None) -> dict:
    n = base.config.num_encoders
    size = len(batch["input_ids"])
    columns = [f"{column}_{p}" for p in poolings] if poolings else [column]
    rows = {}
    for name in columns:
        previous = batch.get(name)
        rows[name] = [list(previous[b]) if previous is not None else [[] for _ in range(n)] for b in range(size)]
    device = next(base.parameters()).device
    for i in indices:
        ids = pad_rows([ex[i] for ex in batch["input_ids"]], pad_ids[i]).to(device)  # (batch, seq_i)
        mask = pad_rows([ex[i] for ex in batch["attention_mask"]], 0).to(device) if "attention_mask" in batch \
            else torch.ones_like(ids)
        token_types = None
        if "token_type_ids" in batch:
            token_types = pad_rows([ex[i] for ex in batch["token_type_ids"]], 0).to(device)
        last, hidden = base.encode_member(i, ids, mask, token_types,
                                          output_hidden_states=True if poolings else None)
        for name, pooling in zip(columns, poolings or [base.config.encoder_poolings[i]]):
            pooled = pool_sentence(pooling, last, hidden, mask)  # (batch, d_i)
            for b, vector in enumerate(pooled.float().cpu().tolist()):
                rows[name][b][i] = vector
    return rows


def add_member_features(
    dataset: datasets.Dataset,
    model,
    members: Sequence[int | str],
    batch_size: int = 64,
    cache_dir: str | os.PathLike | None = None,
    column: str = FEATURES_COLUMN,
    load_from_cache_file: bool | None = None,
    poolings: Sequence[str] | None = None,
    autocast_dtype: torch.dtype | str | None = "auto",
) -> datasets.Dataset:
    """Run each (frozen) member in ``members`` once over ``dataset`` and store its pooled vectors in ``column``.

    Args:
        dataset: examples tokenized by `MultiEncoderTokenizer` without `return_tensors` (per-member lists under
            `input_ids`, `attention_mask` and optionally `token_type_ids`).
        model: a sentence-level multi-encoder (`MultiEncoderForSequenceClassification` or `MultiEncoderModel`)
            whose fusion needs no token states (`concat`, `dme`, `mean`).
        members: indices or display names of the members to cache; each must be frozen.
        batch_size: examples per member forward pass.
        cache_dir: folder for the cache file (`member-features-<fingerprint>.arrow`). By default the file goes
            where `datasets` keeps the dataset's own cache files; a dataset held only in memory (e.g. built with
            `Dataset.from_dict`) then gets no cache file and the features are computed again on every call.
        column: name of the new column; it must stay `encoder_features` for the Trainer to keep it.
        load_from_cache_file: reuse a cache file with the same fingerprint (default: `datasets`' caching switch).
        poolings: several poolings (e.g. `("cls", "mean", "last4")`) from one pass of each member, stored in the
            columns `<column>_<pooling>` instead of `column` (the model's own pooling is then not used); pick one
            for training with [`select_pooling`].
        autocast_dtype: run the members under `torch.autocast` in this dtype (`torch.bfloat16`: vectors stored in
            float32), None for fp32, or `"auto"` (the default): bf16 where the hardware computes it natively (a CPU
            with AMX or AVX512-BF16, a GPU with bf16; `hf_multiencoder.models.precision_multiencoder`), fp32
            elsewhere or with `HF_MULTIENCODER_FAST_PATH=off`. The dtype used is part of the cache's fingerprint.

    Members see the examples sorted by length (less padding: pairs of very different lengths cost a fraction); the
    returned dataset keeps the original order.

    Under several processes (torchrun, accelerate launch) the main process of each machine computes the features and
    writes the cache file while the others wait, then they read it: the members run once per machine, not once per
    process. That needs a cache file: `cache_dir`, or a dataset stored on disk.

    Returns:
        The dataset with `column` added: per example a list with one entry per member, the pooled vector
        (float32 list of the member's pooled width) for cached members and `[]` for the others. An existing
        `column` is merged: entries of members not in `members` are kept.
    """
    base = multiencoder_base(model)
    n = base.config.num_encoders
    indices = sorted({base.config.encoder_index(m) for m in members})
    if not indices:
        raise ValueError("`members` is empty: name at least one frozen member to cache.")
    _check_cacheable(base, indices)
    missing = [k for k in ("input_ids",) if k not in dataset.column_names]
    if missing:
        raise ValueError(f"The dataset has no {missing} column: tokenize it with MultiEncoderTokenizer first.")
    if len(dataset) and len(dataset[0]["input_ids"]) != n:
        raise ValueError(f"The dataset holds inputs for {len(dataset[0]['input_ids'])} members but the model has {n}.")

    device_type = next(base.parameters()).device.type
    if autocast_dtype == "auto":
        autocast_dtype = torch.bfloat16 if auto_bf16(device_type) else None
    elif autocast_dtype is not None and not isinstance(autocast_dtype, torch.dtype):
        raise ValueError(f"`autocast_dtype` must be a torch dtype, None or 'auto', got {autocast_dtype!r}.")
    hasher = xxhash.xxh64()
    for part in (_CACHE_FORMAT_VERSION, dataset._fingerprint, column, *indices, *(poolings or ()), autocast_dtype,
                 *(member_fingerprint(base, i) for i in indices)):
        hasher.update(str(part).encode())
    fingerprint = hasher.hexdigest()

    cache_file_name = None
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
        cache_file_name = os.path.join(str(cache_dir), f"member-features-{fingerprint}.arrow")
        if load_from_cache_file is None:
            load_from_cache_file = datasets.is_caching_enabled()
        if load_from_cache_file and os.path.isfile(cache_file_name):
            _drop_damaged_cache_file(cache_file_name, len(dataset))

    features = dataset.features.copy()
    list_feature = getattr(datasets, "List", None) or datasets.Sequence  # `List` from datasets 4 on
    for pooling in poolings or ():
        if pooling not in POOLING_METHODS:
            raise ValueError(f"Unknown pooling {pooling!r}; allowed values are: {', '.join(POOLING_METHODS)}.")
    for name in ([f"{column}_{p}" for p in poolings] if poolings else [column]):
        features[name] = list_feature(list_feature(datasets.Value("float32")))
    pad_ids = [base.encoders[i].config.pad_token_id or 0 for i in range(n)]
    members_were_training = [base.encoders[i].training for i in range(n)]
    for i in indices:
        base.encoders[i].eval()
    state = _distributed_state()
    if state is not None and cache_file_name is None and not dataset.cache_files:
        raise ValueError("Under several processes the features are computed once per machine and read from a cache "
                         "file by the other processes: give `cache_dir` (a folder every process can read), or use a "
                         "dataset stored on disk.")
    lengths = [max(len(ids) for ids in row) for row in dataset["input_ids"]]
    order = sorted(range(len(dataset)), key=lengths.__getitem__)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    try:
        with (
            state.local_main_process_first() if state is not None else contextlib.nullcontext(),
            torch.autocast(device_type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None),
        ):
            encoded = dataset.select(order).map(
                _encode_batch,
                fn_kwargs={"base": base, "indices": indices, "pad_ids": pad_ids, "column": column,
                           "poolings": poolings},
                batched=True,
                batch_size=batch_size,
                features=features,
                new_fingerprint=fingerprint,
                cache_file_name=cache_file_name,
                # the other processes read what their machine's main process has just written
                load_from_cache_file=load_from_cache_file if state is None or state.is_local_main_process else True,
                desc=f"Caching features of members {[base.config.encoder_names[i] for i in indices]}",
            )
        return encoded.select(inverse)  # the original order (a view: no copy)
    finally:
        for i, was_training in enumerate(members_were_training):
            base.encoders[i].train(was_training)


def _drop_damaged_cache_file(path: str, num_rows: int) -> None:
    """A cache file that cannot be read whole (cut off by a kill, a full disk, a copy) is deleted with a warning naming
    it, so the features are computed again instead of every rerun failing inside pyarrow."""
    try:
        stored = datasets.Dataset.from_file(path)
        problem = None if len(stored) == num_rows else f"it holds {len(stored)} rows, not {num_rows}"
        if problem is None:
            stored.data.table.validate(full=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is rebuilt
        problem = f"it cannot be read ({type(err).__name__}: {err})"
    if problem is not None:
        logger.warning(f"The feature cache file {path} is damaged ({problem}): deleting it and computing the features "
                       f"again.")
        os.remove(path)


def _distributed_state():
    """accelerate's process state when several processes run (torchrun, accelerate launch), else None."""
    initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not initialized and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import PartialState

    state = PartialState()
    return state if state.num_processes > 1 else None


def select_pooling(dataset: datasets.Dataset, pooling: str, column: str = FEATURES_COLUMN) -> datasets.Dataset:
    """A dataset cached with several ``poolings`` (see [`add_member_features`]) with one of them as ``column`` (what
    the Trainer and [`CachedFeaturesCollator`] read) and the others left out. Cheap: no copy of the data."""
    name = f"{column}_{pooling}"
    if name not in dataset.column_names:
        cached = [c.removeprefix(f"{column}_") for c in dataset.column_names if c.startswith(f"{column}_")]
        raise ValueError(f"No cached features for pooling {pooling!r}; the dataset has {cached or 'none'}.")
    others = [c for c in dataset.column_names if c.startswith(f"{column}_") and c != name]
    if column in dataset.column_names:
        others.append(column)
    return dataset.remove_columns(others).rename_column(name, column)


@dataclass
class CachedFeaturesCollator(MultiEncoderDataCollator):
    """[`MultiEncoderDataCollator`] for datasets with cached member features (see [`add_member_features`]).

    Stacks each cached member's vectors into ``encoder_features[i]`` (a ``(batch, d_i)`` float tensor; ``None`` for
    members without cache) and sets that member's ``input_ids``/``attention_mask``/``token_type_ids`` to ``None``
    (they are not padded at all), so the model uses the vectors and does not run the member. Examples without the
    column collate as with the plain collator.
    """

    feature_column: str = FEATURES_COLUMN

    def __call__(self, features: list[dict]) -> dict:
        column = self.feature_column
        if not features or column not in features[0]:
            return super().__call__(features)
        n = self.tokenizer.num_encoders
        cached_rows = [f[column] for f in features]
        for b, row in enumerate(cached_rows):
            if len(row) != n:
                raise ValueError(f"Example {b}: `{column}` has {len(row)} entries but there are {n} members.")
        present = [[_numel(row[i]) > 0 for row in cached_rows] for i in range(n)]
        for i in range(n):
            if any(present[i]) and not all(present[i]):
                raise ValueError(f"Member {i} has cached features for some examples of the batch but not for others; "
                                 f"cache it over the whole dataset.")
        cached = [all(p) for p in present]
        stripped = []
        for f in features:
            f = {k: v for k, v in f.items() if k != column}
            for key in _TOKEN_KEYS:
                if key in f:  # cached members: nothing to pad
                    f[key] = [[] if cached[i] else seq for i, seq in enumerate(f[key])]
            stripped.append(f)
        batch = super().__call__(stripped)
        for key in _TOKEN_KEYS:
            if key in batch:
                batch[key] = MemberTensors(None if cached[i] else t for i, t in enumerate(batch[key]))
        batch["encoder_features"] = MemberTensors(
            torch.stack([torch.as_tensor(row[i], dtype=torch.float32) for row in cached_rows]) if cached[i] else None
            for i in range(n)
        )  # each (batch, d_i) or None
        return batch


def _numel(value) -> int:
    if value is None:
        return 0
    if isinstance(value, torch.Tensor):
        return value.numel()
    return len(value)


__all__ = ["CachedFeaturesCollator", "add_member_features", "member_fingerprint", "select_pooling"]
