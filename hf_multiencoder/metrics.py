"""Task metrics, as run_glue.py / run_ner.py report them, with an offline fallback.

Sequence tasks use the GLUE metric definitions: CoLA `matthews_correlation`; STS-B and SICK relatedness `pearson`,
`spearmanr` and `combined_score` (their mean); MRPC and QQP `accuracy`, `f1` and `combined_score`; every other task
`accuracy`. They are computed with `evaluate.load("glue", ...)` when `evaluate` can load it; those metric scripts
come from the Hub, so offline (`HF_HUB_OFFLINE`/`HF_EVALUATE_OFFLINE` set, or the Hub unreachable) the same
formulas run through scikit-learn and scipy instead. `metric_backend()` says which one was used.

Token tasks use seqeval (entity level, default mode, IOB2 tags): `overall_precision`, `overall_recall`,
`overall_f1`, `overall_accuracy` and `<TYPE>_f1` per entity type.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

from .data import TaskSpec, get_task

logger = logging.getLogger(__name__)

_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}

# Metric family -> arguments of `evaluate.load` that compute it.
_EVALUATE_ARGS: dict[str, tuple[str, ...]] = {
    "matthews": ("glue", "cola"),
    "correlation": ("glue", "stsb"),
    "accuracy_f1": ("glue", "mrpc"),
    "accuracy": ("accuracy",),
}
_TASK_FAMILIES = {"cola": "matthews", "mrpc": "accuracy_f1", "qqp": "accuracy_f1"}

_evaluate_metrics: dict[str, Any] = {}  # family -> loaded `evaluate` metric, or None when it could not be loaded
_evaluate_unreachable = False  # set after the first failed load: the next families do not retry (no repeated waits)
_last_backend: str | None = None


def _evaluate_disabled() -> bool:
    flags = ("HF_HUB_OFFLINE", "HF_EVALUATE_OFFLINE")
    if any(os.environ.get(flag, "").upper() in _TRUE_VALUES for flag in flags):
        return True
    return os.environ.get("HF_MULTIENCODER_METRICS", "").lower() == "fallback"


def _load_evaluate_metric(family: str) -> Any | None:
    """The `evaluate` metric of a family, loaded once; None when offline or when loading fails (then cached)."""
    global _evaluate_unreachable
    if family in _evaluate_metrics:
        return _evaluate_metrics[family]
    if _evaluate_disabled() or _evaluate_unreachable:
        return None  # not cached: going online later in the process is honoured
    metric = None
    try:
        import evaluate  # slow to import: only when it may be used

        metric = evaluate.load(*_EVALUATE_ARGS[family])
    except Exception as err:  # noqa: BLE001 - any failure (no network, no script) means: use the fallback
        _evaluate_unreachable = True
        logger.info(f"evaluate.load{_EVALUATE_ARGS[family]} failed ({type(err).__name__}: {err}); "
                    "computing the metrics with scikit-learn/scipy instead.")
    _evaluate_metrics[family] = metric
    return metric


def metric_backend() -> str:
    """"evaluate" or "fallback": the backend the last `compute_task_metrics` call used (before any call: the one
    a call would use now)."""
    if _last_backend is not None:
        return _last_backend
    return "evaluate" if _load_evaluate_metric("accuracy") is not None else "fallback"


def _resolve(task: TaskSpec | str) -> TaskSpec:
    return get_task(task) if isinstance(task, str) else task


def _family(spec: TaskSpec) -> str:
    if spec.is_regression:
        return "correlation"
    return _TASK_FAMILIES.get(spec.name, "accuracy")


def _fallback(family: str, predictions: np.ndarray, references: np.ndarray) -> dict[str, float]:
    """The formulas of the `glue` / `accuracy` metrics of `evaluate`, with scikit-learn and scipy."""
    if family == "matthews":
        return {"matthews_correlation": float(matthews_corrcoef(references, predictions))}
    if family == "correlation":
        return {
            "pearson": float(pearsonr(predictions, references)[0]),
            "spearmanr": float(spearmanr(predictions, references)[0]),
        }
    accuracy = float((predictions == references).mean())
    if family == "accuracy_f1":
        return {"accuracy": accuracy, "f1": float(f1_score(y_true=references, y_pred=predictions))}
    return {"accuracy": accuracy}


def compute_task_metrics(task: TaskSpec | str, predictions: Any, references: Any) -> dict[str, float]:
    """Metrics of a task from predictions and gold labels.

    Args:
        task: A `TaskSpec` or a task name.
        predictions: Sequence tasks: label ids (or logits, argmax is taken), or scores for regression. Token tasks:
            tag sequences (lists of tag strings).
        references: Gold label ids / scores, or tag sequences for token tasks.

    Returns:
        A dict of floats, e.g. `{"accuracy": 0.9}`, `{"pearson": ..., "spearmanr": ..., "combined_score": ...}`.
    """
    global _last_backend
    spec = _resolve(task)
    if spec.kind == "token":
        return ner_metrics(references, predictions)
    predictions = np.asarray(predictions)
    references = np.asarray(references)
    if spec.is_regression:
        predictions = predictions.reshape(-1).astype(np.float64)
        references = references.reshape(-1).astype(np.float64)
    elif predictions.ndim > 1:
        predictions = predictions.argmax(axis=-1)
    if predictions.shape != references.shape:
        raise ValueError(f"{spec.name}: {predictions.shape[0]} predictions for {references.shape[0]} references.")
    if predictions.size == 0:
        raise ValueError(f"{spec.name}: no predictions to score.")

    family = _family(spec)
    metric = _load_evaluate_metric(family)
    if metric is not None:
        result = {k: float(v) for k, v in metric.compute(predictions=predictions, references=references).items()}
        _last_backend = "evaluate"
    else:
        result = _fallback(family, predictions, references)
        _last_backend = "fallback"
    if family == "correlation":
        result["combined_score"] = (result["pearson"] + result["spearmanr"]) / 2
    elif family == "accuracy_f1":
        result["combined_score"] = (result["accuracy"] + result["f1"]) / 2
    return result


def main_metric_value(task: TaskSpec | str, metrics: dict[str, float]) -> float:
    """The value of the task's main metric in `metrics` (keys with or without the `eval_` prefix)."""
    spec = _resolve(task)
    for key in (spec.main_metric, f"eval_{spec.main_metric}"):
        if key in metrics:
            return float(metrics[key])
    raise ValueError(f"{spec.name}: main metric {spec.main_metric!r} is not among the metrics {sorted(metrics)}.")


