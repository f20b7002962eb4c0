"""Frozen members, trained heads: every member run once over a task, then heads trained on the stored vectors.

With frozen members the expensive part (running the encoders) happens once per task and pooling, through the feature
cache ([`add_member_features`], several poolings from one pass); a head, alone on one member or fusing several, then
trains in seconds with the stock Trainer. This is the seed's "base model training" row, and it tells whether fusion
adds information before any member is tuned. `scripts/glue_frozen.py` (the 5-seed GLUE table) and the demo use it::

    frozen = encode_task("cola", ["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"],
                         encoder_names=["MiniLM", "MPNet"], poolings=["mean"])
    result = train_head(frozen, members=["MiniLM", "MPNet"], fusion="dme", pooling="mean", seed=1)
    result["best_epoch_score"], result["fusion_weights"]

Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasets
import torch
from transformers import AutoModel, PrinterCallback, TrainingArguments, set_seed

from ..data.feature_cache import FEATURES_COLUMN, CachedFeaturesCollator, add_member_features, select_pooling
from ..data.loading import load_task, tokenize_task
from ..data.tasks import TaskSpec, get_task
from ..models.configuration_multiencoder import MultiEncoderConfig
from ..models.modeling_multiencoder import MultiEncoderForSequenceClassification
from ..models.tokenization_multiencoder import MultiEncoderTokenizer
from .fast_path import pin_memory
from .metrics import build_compute_metrics, fusion_weights_from_metrics
from .trainer import MultiEncoderTrainer

MEMBER_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "encoder_features")


@dataclass
class FrozenTask:
    """A task's splits with every member's pooled vectors cached, and what produced them."""

    spec: TaskSpec
    data: datasets.DatasetDict  # train + the task's first validation split, tokenized, with features per pooling
    tokenizer: MultiEncoderTokenizer
    members: list  # the frozen member models, in `tokenizer.encoder_names` order
    poolings: list[str]
    seconds: float  # time spent running the members (0 when the cache was reused)
    examples: dict[str, int] = field(default_factory=dict)


def encode_task(
    task: str | TaskSpec,
    encoders: Sequence[str],
    encoder_names: Sequence[str] | None = None,
    poolings: Sequence[str] = ("cls", "mean", "last4"),
    max_length: int = 128,
    batch_size: int = 64,
    data_dir: str | None = None,
    cache_dir: str | None = None,
    max_train_samples: int | None = None,
) -> FrozenTask:
    """Load a (sentence-level) task, tokenize it for every member and run each frozen member once over its training
    and validation sets, keeping the pooled vectors of every pooling in `poolings` (cached under `cache_dir`, keyed
    by the data, the tokenization and the members' weights: a second call reads them back)."""
    spec = get_task(task)
    if spec.kind != "sequence":
        raise ValueError(f"Frozen heads train on sentence vectors; {spec.name} is a {spec.kind} task.")
    raw, _ = load_task(spec, data_dir=data_dir)
    validation = spec.validation_splits[0]
    raw = datasets.DatasetDict({"train": raw["train"], "validation": raw[validation]})
    if max_train_samples is not None:
        raw["train"] = raw["train"].select(range(min(max_train_samples, len(raw["train"]))))
    tokenizer = MultiEncoderTokenizer.from_encoders(list(encoders), encoder_names=encoder_names)
    members = [AutoModel.from_pretrained(name) for name in encoders]
    for member in members:
        member.requires_grad_(False)
    # a multi-encoder holding the frozen members, only to run them (its fusion and pooling are not used)
    probe_config = MultiEncoderConfig.from_encoder_configs([m.config for m in members],
                                                           encoder_names=tokenizer.encoder_names, fusion="concat")
    probe = MultiEncoderForSequenceClassification(probe_config, encoders=members).eval()
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "hf_multiencoder_features")
    tokenized = tokenize_task(raw, spec, tokenizer, max_length=max_length, add_length=False)
    start = time.perf_counter()
    data = datasets.DatasetDict({
        split: add_member_features(ds, probe, members=list(range(len(members))), batch_size=batch_size,
                                   cache_dir=os.path.join(cache_dir, spec.name, split), poolings=list(poolings))
        for split, ds in tokenized.items()
    })
    return FrozenTask(spec, data, tokenizer, members, list(poolings), time.perf_counter() - start,
                      {split: len(ds) for split, ds in data.items()})


