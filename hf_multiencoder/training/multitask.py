"""Training several tasks on one multi-encoder with the stock `Trainer` (training side; not shipped with the weights).

Every optimizer step trains one task, MT-DNN style (Liu et al. 2019): [`MultiTaskBatchSampler`] picks the task of each
step with a schedule and fills the step's batches (on every process, and every gradient-accumulation micro-batch)
from that task's data only. [`MultiTaskTrainer`] is the stock `Trainer` (via [`MultiEncoderTrainer`], so it writes a
model card) with three overrides: the training data loader uses that sampler, the loss of a batch is scaled by its
task's loss weight, and `evaluate` scores every task (`eval_<task>_<metric>`) and their combination
(`eval_multitask_score`, the weighted mean of the tasks' main metrics: the metric the best checkpoint is chosen by)::

    from hf_multiencoder import MultiEncoderForMultiTask, MultiEncoderTokenizer
    from hf_multiencoder.training.multitask import MultiTaskTrainer, load_multitask_data, task_heads

    data, specs = load_multitask_data({"ner": "conll2003", "trec": "trec"}, tokenizer, max_train_samples={"trec": 500})
    model = MultiEncoderForMultiTask.from_encoders(names, fusion="dme", tasks=task_heads(specs))
    trainer = MultiTaskTrainer(model=model, args=args, train_dataset=data["train"], eval_dataset=data["validation"],
                               processing_class=tokenizer, task_specs=specs, task_sampling="temperature",
                               sampling_temperature=2.0)

Freezing: `freeze_encoders` (a member), [`freeze_heads`] (a head), [`freeze_all_but_head`] (everything but one head)
and [`FreezeHeadsCallback`] (a head after N steps).
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler
from transformers import TrainerCallback
from transformers.trainer_utils import seed_worker, speed_metrics

from ..data.data_collator import MultiEncoderDataCollator
from ..data.tasks import TaskSpec, get_task
from .metrics import MULTITASK_SCORE, build_compute_metrics
from .model_card import MultiTaskModelCardData
from .trainer import MultiEncoderTrainer

logger = logging.getLogger(__name__)

SAMPLING_SCHEDULES = ("proportional", "temperature", "uniform", "annealed")
ANNEAL_FINAL_ALPHA = 0.2  # Stickland & Murray (2019): alpha = 1 - 0.8 (e - 1) / (E - 1), from 1 down to 0.2


# ---- task heads and data from the registry --------------------------------------------------------------------------
def task_head(spec: TaskSpec) -> dict[str, Any]:
    """A registered task's head for [`MultiEncoderMultiTaskConfig`]: its type and labels, read from its `TaskSpec`."""
    if spec.kind == "token":
        return {"type": "token", "id2label": list(spec.label_list)}
    if spec.is_regression:
        return {"type": "regression", "num_labels": 1}
    return {"type": "sequence", "id2label": list(spec.label_list)}


def task_heads(specs: Mapping[str, TaskSpec]) -> dict[str, dict[str, Any]]:
    """`tasks=` for the multi-task config: `{name: task_head(spec)}`, in the given order."""
    return {name: task_head(spec) for name, spec in specs.items()}


