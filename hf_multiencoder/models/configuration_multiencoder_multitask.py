"""Configuration of a multi-task multi-encoder: one set of members, a fusion per level, one head per task.

This file is shipped next to the weights (``trust_remote_code``): it may import only ``transformers`` and
relative modules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .configuration_multiencoder import MultiEncoderConfig

# Task type -> the `problem_type` its head's loss follows (token tasks: cross-entropy per word).
TASK_TYPES: dict[str, str] = {
    "sequence": "single_label_classification",
    "regression": "regression",
    "multilabel": "multi_label_classification",
    "token": "token_classification",
}
_TASK_KEYS = ("type", "num_labels", "id2label")
_TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def normalize_task(name: str, task: Mapping[str, Any]) -> dict[str, Any]:
    """One task head's description in its canonical form ``{"type", "num_labels", "id2label": {id: label}}``.

    ``id2label`` may be given as a list of labels or a mapping (its keys may be strings, as JSON stores them);
    ``num_labels`` alone makes labels ``LABEL_0``...; regression defaults to one output.
    """
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise ValueError(f"Task name {name!r} must start with a letter or digit and hold only letters, digits, '_' "
                         f"and '-' (it names the task's head and its metrics, e.g. eval_<task>_accuracy).")
    if not isinstance(task, Mapping):
        raise ValueError(f"Task {name!r} must be a mapping like {{'type': 'sequence', 'id2label': [...]}}, got "
                         f"{type(task).__name__}.")
    unknown = sorted(set(task) - set(_TASK_KEYS) - {"label2id"})
    if unknown:
        raise ValueError(f"Task {name!r}: unknown key(s) {unknown}; a task head is described by {list(_TASK_KEYS)}.")
    task_type = task.get("type", "sequence")
    if task_type not in TASK_TYPES:
        raise ValueError(f"Task {name!r}: unknown type {task_type!r}; allowed values are: {', '.join(TASK_TYPES)}.")
    id2label = task.get("id2label")
    if isinstance(id2label, (list, tuple)):
        id2label = dict(enumerate(id2label))
    elif isinstance(id2label, Mapping):
        id2label = {int(i): label for i, label in id2label.items()}
        if sorted(id2label) != list(range(len(id2label))):
            raise ValueError(f"Task {name!r}: id2label ids must be 0..{len(id2label) - 1}, got {sorted(id2label)}.")
    elif id2label is not None:
        raise ValueError(f"Task {name!r}: id2label must be a list of labels or a mapping id -> label.")
    num_labels = task.get("num_labels")
    if num_labels is None:
        num_labels = len(id2label) if id2label else 1 if task_type == "regression" else None
    if not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"Task {name!r}: give `id2label` (the labels) or a positive `num_labels`, got "
                         f"num_labels={num_labels!r}.")
    if id2label is not None and len(id2label) != num_labels:
        raise ValueError(f"Task {name!r}: num_labels={num_labels} but id2label has {len(id2label)} labels.")
    if task_type in ("sequence", "token") and num_labels < 2:
        raise ValueError(f"Task {name!r}: a {task_type} task needs at least two labels, got {num_labels}.")
    if id2label is None:
        id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
    return {"type": task_type, "num_labels": num_labels, "id2label": {i: str(label) for i, label in id2label.items()}}


class MultiEncoderMultiTaskConfig(MultiEncoderConfig):
    r"""
    Configuration of a [`MultiEncoderForMultiTask`]: the members and fusion of a [`MultiEncoderConfig`], and one head
    per task.

    Args:
        tasks (`dict[str, dict]`):
            One entry per task, in head order: ``{name: {"type": ..., "num_labels": ..., "id2label": ...}}``. ``type``
            is `"sequence"` (single-label classification of a sentence or pair), `"regression"`, `"multilabel"`
            (multi-hot labels) or `"token"` (a label per word); ``id2label`` a list of labels or a mapping
            ``{id: label}``; ``num_labels`` defaults to the number of labels (1 for regression). Sentence tasks
            share the sentence-level fusion, token tasks the word-level one.
        All other arguments: see [`MultiEncoderConfig`].
    """

    model_type = "multiencoder_multitask"

    def __init__(self, tasks: dict[str, dict] | list[dict] | None = None, **kwargs):
        self.tasks = normalize_tasks(tasks)
        super().__init__(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        # config.json is written with sorted keys: a list keeps the tasks (and so their heads) in their order
        output["tasks"] = [{"name": name, **task} for name, task in self.tasks.items()]
        return output

    @property
    def task_names(self) -> list[str]:
        return list(self.tasks)

    def get_task(self, task: str) -> dict[str, Any]:
        """A task's head description; a `ValueError` naming the model's tasks if there is no such task."""
        if task not in self.tasks:
            raise ValueError(f"Unknown task {task!r}; this model's tasks are: {', '.join(self.tasks) or 'none'}.")
        return self.tasks[task]

    def is_token_task(self, task: str) -> bool:
        return self.get_task(task)["type"] == "token"

    def task_problem_type(self, task: str) -> str:
        return TASK_TYPES[self.get_task(task)["type"]]

    def task_id2label(self, task: str) -> dict[int, str]:
        return dict(self.get_task(task)["id2label"])

    def task_label2id(self, task: str) -> dict[str, int]:
        return {label: i for i, label in self.get_task(task)["id2label"].items()}


def normalize_tasks(tasks: Mapping[str, Mapping[str, Any]] | list[Mapping[str, Any]] | None
                    ) -> dict[str, dict[str, Any]]:
    """Every task of a ``tasks`` mapping through [`normalize_task`] (None: no tasks). The list form
    ``[{"name": ..., "type": ..., ...}]`` (how config.json stores them, in order) is read too."""
    if tasks is None:
        return {}
    if isinstance(tasks, (list, tuple)):
        if not all(isinstance(t, Mapping) and "name" in t for t in tasks):
            raise ValueError("`tasks` as a list holds one mapping per task, each with its `name`.")
        names = [t["name"] for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"Task names must be unique, got {names}.")
        tasks = {t["name"]: {k: v for k, v in t.items() if k != "name"} for t in tasks}
    if not isinstance(tasks, Mapping):
        raise ValueError(f"`tasks` must be a mapping of task names to task heads, got {type(tasks).__name__}.")
    return {name: normalize_task(name, task) for name, task in tasks.items()}


def check_task_labels(saved: Mapping[str, Mapping[str, Any]], requested: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise a `ValueError` if a task of both configs has another type or other labels in ``requested`` than the
    head saved for it (that head's outputs would be read with the wrong labels)."""
    saved, requested = normalize_tasks(saved), normalize_tasks(requested)
    for name in (name for name in saved if name in requested):
        old, new = saved[name], requested[name]
        if old["type"] != new["type"]:
            raise ValueError(f"Task {name!r} was saved as a {old['type']} task but the config makes it a "
                             f"{new['type']} task.")
        if old["id2label"] != new["id2label"]:
            raise ValueError(
                f"Task {name!r}: the saved head predicts the labels {list(old['id2label'].values())} but the config "
                f"gives {list(new['id2label'].values())}. A head trained for other labels (or another order) cannot "
                f"be reused: keep the saved labels, or give the task another name to train a new head.")


__all__ = ["TASK_TYPES", "MultiEncoderMultiTaskConfig", "check_task_labels", "normalize_task", "normalize_tasks"]