def select_members(dataset: datasets.Dataset, indices: Sequence[int]) -> datasets.Dataset:
    """The per-member columns of a multi-encoder dataset cut to the members `indices` (in that order)."""
    indices = list(indices)
    columns = [c for c in dataset.column_names if c in MEMBER_COLUMNS]
    return dataset.map(lambda batch: {c: [[row[i] for i in indices] for row in batch[c]] for c in columns},
                       batched=True, desc=f"Members {indices}")


def train_head(
    frozen: FrozenTask,
    members: Sequence[str],
    fusion: str = "dme",
    pooling: str = "mean",
    seed: int = 1,
    epochs: int = 8,
    learning_rate: float = 1e-3,
    batch_size: int = 64,
    output_dir: str | None = None,
    return_model: bool = False,
    **config_kwargs,
) -> dict:
    """Train a head (alone on one member, or fusing several) on the cached vectors of `pooling`, with the stock
    Trainer, evaluating every epoch. Returns `{"seed", "epoch_scores", "best_epoch_score", "final_epoch_score",
    "fusion_weights" (by member name, from the last evaluation), "train_seconds"}`, and with `return_model` the trained
    model (the frozen members and the new head) and its tokenizer under `"model"` and `"tokenizer"`."""
    names = list(frozen.tokenizer.encoder_names)
    indices = [names.index(m) for m in members]
    spec = frozen.spec
    data = datasets.DatasetDict({split: select_pooling(ds, pooling) for split, ds in frozen.data.items()})
    if indices != list(range(len(names))):
        data = datasets.DatasetDict({split: select_members(ds, indices) for split, ds in data.items()})
    # the vectors come out of Arrow as tensors, not as Python floats (most of a head's step time otherwise)
    data = data.with_format("torch", columns=[FEATURES_COLUMN], output_all_columns=True)
    tokenizer = MultiEncoderTokenizer([frozen.tokenizer.tokenizers[i] for i in indices], encoder_names=list(members))
    set_seed(seed)
    labels = {"num_labels": spec.num_labels, "problem_type": "regression" if spec.is_regression else
              "single_label_classification"}
    if spec.label_list:
        labels.update(id2label=dict(enumerate(spec.label_list)),
                      label2id={name: i for i, name in enumerate(spec.label_list)})
    config = MultiEncoderConfig.from_encoder_configs([frozen.members[i].config for i in indices],
                                                     encoder_names=list(members), fusion=fusion, pooling=pooling,
                                                     **labels, **config_kwargs)
    model = MultiEncoderForSequenceClassification(config, encoders=[frozen.members[i] for i in indices])
    key = f"eval_{spec.main_metric}"
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(
            output_dir=output_dir or scratch, per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=256, num_train_epochs=epochs, learning_rate=learning_rate,
            weight_decay=0.01, warmup_steps=0.1, eval_strategy="epoch", save_strategy="no", logging_strategy="no",
            report_to=[], seed=seed, disable_tqdm=True, use_cpu=not torch.cuda.is_available(),
            dataloader_pin_memory=pin_memory())
        trainer = MultiEncoderTrainer(model=model, args=args, train_dataset=data["train"],
                                      eval_dataset=data["validation"], data_collator=CachedFeaturesCollator(tokenizer),
                                      compute_metrics=build_compute_metrics(spec, list(members)))
        trainer.remove_callback(PrinterCallback)  # no dict printed per evaluation: the caller reports the scores
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    evaluations = [e for e in trainer.state.log_history if key in e]
    scores = [e[key] for e in evaluations]
    result = {
        "seed": seed,
        "epoch_scores": scores,
        "best_epoch_score": max(scores),
        "final_epoch_score": scores[-1],
        "fusion_weights": fusion_weights_from_metrics(evaluations[-1], list(members)),
        "train_seconds": round(seconds, 2),
    }
    if return_model:
        result.update(model=model.eval(), tokenizer=tokenizer)
    return result


__all__ = ["FrozenTask", "encode_task", "select_members", "train_head"]