def load_multitask_data(
    tasks: Mapping[str, str | TaskSpec | Mapping[str, Any]],
    tokenizer,
    data_dir: str | None = None,
    max_length: int | None = 128,
    max_train_samples: Mapping[str, int | None] | int | None = None,
    max_eval_samples: Mapping[str, int | None] | int | None = None,
    seed: int = 0,
    **map_kwargs,
) -> tuple[dict[str, dict[str, Any]], dict[str, TaskSpec]]:
    """Load and tokenize several registered tasks (`data.load_task` + `data.tokenize_task` for each).

    Args:
        tasks: `{name: registered task name or TaskSpec}` (the name is the head's; several heads may read one task).
        max_train_samples, max_eval_samples: one limit for every task, or one per task name. The training subset is
            a seeded random sample (`seed`), the evaluation subset the split's first examples.

    Returns:
        `({"train": {name: Dataset}, "validation": {name: Dataset}}, {name: TaskSpec})`. A task whose data has no
        training examples raises a `ValueError` naming it; one without a validation split is left out of
        `"validation"` (and logged).
    """
    from ..data.loading import load_task, tokenize_task  # `datasets` only when data is loaded

    if not tasks:
        raise ValueError("No tasks given: pass {name: task_name, ...}.")
    out: dict[str, dict[str, Any]] = {"train": {}, "validation": {}}
    specs = {}
    for name, task in tasks.items():
        raw, spec = load_task(task, data_dir=data_dir)
        specs[name] = spec
        train_limit = _per_task(max_train_samples, name)
        if "train" not in raw or len(raw["train"]) == 0:
            raise ValueError(f"Task {name!r} ({spec.name}) has no training examples in its data (splits: "
                             f"{list(raw)}).")
        train = raw["train"]
        if train_limit is not None and train_limit < len(train):
            train = train.shuffle(seed=seed).select(range(train_limit))
        out["train"][name] = tokenize_task(train, spec, tokenizer, max_length=max_length,
                                           desc=f"Tokenizing {name}", **map_kwargs)
        split = next((s for s in spec.validation_splits if s in raw), None)
        if split is None:
            logger.warning(f"Task {name!r} ({spec.name}) has no validation split: it is trained, not evaluated.")
            continue
        validation = raw[split]
        eval_limit = _per_task(max_eval_samples, name)
        if eval_limit is not None:
            validation = validation.select(range(min(eval_limit, len(validation))))
        out["validation"][name] = tokenize_task(validation, spec, tokenizer, max_length=max_length,
                                                desc=f"Tokenizing {name} ({split})", **map_kwargs)
    return out, specs


def _per_task(value, name):
    return value.get(name) if isinstance(value, Mapping) else value


# ---- data -----------------------------------------------------------------------------------------------------------
class MultiTaskDataset(Dataset):
    """Several tasks' tokenized datasets behind one index; every example comes back with its `"task"`.

    Index `i` of the whole is example `i - offsets[t]` of task `t`; [`MultiTaskBatchSampler`] draws each batch from
    one task's index range.
    """

    def __init__(self, datasets: Mapping[str, Any]):
        if not datasets:
            raise ValueError("MultiTaskDataset needs at least one task's dataset.")
        empty = [name for name, ds in datasets.items() if len(ds) == 0]
        if empty:
            raise ValueError(f"Task(s) {empty} have no examples.")
        self.datasets = dict(datasets)
        self.tasks = list(self.datasets)
        sizes = [len(ds) for ds in self.datasets.values()]
        self.offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        self._length = sum(sizes)

    @property
    def task_sizes(self) -> dict[str, int]:
        return {name: len(ds) for name, ds in self.datasets.items()}

    def __len__(self) -> int:
        return self._length

    def task_of(self, index: int) -> str:
        return self.tasks[bisect.bisect_right(self.offsets, index) - 1]

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"Index {index} is out of range for {len(self)} examples.")
        i = bisect.bisect_right(self.offsets, index) - 1
        name = self.tasks[i]
        return {**self.datasets[name][index - self.offsets[i]], "task": name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task_sizes})"


class MultiTaskDataCollator(MultiEncoderDataCollator):
    """[`MultiEncoderDataCollator`] for batches of one task: pads the examples and adds `batch["task"]`. A batch whose
    examples come from several tasks raises a `ValueError`."""

    def __call__(self, features: list[dict]) -> dict:
        tasks = list(dict.fromkeys(f.get("task") for f in features))
        if len(tasks) != 1 or tasks[0] is None:
            raise ValueError(f"A multi-task batch must hold examples of one task; this one has {tasks} (examples need "
                             f"a 'task': use MultiTaskDataset with MultiTaskBatchSampler).")
        batch = super().__call__([{k: v for k, v in f.items() if k != "task"} for f in features])
        batch["task"] = tasks[0]
        return batch


