"""The studies' protocol, stated once: the real member pair, the fine-tuning budget and the held-out slice.

`scripts/glue_sweep.py` (does tuning together pay?) and `scripts/distill_study.py` (does a distilled member keep the
gain?) compare rows of one table, so they must train and choose under the same rules; the scripts, demos and
benchmarks that run the real pair name it from here. Training-side code: not shipped with the weights.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

# The real pretrained pair on this project's machines (installed offline by `make encoders`): the studies' members.
REAL_MEMBERS = {"MiniLM": "sentence-transformers/all-MiniLM-L6-v2", "MPNet": "sentence-transformers/all-mpnet-base-v2"}
# The fixed share of each training set held out to choose the epoch on (the same examples for every row and seed).
HELDOUT_FRACTION = 0.1
HELDOUT_SEED = 0


@dataclass(frozen=True)
class FineTuningBudget:
    """One fine-tuning run of a study: AdamW with linear decay after a 10% warm-up, evaluated after every epoch by the
    study itself (the Trainer neither evaluates nor saves)."""

    num_train_epochs: int = 3
    per_device_train_batch_size: int = 32
    learning_rate: float = 2e-5
    max_seq_length: int = 128
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    per_device_eval_batch_size: int = 128

    def to_dict(self) -> dict:
        return asdict(self)

    def training_arguments(self, output_dir: str, seed: int, num_train_epochs: int | None = None,
                           use_cpu: bool = False, **overrides):
        """`TrainingArguments` for one run (`num_train_epochs` overrides the budget's, for a row given more; other
        keywords, e.g. `save_strategy="epoch"` for a run that resumes, override the defaults)."""
        from transformers import TrainingArguments

        from .fast_path import pin_memory

        kwargs = dict(
            output_dir=output_dir, num_train_epochs=num_train_epochs or self.num_train_epochs,
            per_device_train_batch_size=self.per_device_train_batch_size,
            per_device_eval_batch_size=self.per_device_eval_batch_size, learning_rate=self.learning_rate,
            weight_decay=self.weight_decay, warmup_steps=self.warmup_ratio, lr_scheduler_type="linear",
            eval_strategy="no", save_strategy="no", logging_steps=50, report_to="none", seed=seed, disable_tqdm=True,
            use_cpu=use_cpu, dataloader_pin_memory=pin_memory(use_cpu))
        return TrainingArguments(**{**kwargs, **overrides})


FINE_TUNING = FineTuningBudget()


def study_splits(task: str, data_dir: str | None = None, report_split: str | None = None,
                 max_samples: int | None = None):
    """`(DatasetDict train/heldout/dev, spec)`: the task's training set less the fixed held-out slice, the slice, and
    the split the study reports on (`report_split`, default the task's first validation split), which nothing is
    chosen on. `max_samples` cuts every split (a quick check of the machinery, never a reported result)."""
    import datasets

    from ..data.loading import load_task
    from .selection import heldout_split

    raw, spec = load_task(task, data_dir=data_dir)
    train, heldout = heldout_split(raw["train"], HELDOUT_FRACTION, seed=HELDOUT_SEED)
    splits = datasets.DatasetDict({"train": train, "heldout": heldout,
                                   "dev": raw[report_split or spec.validation_splits[0]]})
    if max_samples:
        splits = datasets.DatasetDict({k: ds.select(range(min(max_samples, len(ds)))) for k, ds in splits.items()})
    return splits, spec


def member_paths(overrides: Iterable[str] = (), members: Mapping[str, str] = REAL_MEMBERS) -> dict[str, str]:
    """`members` with `NAME=PATH` overrides applied (a script's repeated `--member` option)."""
    paths = dict(members)
    for item in overrides:
        name, sep, path = item.partition("=")
        if not sep or not path or name not in members:
            raise ValueError(f"--member takes NAME=PATH with NAME one of {', '.join(members)}; got {item!r}.")
        paths[name] = path
    return paths
