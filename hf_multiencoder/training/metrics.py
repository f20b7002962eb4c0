"""Task metrics, as run_glue.py / run_ner.py report them, with an offline fallback.

Each task names its metric family in its registry entry (`tasks.py`); the families use the GLUE metric definitions:
`matthews` (CoLA) `matthews_correlation`; `correlation` (regression) `pearson`, `spearmanr` and `combined_score` (their
mean); `accuracy_f1` (MRPC, QQP) `accuracy`, `f1` and `combined_score`; `accuracy_macro_f1` `accuracy` and
`macro_f1`; `accuracy` `accuracy`. They are computed with `evaluate.load("glue", ...)` when `evaluate` can load it;
those metric scripts come from the Hub, so offline (Hugging Face offline mode, or the Hub unreachable) the same
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
from huggingface_hub import is_offline_mode
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

from ..data.tasks import TaskSpec, get_task
from ..models.modeling_multiencoder import mean_fusion_weights, word_tags

logger = logging.getLogger(__name__)

# Metric family -> arguments of `evaluate.load` that compute it.
_EVALUATE_ARGS: dict[str, tuple[str, ...]] = {
    "matthews": ("glue", "cola"),
    "correlation": ("glue", "stsb"),
    "accuracy_f1": ("glue", "mrpc"),
    "accuracy": ("accuracy",),
    "accuracy_macro_f1": ("accuracy",),  # + macro F1 (below)
}

_evaluate_metrics: dict[str, Any] = {}  # family -> loaded `evaluate` metric, or None when it could not be loaded
_evaluate_unreachable = False  # set after the first failed load: the next families do not retry (no repeated waits)
_last_backend: str | None = None


def _evaluate_disabled() -> bool:
    """Hugging Face offline mode (as `huggingface_hub` reads it), or `HF_MULTIENCODER_METRICS=fallback`."""
    return is_offline_mode() or os.environ.get("HF_MULTIENCODER_METRICS", "").lower() == "fallback"


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

    family = spec.metric
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
    elif family == "accuracy_macro_f1":
        result["macro_f1"] = float(f1_score(y_true=references, y_pred=predictions, average="macro"))
    return result


def main_metric_value(task: TaskSpec | str, metrics: dict[str, float]) -> float:
    """The value of the task's main metric in `metrics` (keys with or without the `eval_` prefix)."""
    spec = _resolve(task)
    for key in (spec.main_metric, f"eval_{spec.main_metric}"):
        if key in metrics:
            return float(metrics[key])
    raise ValueError(f"{spec.name}: main metric {spec.main_metric!r} is not among the metrics {sorted(metrics)}.")


# ---- fusion weights in metrics --------------------------------------------------------------------------------------
FUSION_WEIGHT_PREFIX = "fusion_weight_"
# The combination of several tasks' main metrics a multi-task evaluation reports (`multitask.MultiTaskTrainer`).
MULTITASK_SCORE = "multitask_score"


def fusion_weight_metrics(weights: dict[str, float]) -> dict[str, float]:
    """`{member: mean weight}` as metric entries named by member: `{"fusion_weight_MiniLM": 0.26, ...}` (the Trainer
    adds `eval_`)."""
    return {f"{FUSION_WEIGHT_PREFIX}{name}": float(w) for name, w in weights.items()}


def fusion_weights_from_metrics(metrics: dict[str, Any], encoder_names: Sequence[str]) -> dict[str, float] | None:
    """The members' mean fusion weights back from an evaluation's metrics (keys with or without `eval_`), or None if
    the evaluation has none for some member (fusions without weights)."""
    weights = {}
    for name in encoder_names:
        key = f"{FUSION_WEIGHT_PREFIX}{name}"
        value = metrics.get(key, metrics.get(f"eval_{key}"))
        if value is None:
            return None
        weights[name] = float(value)
    return weights


def is_fusion_weight_metric(key: str, encoder_names: Sequence[str]) -> bool:
    return key.removeprefix("eval_") in {f"{FUSION_WEIGHT_PREFIX}{name}" for name in encoder_names}


# ---- Trainer compute_metrics ----------------------------------------------------------------------------------------
def _split_outputs(predictions: Any, spec: TaskSpec, num_encoders: int | None):
    """The model's outputs as the Trainer gathers them, `logits[, fusion_weights][, word_mask]` (fields that are None
    are absent), to `(logits, fusion_weights or None, word_mask or None)`."""
    outputs = predictions if isinstance(predictions, (tuple, list)) else (predictions,)
    logits, rest = np.asarray(outputs[0]), [np.asarray(x) for x in outputs[1:]]
    weights = next((x for x in rest if num_encoders and x.ndim == logits.ndim and x.shape[-1] == num_encoders), None)
    word_mask = next((x for x in rest if spec.kind == "token" and x.ndim == 2), None)
    return logits, weights, word_mask


def build_compute_metrics(task: TaskSpec | str, encoder_names: Sequence[str] | None = None,
                          ) -> Callable[[Any], dict[str, float]]:
    """A `compute_metrics` function for `Trainer`.

    Sequence tasks: argmax of the logits (squeezed for regression), then the task's metrics. Token tasks: the word
    logits decoded by `word_tags` (positions labelled -100 left out; words every member cut off tagged "O"), then
    seqeval. With `encoder_names`, each member's mean fusion weight over the evaluated examples (words for token tasks)
    is added as `fusion_weight_<member>` (`mean_fusion_weights`), when the model returns weights.
    """
    spec = _resolve(task)
    names = list(encoder_names) if encoder_names else None

    def compute_metrics(p: Any) -> dict[str, float]:
        logits, weights, word_mask = _split_outputs(p.predictions, spec, len(names) if names else None)
        labels = np.asarray(p.label_ids[0] if isinstance(p.label_ids, (tuple, list)) else p.label_ids)
        mask = None
        if spec.kind == "token":
            mask = labels != -100  # padding (and any position a user chose to ignore)
            seen = word_mask if word_mask is not None else np.ones(labels.shape, dtype=np.int64)
            pred_ids = logits if logits.ndim == labels.ndim else None
            if pred_ids is not None:  # already ids: one-hot them so that `word_tags` decodes them unchanged
                logits = np.eye(len(spec.label_list))[np.clip(pred_ids, 0, None)]
            if logits.shape[:2] != labels.shape:
                raise ValueError(f"Predictions of shape {logits.shape[:2]} do not match labels of shape "
                                 f"{labels.shape}.")
            pred_tags = word_tags(logits, seen, mask, dict(enumerate(spec.label_list)))
            true_tags = [[spec.label_list[i] for i in row[keep]] for row, keep in zip(labels, mask)]
            metrics = ner_metrics(true_tags, pred_tags)
        else:
            if spec.is_regression:
                preds = logits.reshape(-1) if logits.ndim > 1 and logits.shape[-1] == 1 else logits
            else:
                preds = logits.argmax(axis=-1) if logits.ndim > 1 else logits
            metrics = compute_task_metrics(spec, preds, labels)
        if weights is not None:
            metrics.update(fusion_weight_metrics(mean_fusion_weights(weights, names, mask)))
        return metrics

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


def build_ner_compute_metrics(label_list: Sequence[str], encoder_names: Sequence[str] | None = None,
                              ) -> Callable[[Any], dict[str, float]]:
    """`build_compute_metrics` for a token task with these tags (your own CoNLL files)."""
    return build_compute_metrics(TaskSpec("custom_ner", kind="token", label_list=list(label_list)), encoder_names)