# ---- task sampling --------------------------------------------------------------------------------------------------
def task_probabilities(sizes: Mapping[str, int], sampling: str = "proportional", temperature: float = 2.0,
                       progress: float = 0.0) -> dict[str, float]:
    """How likely each task is to be picked for a step.

    - `proportional`: p ∝ n (the number of training examples);
    - `temperature`: p ∝ n^(1/T) (T=1 is proportional, T→∞ uniform);
    - `uniform`: p = 1 / number of tasks;
    - `annealed` (Stickland & Murray 2019): p ∝ n^α with α going linearly from 1 (proportional) at the start to 0.2
      at the end of training; `progress` in [0, 1] is how far training is (their α changes per epoch; here per step,
      so that a `max_steps` run anneals too).
    """
    if sampling not in SAMPLING_SCHEDULES:
        raise ValueError(f"Unknown task sampling {sampling!r}; allowed values are: {', '.join(SAMPLING_SCHEDULES)}.")
    if not sizes or any(n <= 0 for n in sizes.values()):
        raise ValueError(f"Every task needs training examples to be sampled; sizes: {dict(sizes)}.")
    if sampling == "temperature" and not temperature > 0:
        raise ValueError(f"`sampling_temperature` must be positive, got {temperature}.")
    exponent = {"proportional": 1.0, "temperature": 1.0 / temperature, "uniform": 0.0,
                "annealed": 1.0 - (1.0 - ANNEAL_FINAL_ALPHA) * min(max(progress, 0.0), 1.0)}[sampling]
    weights = {name: float(n) ** exponent for name, n in sizes.items()}
    total = sum(weights.values())
    return {name: w / total for name, w in weights.items()}


