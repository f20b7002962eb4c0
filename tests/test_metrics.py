"""Tests of hf_multiencoder.training.metrics against values worked out by hand."""

import math

import numpy as np
import pytest
from transformers import EvalPrediction

from hf_multiencoder.data.loading import TASKS, TaskSpec
from hf_multiencoder.training import metrics as metrics_module
from hf_multiencoder.training.metrics import (
    build_compute_metrics,
    build_ner_compute_metrics,
    compute_task_metrics,
    main_metric_value,
    metric_backend,
    ner_metrics,
)


@pytest.fixture
def fallback_only(monkeypatch):
    """Force the scikit-learn/scipy backend (as offline), whatever the environment."""
    monkeypatch.setenv("HF_MULTIENCODER_METRICS", "fallback")
    monkeypatch.setattr(metrics_module, "_evaluate_metrics", {})
    monkeypatch.setattr(metrics_module, "_last_backend", None)


def test_matthews_correlation(fallback_only):
    # TP=2 TN=2 FP=1 FN=1: MCC = (2*2 - 1*1) / sqrt(3*3*3*3) = 1/3
    refs = [1, 1, 1, 0, 0, 0]
    preds = [1, 1, 0, 0, 0, 1]
    result = compute_task_metrics("cola", preds, refs)
    assert result == {"matthews_correlation": pytest.approx(1 / 3)}
    assert metric_backend() == "fallback"


def test_pearson_spearman(fallback_only):
    # x - mean = [-1.5, -0.5, 0.5, 1.5], y - mean = [-1.75, -0.75, 0.25, 2.25]
    # r = 6.5 / sqrt(5 * 8.75); ranks agree, so spearman = 1
    preds = np.array([[1.0], [2.0], [3.0], [4.0]])  # (n, 1) as a regression head gives
    refs = [1.0, 2.0, 3.0, 5.0]
    pearson = 6.5 / math.sqrt(5 * 8.75)
    for task in ("stsb", TASKS["sick_relatedness"]):
        result = compute_task_metrics(task, preds, refs)
        assert result["pearson"] == pytest.approx(pearson)
        assert result["spearmanr"] == pytest.approx(1.0)
        assert result["combined_score"] == pytest.approx((pearson + 1.0) / 2)


def test_accuracy_and_f1(fallback_only):
    # TP=2 FP=1 FN=1 TN=1: precision = recall = F1 = 2/3, accuracy = 3/5
    refs = [1, 1, 0, 0, 1]
    preds = [1, 0, 0, 1, 1]
    result = compute_task_metrics("mrpc", preds, refs)
    assert result == {
        "accuracy": pytest.approx(0.6),
        "f1": pytest.approx(2 / 3),
        "combined_score": pytest.approx((0.6 + 2 / 3) / 2),
    }
    assert set(compute_task_metrics("qqp", preds, refs)) == {"accuracy", "f1", "combined_score"}
    for task in ("rte", "sst2", "mnli", "trec_fine", "sick_entailment"):
        assert compute_task_metrics(task, preds, refs) == {"accuracy": pytest.approx(0.6)}
    # logits are accepted too (argmax)
    logits = np.eye(2)[preds]
    assert compute_task_metrics("rte", logits, refs) == {"accuracy": pytest.approx(0.6)}


