"""training/selection.py: the held-out slice, per-epoch predictions as flat arrays, ensembles and the paired
bootstrap."""

import numpy as np
import pytest
from datasets import Dataset

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.selection import (
    ensemble,
    heldout_split,
    paired_bootstrap,
    prediction_arrays,
    score_outputs,
)


def test_heldout_split_is_fixed_disjoint_and_independent_of_the_run_seed():
    data = Dataset.from_dict({"i": list(range(100))})
    train, held = heldout_split(data, 0.1)
    assert len(held) == 10 and len(train) == 90
    assert set(train["i"]).isdisjoint(held["i"]) and set(train["i"]) | set(held["i"]) == set(range(100))
    assert heldout_split(data, 0.1)[1]["i"] == held["i"]  # the same slice every time
    assert heldout_split(data, 0.1, seed=1)[1]["i"] != held["i"]
    with pytest.raises(ValueError, match="between 0 and 1"):
        heldout_split(data, 1.0)
    with pytest.raises(ValueError, match="too small"):
        heldout_split(Dataset.from_dict({"i": [0]}), 0.5)


def test_prediction_arrays_sequence_and_token():
    spec = get_task("rte")
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    weights = np.array([[0.7, 0.3], [0.4, 0.6], [0.5, 0.5]])
    out = prediction_arrays((logits, weights), np.array([0, 1, 1]), spec, num_members=2)
    assert out["outputs"].shape == (3, 2) and np.allclose(out["outputs"].sum(-1), 1)
    assert np.array_equal(out["weights"], weights)
    assert score_outputs(spec, out["outputs"], out["labels"]) == pytest.approx(2 / 3)  # ties go to the first label

    ner = get_task("wnut17")
    n_labels = len(ner.label_list)
    logits = np.zeros((2, 3, n_labels))
    logits[0, 0, 1] = logits[0, 1, 2] = logits[1, 0, 1] = 5.0
    labels = np.array([[1, 2, -100], [1, 0, 0]])
    word_mask = np.array([[1, 1, 0], [1, 0, 1]])  # sentence 2's second word: no member saw it ("O")
    out = prediction_arrays((logits, word_mask), labels, ner)
    assert out["outputs"].shape == (5, n_labels) and list(out["lengths"]) == [2, 3]
    assert out["outputs"].argmax(-1).tolist() == [1, 2, 1, 0, 0]
    assert score_outputs(ner, out["outputs"], out["labels"], out["lengths"]) == pytest.approx(1.0)


def test_ensemble_and_paired_bootstrap():
    spec = get_task("stsb")
    gold = np.linspace(0, 5, 60)
    a = gold + np.random.default_rng(0).normal(0, 0.3, 60)
    b = gold + np.random.default_rng(1).normal(0, 2.0, 60)
    assert np.allclose(ensemble([a, b]), (a + b) / 2)
    with pytest.raises(ValueError, match="same examples"):
        ensemble([a, b[:10]])
    boot = paired_bootstrap(spec, [(a, b), (a, b)], gold, n_resamples=200)
    direct = 100 * (score_outputs(spec, a, gold) - score_outputs(spec, b, gold))
    assert boot["mean"] == pytest.approx(direct)
    assert 0 < boot["low"] <= boot["mean"] <= boot["high"] and boot["p_a_not_better"] == 0.0


def test_study_protocol_splits_budget_and_member_overrides(shared_data):
    from hf_multiencoder.training.protocol import (
        FINE_TUNING,
        HELDOUT_FRACTION,
        REAL_MEMBERS,
        member_paths,
        study_splits,
    )

    splits, spec = study_splits("rte", shared_data)
    assert spec.name == "rte" and set(splits) == {"train", "heldout", "dev"}
    n = len(splits["train"]) + len(splits["heldout"])
    assert len(splits["heldout"]) == round(n * HELDOUT_FRACTION)
    again, _ = study_splits("rte", shared_data)  # every row and seed of a study holds out the same examples
    assert again["heldout"]["sentence1"] == splits["heldout"]["sentence1"]
    assert study_splits("rte", shared_data, max_samples=5)[0]["dev"].num_rows == 5

    args = FINE_TUNING.training_arguments("unused", seed=7, num_train_epochs=4, use_cpu=True)
    assert (args.num_train_epochs, args.learning_rate, args.per_device_train_batch_size, args.seed) == (4, 2e-5, 32, 7)
    assert FINE_TUNING.training_arguments("unused", seed=1).num_train_epochs == FINE_TUNING.num_train_epochs == 3

    assert member_paths(["MPNet=/models/mpnet"]) == {**REAL_MEMBERS, "MPNet": "/models/mpnet"}
    for bad in ("MPNet", "BERT=/x", "MPNet="):
        with pytest.raises(ValueError, match="NAME=PATH with NAME one of MiniLM, MPNet"):
            member_paths([bad])