class MultiTaskBatchSampler(Sampler[list[int]]):
    """Batches of one task each, the task of every training step drawn by a schedule ([`task_probabilities`]).

    The sampler yields the batches of all processes, step after step: the `batches_per_step` (= processes x
    gradient-accumulation steps) consecutive batches of a step come from the same task, so with accelerate's batch
    sharding (process `r` takes batches `r, r + W, ...`) every process and every micro-batch of an optimizer step
    trains the same task. Within a task, examples are drawn without replacement from a shuffled order, reshuffled
    when the task runs out, so every batch is full.

    Reproducible: the tasks of the steps of epoch `e` and the examples of each task depend only on `seed` and `e`
    (`set_epoch`, which the Trainer calls), and the tasks not on the batch size.

    Args:
        task_sizes: `{task: number of examples}` in the order of the [`MultiTaskDataset`] the indices address.
        batch_size: examples per batch (per process).
        sampling, temperature: the schedule (see [`task_probabilities`]).
        seed: the random seed.
        batches_per_step: batches of one optimizer step over all processes (`world_size *
            gradient_accumulation_steps`).
        steps_per_epoch: optimizer steps per epoch; default: as many batches as the tasks have data in total
            (each task's data seen about once per epoch under proportional sampling).
        num_training_steps: the steps of the whole training (`annealed` anneals over them); default one epoch.
        sampled_tasks: the tasks to draw steps from (default all): tasks with nothing left to train are left out.
    """

    def __init__(
        self,
        task_sizes: Mapping[str, int],
        batch_size: int,
        sampling: str = "proportional",
        temperature: float = 2.0,
        seed: int = 0,
        batches_per_step: int = 1,
        steps_per_epoch: int | None = None,
        num_training_steps: int | None = None,
        sampled_tasks: Sequence[str] | None = None,
    ):
        if batch_size < 1 or batches_per_step < 1:
            raise ValueError(f"batch_size ({batch_size}) and batches_per_step ({batches_per_step}) must be positive.")
        self.task_sizes = dict(task_sizes)
        sampled_tasks = list(self.task_sizes) if sampled_tasks is None else list(sampled_tasks)
        unknown = sorted(set(sampled_tasks) - set(self.task_sizes))
        if unknown or not sampled_tasks:
            raise ValueError(f"sampled_tasks must be some of the tasks {list(self.task_sizes)}, got {sampled_tasks}.")
        self.tasks = [t for t in self.task_sizes if t in sampled_tasks]
        task_probabilities(self.sampled_sizes, sampling, temperature)  # checks the schedule and the sizes
        self.batch_size = batch_size
        self.drop_last = False  # every batch is full (read by accelerate's BatchSamplerShard)
        self.sampling = sampling
        self.temperature = temperature
        self.seed = seed
        self.batches_per_step = batches_per_step
        if steps_per_epoch is None:
            batches = sum(math.ceil(n / batch_size) for n in self.sampled_sizes.values())
            steps_per_epoch = math.ceil(batches / batches_per_step)
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}.")
        self.steps_per_epoch = steps_per_epoch
        self.num_training_steps = num_training_steps or steps_per_epoch
        self.epoch = 0
        starts = [0]
        for n in self.task_sizes.values():
            starts.append(starts[-1] + n)
        self.offsets = dict(zip(self.task_sizes, starts))

    @property
    def sampled_sizes(self) -> dict[str, int]:
        return {task: self.task_sizes[task] for task in self.tasks}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.steps_per_epoch * self.batches_per_step

    def probabilities(self, step: int) -> dict[str, float]:
        """The task probabilities of global optimizer step `step` (counted from the start of training)."""
        progress = step / max(1, self.num_training_steps - 1)
        return task_probabilities(self.sampled_sizes, self.sampling, self.temperature, progress)

    def _generator(self, stream: int, epoch: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + epoch * 2 + stream)

    def step_tasks(self, epoch: int | None = None) -> list[str]:
        """The task of every optimizer step of an epoch (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        draws = torch.rand(self.steps_per_epoch, generator=self._generator(0, epoch), dtype=torch.float64).tolist()
        tasks = []
        for i, u in enumerate(draws):
            cumulative = 0.0
            probabilities = self.probabilities(epoch * self.steps_per_epoch + i)
            chosen = self.tasks[-1]
            for name in self.tasks:
                cumulative += probabilities[name]
                if u < cumulative:
                    chosen = name
                    break
            tasks.append(chosen)
        return tasks

    def task_counts(self, num_steps: int) -> dict[str, int]:
        """How many of the first `num_steps` optimizer steps of training (over epochs) each task gets."""
        counts: Counter = Counter()
        epoch = 0
        while num_steps > 0:
            steps = self.step_tasks(epoch)[:num_steps]
            counts.update(steps)
            num_steps -= len(steps)
            epoch += 1
        return {name: counts.get(name, 0) for name in self.tasks}

    def __iter__(self) -> Iterator[list[int]]:
        generator = self._generator(1, self.epoch)
        orders: dict[str, list[int]] = {}
        positions: dict[str, int] = {}
        for task in self.step_tasks():
            n = self.task_sizes[task]
            for _ in range(self.batches_per_step):
                batch = []
                while len(batch) < self.batch_size:
                    if positions.get(task, n) >= n:  # (re)shuffle the task's examples
                        orders[task] = torch.randperm(n, generator=generator).tolist()
                        positions[task] = 0
                    take = orders[task][positions[task]:positions[task] + self.batch_size - len(batch)]
                    positions[task] += len(take)
                    batch.extend(self.offsets[task] + i for i in take)
                yield batch


# ---- freezing -------------------------------------------------------------------------------------------------------
def multitask_model(model: nn.Module) -> nn.Module:
    """The [`MultiEncoderForMultiTask`] inside a wrapper (DDP, peft) or the model itself."""
    for module in model.modules():
        if isinstance(getattr(module, "heads", None), nn.ModuleDict) and hasattr(getattr(module, "config", None),
                                                                                  "tasks"):
            return module
    raise ValueError(f"{type(model).__name__} is not a multi-task multi-encoder (no task `heads`).")


def freeze_heads(model: nn.Module, tasks: Sequence[str]) -> list[str]:
    """Freeze the heads of `tasks` (their parameters stop training). Returns the frozen task names."""
    model = multitask_model(model)
    tasks = [model.resolve_task(t) for t in tasks]
    for task in tasks:
        for p in model.heads[task].parameters():
            p.requires_grad_(False)
    return tasks


def freeze_all_but_head(model: nn.Module, task: str) -> list[str]:
    """Freeze everything (members, fusions, the other heads) but the head of `task`: that head trains on features
    that no longer change. Returns the names of the parameters left trainable."""
    model = multitask_model(model)
    task = model.resolve_task(task)
    keep = {id(p) for p in model.heads[task].parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    return [name for name, p in model.named_parameters() if p.requires_grad]


def trainable_tasks(model: nn.Module) -> list[str]:
    """The tasks whose loss still trains something: their head, the members, or their level's fusion."""
    model = multitask_model(model)
    base = model.multiencoder
    members = any(p.requires_grad for p in base.encoders.parameters())
    tasks = []
    for task in model.config.task_names:
        modules = (*base.fusion_layers(model.config.is_token_task(task)), model.heads[task])
        if members or any(p.requires_grad for module in modules for p in module.parameters()):
            tasks.append(task)
    return tasks