def test_metric_errors(fallback_only):
    with pytest.raises(ValueError, match="3 predictions for 2 references"):
        compute_task_metrics("rte", [0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="Unknown task"):
        compute_task_metrics("nope", [0], [0])


def test_evaluate_backend_is_used_when_loaded(monkeypatch):
    """With an `evaluate` metric available it is used (here a stand-in, as the Hub is unreachable in tests)."""

    class FakeGlueMetric:
        def compute(self, predictions, references):
            return {"matthews_correlation": 0.25}

    monkeypatch.setattr(metrics_module, "_evaluate_metrics", {"matthews": FakeGlueMetric()})
    monkeypatch.setattr(metrics_module, "_last_backend", None)
    assert compute_task_metrics("cola", [0, 1], [0, 1]) == {"matthews_correlation": 0.25}
    assert metric_backend() == "evaluate"


def test_evaluate_not_loaded_offline(monkeypatch, hub_offline):
    hub_offline(True)
    monkeypatch.setattr(metrics_module, "_evaluate_metrics", {})
    assert metrics_module._load_evaluate_metric("accuracy") is None


def test_main_metric_value():
    assert main_metric_value("cola", {"eval_matthews_correlation": 0.5, "eval_loss": 1.0}) == 0.5
    assert main_metric_value(TASKS["stsb"], {"pearson": 0.8, "spearmanr": 0.7}) == 0.7
    assert main_metric_value("conll2003", {"eval_overall_f1": 0.9}) == 0.9
    with pytest.raises(ValueError, match="'f1'.*accuracy"):
        main_metric_value("mrpc", {"accuracy": 0.5})


def test_build_compute_metrics_classification(fallback_only):
    compute = build_compute_metrics(TASKS["mrpc"])
    refs = np.array([1, 1, 0, 0, 1])
    logits = np.array([[0.1, 0.9], [2.0, -1.0], [1.0, 0.0], [-1.0, 3.0], [0.0, 0.5]])  # argmax 1,0,0,1,1
    extra = np.zeros((5, 3))  # e.g. fusion weights after the logits: ignored
    result = compute(EvalPrediction(predictions=(logits, extra), label_ids=refs))
    assert result["accuracy"] == pytest.approx(0.6)
    assert result["f1"] == pytest.approx(2 / 3)


def test_build_compute_metrics_regression(fallback_only):
    compute = build_compute_metrics("stsb")
    result = compute(EvalPrediction(predictions=np.array([[1.0], [2.0], [3.0], [4.0]]),
                                    label_ids=np.array([1.0, 2.0, 3.0, 5.0])))
    assert result["pearson"] == pytest.approx(6.5 / math.sqrt(5 * 8.75))
    assert result["spearmanr"] == pytest.approx(1.0)


def test_ner_metrics_by_hand():
    # one correct PER; the LOC is cut short (wrong): 2 gold and 2 predicted entities, 1 right
    gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]]
    pred = [["B-PER", "I-PER", "O", "B-LOC", "O"]]
    result = ner_metrics(gold, pred)
    assert result == {
        "overall_precision": pytest.approx(0.5),
        "overall_recall": pytest.approx(0.5),
        "overall_f1": pytest.approx(0.5),
        "overall_accuracy": pytest.approx(4 / 5),
        "PER_f1": pytest.approx(1.0),
        "LOC_f1": pytest.approx(0.0),
    }
    # plus a spurious MISC: precision 1/3, recall 1/2, F1 = 2 * (1/3 * 1/2) / (1/3 + 1/2) = 0.4
    pred = [["B-PER", "I-PER", "B-MISC", "B-LOC", "O"]]
    result = ner_metrics(gold, pred)
    assert result["overall_precision"] == pytest.approx(1 / 3)
    assert result["overall_recall"] == pytest.approx(0.5)
    assert result["overall_f1"] == pytest.approx(0.4)
    assert result["overall_accuracy"] == pytest.approx(3 / 5)
    assert result["MISC_f1"] == 0.0
    with pytest.raises(ValueError, match="Sentence 0"):
        ner_metrics(gold, [["O"]])


def test_build_ner_compute_metrics_drops_ignored_positions():
    label_list = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    # predicted ids; -100 in the labels marks padding, where the predictions must be ignored
    pred_ids = np.array([[1, 2, 0, 3, 1], [3, 0, 1, 1, 1]])
    label_ids = np.array([[1, 2, 0, 3, 4], [3, 0, -100, -100, -100]])
    logits = np.eye(len(label_list))[pred_ids] * 5.0  # (batch, words, labels)
    compute = build_ner_compute_metrics(label_list)
    result = compute(EvalPrediction(predictions=(logits, np.ones((2, 5))), label_ids=label_ids))
    expected = ner_metrics(
        [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], ["B-LOC", "O"]],
        [["B-PER", "I-PER", "O", "B-LOC", "B-PER"], ["B-LOC", "O"]],
    )
    assert result == expected
    # gold: PER, LOC, LOC; predicted: PER, LOC (cut short), PER, LOC: 2 of 4 right, 2 of 3 found
    assert result["overall_precision"] == pytest.approx(0.5)
    assert result["overall_recall"] == pytest.approx(2 / 3)
    assert result["overall_accuracy"] == pytest.approx(6 / 7)
    # the same through build_compute_metrics / compute_task_metrics for a token task
    spec = TaskSpec("custom_ner", "token", ("tokens",), label_list, main_metric="overall_f1")
    assert build_compute_metrics(spec)(EvalPrediction(predictions=logits, label_ids=label_ids)) == expected
    assert compute_task_metrics(spec, [["B-PER", "O"]], [["B-PER", "O"]])["overall_f1"] == 1.0