def _first(array_or_tuple: Any) -> np.ndarray:
    """Model outputs may be a tuple (logits, extra outputs...): keep the logits."""
    if isinstance(array_or_tuple, (tuple, list)):
        array_or_tuple = array_or_tuple[0]
    return np.asarray(array_or_tuple)


def build_compute_metrics(task: TaskSpec | str) -> Callable[[Any], dict[str, float]]:
    """A `compute_metrics` function for `Trainer`: argmax of the logits (squeeze for regression), then the task's
    metrics. Token tasks get `build_ner_compute_metrics(task.label_list)`."""
    spec = _resolve(task)
    if spec.kind == "token":
        return build_ner_compute_metrics(spec.label_list)

    def compute_metrics(p: Any) -> dict[str, float]:
        logits = _first(p.predictions)
        labels = _first(p.label_ids)
        if spec.is_regression:
            preds = logits.reshape(-1) if logits.ndim > 1 and logits.shape[-1] == 1 else logits
        else:
            preds = logits.argmax(axis=-1) if logits.ndim > 1 else logits
        return compute_task_metrics(spec, preds, labels)

    return compute_metrics


def ner_metrics(true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity-level scores with seqeval (default mode, as conlleval): overall precision/recall/F1, token accuracy,
    and `<TYPE>_f1` for each entity type found in the gold or predicted tags."""
    from seqeval.metrics import accuracy_score as seqeval_accuracy  # imported here: only NER needs it
    from seqeval.metrics import classification_report
    from seqeval.metrics import f1_score as seqeval_f1
    from seqeval.metrics import precision_score as seqeval_precision
    from seqeval.metrics import recall_score as seqeval_recall

    true_tags = [list(tags) for tags in true_tags]
    pred_tags = [list(tags) for tags in pred_tags]
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"{len(pred_tags)} predicted sentences for {len(true_tags)} gold sentences.")
    for i, (gold, pred) in enumerate(zip(true_tags, pred_tags)):
        if len(gold) != len(pred):
            raise ValueError(f"Sentence {i}: {len(pred)} predicted tags for {len(gold)} gold tags.")
    results = {
        "overall_precision": float(seqeval_precision(true_tags, pred_tags, zero_division=0)),
        "overall_recall": float(seqeval_recall(true_tags, pred_tags, zero_division=0)),
        "overall_f1": float(seqeval_f1(true_tags, pred_tags, zero_division=0)),
        "overall_accuracy": float(seqeval_accuracy(true_tags, pred_tags)),
    }
    report = classification_report(true_tags, pred_tags, output_dict=True, zero_division=0)
    for entity_type, scores in report.items():
        if not entity_type.endswith(" avg"):
            results[f"{entity_type}_f1"] = float(scores["f1-score"])
    return results


def build_ner_compute_metrics(label_list: Sequence[str]) -> Callable[[Any], dict[str, float]]:
    """A `compute_metrics` function for `Trainer` on word-level token classification.

    Predictions are logits (batch, words, labels) (or a tuple whose first element they are), label ids are
    (batch, words) with -100 on padding / ignored words; those positions are dropped, ids become tag names.
    """
    label_list = list(label_list)

    def compute_metrics(p: Any) -> dict[str, float]:
        logits = _first(p.predictions)
        labels = _first(p.label_ids)
        pred_ids = logits.argmax(axis=-1) if logits.ndim == labels.ndim + 1 else logits
        if pred_ids.shape != labels.shape:
            raise ValueError(f"Predictions of shape {pred_ids.shape} do not match labels of shape {labels.shape}.")
        true_tags, pred_tags = [], []
        for pred_row, label_row in zip(pred_ids, labels):
            keep = label_row != -100
            true_tags.append([label_list[i] for i in label_row[keep]])
            pred_tags.append([label_list[i] for i in pred_row[keep]])
        return ner_metrics(true_tags, pred_tags)

    return compute_metrics