class FreezeHeadsCallback(TrainerCallback):
    """Freeze a task's head once training has done a number of optimizer steps: `FreezeHeadsCallback({"ner": 100})`.

    The head keeps its weights from then on (its parameters get no more gradients, so the optimizer skips them);
    the task's batches still train the shared members and fusion. Resuming past the step freezes it again.
    """

    def __init__(self, after_steps: Mapping[str, int]):
        bad = {task: step for task, step in after_steps.items() if not isinstance(step, int) or step < 0}
        if bad:
            raise ValueError(f"Steps to freeze heads after must be non-negative integers, got {bad}.")
        self.after_steps = dict(after_steps)
        self.frozen: dict[str, int] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        target = multitask_model(model)
        for task in self.after_steps:
            target.resolve_task(task)  # an unknown task fails before the first step

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        for task, step in self.after_steps.items():
            if task not in self.frozen and state.global_step >= step:
                freeze_heads(model, [task])
                self.frozen[task] = state.global_step
                logger.info(f"Step {state.global_step}: the head of task {task!r} is frozen from now on.")


# ---- the Trainer ----------------------------------------------------------------------------------------------------
class MultiTaskTrainer(MultiEncoderTrainer):
    """The stock `Trainer` for [`MultiEncoderForMultiTask`]: one task per optimizer step, per-task loss weights, every
    task evaluated.

    Args:
        train_dataset: `{task: tokenized Dataset}` (or a [`MultiTaskDataset`]).
        eval_dataset: `{task: tokenized Dataset}`; `evaluate()` scores each and reports `eval_<task>_<metric>`,
            `eval_<task>_loss`, `eval_loss` (the mean of the tasks' losses) and `eval_multitask_score`.
        task_specs: `{task: TaskSpec or registered task name}`: each task's metrics (`build_compute_metrics`) and
            main metric come from the registry. Without it, pass `compute_metrics={task: fn}` and
            `task_main_metrics={task: metric}`.
        task_sampling, sampling_temperature: the schedule of tasks over steps ([`task_probabilities`]).
        loss_weights: `{task: weight}` multiplying that task's training loss (default 1).
        task_score_weights: `{task: weight}` of the combination `multitask_score` = sum_t w_t * main_metric_t /
            sum_t w_t (default: the plain mean of the tasks' main metrics). Pass
            `metric_for_best_model="multitask_score"` to choose the best checkpoint by it.
        The rest: the arguments of [`MultiEncoderTrainer`] / `Trainer` (by keyword). The default data collator is
        [`MultiTaskDataCollator`] of `processing_class`.
    """

    def __init__(
        self,
        *args,
        task_specs: Mapping[str, TaskSpec | str] | None = None,
        task_sampling: str = "proportional",
        sampling_temperature: float = 2.0,
        loss_weights: Mapping[str, float] | None = None,
        task_score_weights: Mapping[str, float] | None = None,
        task_main_metrics: Mapping[str, str] | None = None,
        compute_metrics: Mapping[str, Callable] | None = None,
        **kwargs,
    ):
        if kwargs.get("data_collator") is None and kwargs.get("processing_class") is not None:
            kwargs["data_collator"] = MultiTaskDataCollator(kwargs["processing_class"])
        train_dataset = kwargs.get("train_dataset")
        if train_dataset is not None and not isinstance(train_dataset, MultiTaskDataset):
            kwargs["train_dataset"] = MultiTaskDataset(train_dataset)
        eval_dataset = kwargs.get("eval_dataset")
        if eval_dataset is not None:
            kwargs["eval_dataset"] = self._split_by_task(eval_dataset)
        if kwargs.get("model_card_data") is None:
            kwargs["model_card_data"] = MultiTaskModelCardData()
        if compute_metrics is not None and not isinstance(compute_metrics, Mapping):
            raise ValueError("`compute_metrics` of a MultiTaskTrainer is a mapping {task: compute_metrics function}.")
        super().__init__(*args, **kwargs)
        model = multitask_model(self.model)
        names = model.config.task_names
        specs = {task: get_task(spec) for task, spec in (task_specs or {}).items()}
        self.task_specs = specs
        self.task_compute_metrics = dict(compute_metrics or {})
        for task, spec in specs.items():
            self.task_compute_metrics.setdefault(task, build_compute_metrics(spec, model.config.encoder_names))
        self.task_main_metrics = {**{task: spec.main_metric for task, spec in specs.items()},
                                  **dict(task_main_metrics or {})}
        data_tasks = set(self.train_dataset.tasks if self.train_dataset is not None else []) | set(
            self.eval_dataset or {})
        for what, tasks in (("data", data_tasks), ("task_specs", specs), ("loss_weights", loss_weights or {}),
                            ("task_score_weights", task_score_weights or {}),
                            ("compute_metrics", self.task_compute_metrics)):
            unknown = sorted(set(tasks) - set(names))
            if unknown:
                raise ValueError(f"{what} name(s) task(s) {unknown} the model has no head for; its tasks are: "
                                 f"{', '.join(names)}.")
        negative = {t: w for t, w in {**(loss_weights or {}), **(task_score_weights or {})}.items() if w < 0}
        if negative:
            raise ValueError(f"Loss and score weights must be non-negative, got {negative}.")
        task_probabilities({t: 1 for t in names}, task_sampling, sampling_temperature)  # checks the schedule
        self.task_sampling = task_sampling
        self.sampling_temperature = sampling_temperature
        self.loss_weights = {task: float((loss_weights or {}).get(task, 1.0)) for task in names}
        self.task_score_weights = {task: float((task_score_weights or {}).get(task, 1.0)) for task in names}
        self.task_sampler: MultiTaskBatchSampler | None = None
        card = self.model_card_data
        if isinstance(card, MultiTaskModelCardData):
            card.task_main_metrics = dict(self.task_main_metrics)
            card.score_description = card.score_description or self.describe_score()
            card.task_sampling = card.task_sampling or self.describe_sampling()
            for task, spec in specs.items():
                card.task_datasets.setdefault(task, {"dataset_name": spec.display_name or spec.name,
                                                     "dataset_id": spec.hub_id, "dataset_config": spec.hub_config})
            card.language = card.language or next((s.language for s in specs.values() if s.language), None)

    @staticmethod
    def _split_by_task(datasets) -> dict[str, MultiTaskDataset]:
        if isinstance(datasets, MultiTaskDataset):
            datasets = datasets.datasets
        if not isinstance(datasets, Mapping):
            raise ValueError("A MultiTaskTrainer evaluates {task: dataset}: pass eval_dataset as a mapping from task "
                             "names to tokenized datasets.")
        return {task: ds if isinstance(ds, MultiTaskDataset) else MultiTaskDataset({task: ds})
                for task, ds in datasets.items()}

    # ---- training -----------------------------------------------------------------------------------------------
    def build_task_sampler(self) -> MultiTaskBatchSampler:
        """The sampler of the training data, for this run's batch size, processes and accumulation."""
        args = self.args
        trainable = trainable_tasks(self.model)
        sampled = [task for task in self.train_dataset.tasks if task in trainable]
        if not sampled:
            raise ValueError(f"Nothing to train: the heads of the tasks with training data "
                             f"({', '.join(self.train_dataset.tasks)}) and every part they share are frozen.")
        if len(sampled) < len(self.train_dataset.tasks):
            logger.warning(f"Task(s) {sorted(set(self.train_dataset.tasks) - set(sampled))} are not trained: their "
                           f"head and every part they share are frozen.")
        batches_per_step = max(1, args.world_size) * args.gradient_accumulation_steps
        sampler = MultiTaskBatchSampler(
            self.train_dataset.task_sizes, batch_size=self._train_batch_size, sampling=self.task_sampling,
            temperature=self.sampling_temperature, seed=args.data_seed if args.data_seed is not None else args.seed,
            batches_per_step=batches_per_step, sampled_tasks=sampled,
        )
        total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * sampler.steps_per_epoch)
        sampler.num_training_steps = total
        return sampler

    def get_train_dataloader(self) -> DataLoader:
        """The stock loader's settings with a [`MultiTaskBatchSampler`] (one task per step on every process)."""
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        self.task_sampler = self.build_task_sampler()
        args = self.args
        if getattr(args, "train_sampling_strategy", "random") not in ("random", None):
            logger.warning(f"train_sampling_strategy={args.train_sampling_strategy!r} is not used: the multi-task "
                           f"sampler orders the training batches ({self.describe_sampling()}).")
        params = {
            "batch_sampler": self.task_sampler,
            "collate_fn": self._get_collator_with_removed_columns(self.data_collator, description="training"),
            "num_workers": args.dataloader_num_workers,
            "pin_memory": args.dataloader_pin_memory,
            "persistent_workers": args.dataloader_persistent_workers,
            "worker_init_fn": partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
        }
        if args.dataloader_num_workers > 0:
            params["prefetch_factor"] = args.dataloader_prefetch_factor
            params["multiprocessing_context"] = args.dataloader_multiprocessing_context
        return self.accelerator.prepare(DataLoader(self.train_dataset, **params))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The Trainer's loss, times the batch's task's loss weight while training."""
        task = inputs.get("task")
        result = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                      num_items_in_batch=num_items_in_batch)
        loss = result[0] if return_outputs else result
        if model.training and not loss.requires_grad:
            raise ValueError(f"Task {task!r} has nothing left to train (its head and every part it shares are "
                             f"frozen): leave it out of the training data or unfreeze a part.")
        weight = self.loss_weights.get(task, 1.0) if model.training else 1.0
        if weight == 1.0:
            return result
        if return_outputs:
            return result[0] * weight, result[1]
        return result * weight

    # ---- evaluation ---------------------------------------------------------------------------------------------
    def evaluate(self, eval_dataset=None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """Evaluate every task (or those of `eval_dataset`: `{task: dataset}` or a task name), each with its own
        metrics, then log once: `<prefix>_<task>_<metric>` per task, `<prefix>_loss` (the mean of the tasks' losses)
        and `<prefix>_multitask_score` (see the class docstring)."""
        if isinstance(eval_dataset, str):
            if not self.eval_dataset or eval_dataset not in self.eval_dataset:
                raise ValueError(f"No evaluation data for task {eval_dataset!r}.")
            datasets = {eval_dataset: eval_dataset}
        elif eval_dataset is not None:
            datasets = self._split_by_task(eval_dataset)
        elif self.eval_dataset:
            datasets = {task: task for task in self.eval_dataset}  # by name: the Trainer caches their loaders
        else:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        self._memory_tracker.start()
        metrics: dict[str, float] = {}
        compute_metrics = self.compute_metrics
        try:
            for task, dataset in datasets.items():
                start = time.time()
                self.compute_metrics = self.task_compute_metrics.get(task)
                prefix = f"{metric_key_prefix}_{task}"
                output = self.evaluation_loop(
                    self.get_eval_dataloader(dataset), description=f"Evaluation of {task}",
                    prediction_loss_only=True if self.compute_metrics is None else None, ignore_keys=ignore_keys,
                    metric_key_prefix=prefix,
                )
                output.metrics.update(speed_metrics(
                    prefix, start, num_samples=output.num_samples,
                    num_steps=math.ceil(output.num_samples / (self.args.eval_batch_size * self.args.world_size))))
                metrics.update(output.metrics)
        finally:
            self.compute_metrics = compute_metrics
        losses = [metrics[f"{metric_key_prefix}_{task}_loss"] for task in datasets
                  if f"{metric_key_prefix}_{task}_loss" in metrics]
        if losses:
            metrics[f"{metric_key_prefix}_loss"] = sum(losses) / len(losses)
        score = self.multitask_score(metrics, list(datasets), metric_key_prefix)
        if score is not None:
            metrics[f"{metric_key_prefix}_{MULTITASK_SCORE}"] = score
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def multitask_score(self, metrics: Mapping[str, float], tasks: Sequence[str],
                        metric_key_prefix: str = "eval") -> float | None:
        """The weighted mean of the tasks' main metrics (`task_score_weights`), or None if a task's main metric is
        unknown or missing from `metrics`."""
        values, weights = [], []
        for task in tasks:
            key = f"{metric_key_prefix}_{task}_{self.task_main_metrics.get(task)}"
            if task not in self.task_main_metrics or key not in metrics:
                return None
            values.append(metrics[key])
            weights.append(self.task_score_weights.get(task, 1.0))
        if not values or sum(weights) == 0:
            return None
        return sum(w * v for w, v in zip(weights, values)) / sum(weights)

    def describe_sampling(self) -> str:
        """How tasks are sampled, in words: e.g. "temperature sampling, T=2; loss weights ner 0.5"."""
        text = {"proportional": "proportional sampling (p ∝ examples)",
                "temperature": f"temperature sampling, T={self.sampling_temperature:g}",
                "uniform": "uniform sampling",
                "annealed": "annealed sampling (Stickland & Murray 2019)"}[self.task_sampling]
        weighted = {t: w for t, w in self.loss_weights.items() if w != 1.0}
        if weighted:
            text += "; loss weights " + ", ".join(f"{t} {w:g}" for t, w in weighted.items())
        return text

    def describe_score(self) -> str:
        """The combination `multitask_score` stands for, in words: e.g. "mean of ner overall_f1, trec accuracy"."""
        tasks = [t for t in multitask_model(self.model).config.task_names if t in self.task_main_metrics]
        parts = [f"{t} {self.task_main_metrics[t]}" for t in tasks]
        weights = [self.task_score_weights.get(t, 1.0) for t in tasks]
        if len(set(weights)) <= 1:
            return "mean of " + ", ".join(parts)
        return "weighted mean of " + ", ".join(f"{w:g} x {p}" for w, p in zip(weights, parts))


__all__ = [
    "FreezeHeadsCallback",
    "MULTITASK_SCORE",
    "MultiTaskBatchSampler",
    "MultiTaskDataCollator",
    "MultiTaskDataset",
    "MultiTaskTrainer",
    "SAMPLING_SCHEDULES",
    "freeze_all_but_head",
    "freeze_heads",
    "load_multitask_data",
    "multitask_model",
    "task_head",
    "task_heads",
    "task_probabilities",
    "trainable_tasks",
]
