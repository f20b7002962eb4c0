"""training/selection.py: the held-out slice, per-epoch predictions as flat arrays, ensembles and the paired
bootstrap."""

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from transformers import AutoTokenizer

from hf_multiencoder.data.loading import tokenize_task
from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.selection import (
    ensemble,
    heldout_split,
    paired_bootstrap,
    prediction_arrays,
    resample_scorer,
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


def test_a_plain_token_classifier_is_scored_per_word_like_the_multi_encoder(tiny_paths):
    """A plain tokenizer's token task: each tag on the word's first sub-token (-100 elsewhere); the predictions read
    back one row per gold word, "O" for a word the model never saw (no sub-token, or cut off by max_length)."""
    ner = get_task("wnut17")
    tags = {t: ner.label_list.index(t) for t in ("O", "B-person", "I-person", "B-location")}
    words = [["Johnny", "Smithers", "\u200b", "visited", "Paris"], ["Paris"] + ["x"] * 20]
    gold = [[tags["B-person"], tags["I-person"], tags["O"], tags["O"], tags["B-location"]],
            [tags["B-location"]] + [tags["O"]] * 19 + [tags["B-person"]]]
    raw = DatasetDict({"dev": Dataset.from_dict({"tokens": words, "ner_tags": gold})})
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[0])  # BERT: "\u200b" has no sub-token
    data = tokenize_task(raw, ner, tokenizer, max_length=12, add_length=False)["dev"]
    assert set(data.column_names) == {"input_ids", "attention_mask", "token_type_ids", "labels", "word_starts",
                                      "word_labels"}
    for i, starts in enumerate(data["word_starts"]):
        word_ids = tokenizer(words[i], is_split_into_words=True, truncation=True, max_length=12).word_ids()
        seen = [w for w in range(len(words[i])) if w in word_ids]
        assert [s for s in starts if s >= 0] == [word_ids.index(w) for w in seen]  # the first sub-token of each
        labels = data["labels"][i]
        assert [labels[s] for s in starts if s >= 0] == [gold[i][w] for w in seen]
        assert sum(label != -100 for label in labels) == len(seen)  # the other sub-tokens carry no tag
    assert data["word_starts"][0][2] == -1 and data["word_starts"][1][-1] == -1  # no sub-token; cut off

    # logits that put each word's tag on its first sub-token and "B-person" everywhere else
    width = max(len(ids) for ids in data["input_ids"])
    logits = np.zeros((2, width, len(ner.label_list)))
    logits[..., tags["B-person"]] = 3.0
    for i, starts in enumerate(data["word_starts"]):
        for w, s in enumerate(starts):
            if s >= 0:
                logits[i, s, gold[i][w]] = 9.0
    labels = np.full((2, width), -100)
    out = prediction_arrays(logits, labels, ner, word_starts=data["word_starts"], word_labels=data["word_labels"])
    assert list(out["lengths"]) == [5, 21] and out["labels"].tolist() == gold[0] + gold[1]
    pred = out["outputs"].argmax(-1).tolist()
    assert pred == gold[0] + gold[1][:-1] + [tags["O"]]  # the cut-off person is "O": entity F1 < 1
    assert score_outputs(ner, out["outputs"], out["labels"], out["lengths"]) == pytest.approx(2 * 3 / (3 + 4))
    with pytest.raises(ValueError, match="together"):
        prediction_arrays(logits, labels, ner, word_starts=data["word_starts"])
    with pytest.raises(ValueError, match="word_starts has 1 examples but the predictions 2"):
        prediction_arrays(logits, labels, ner, word_starts=data["word_starts"][:1],
                          word_labels=data["word_labels"][:1])
    with pytest.raises(ValueError, match="for token tasks; rte is a"):  # never silently ignored
        prediction_arrays(np.zeros((2, 2)), np.array([0, 1]), get_task("rte"), word_starts=data["word_starts"],
                          word_labels=data["word_labels"])


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


def test_resample_scorer_counts_entities_as_seqeval_does():
    """The NER bootstrap sums per-sentence entity counts; it must give seqeval's F1 on every resample, including
    sentences drawn twice, entities cut at sentence ends and a sentence with no entities."""
    spec = get_task("wnut17")
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, 40)
    labels = rng.integers(0, len(spec.label_list), lengths.sum())
    outputs = rng.random((lengths.sum(), len(spec.label_list)))
    outputs[labels == 0, 0] += 0.5  # agree more often than chance
    scorer = resample_scorer(spec, outputs, labels, lengths)
    assert scorer(None) == pytest.approx(score_outputs(spec, outputs, labels, lengths))
    for _ in range(5):
        index = rng.integers(0, len(lengths), len(lengths))
        assert scorer(index) == pytest.approx(score_outputs(spec, outputs, labels, lengths, index))
    assert 0 < scorer(None) < 1


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
    assert not args.dataloader_pin_memory  # nothing to pin to on the CPU
    assert FINE_TUNING.training_arguments("unused", seed=1).num_train_epochs == FINE_TUNING.num_train_epochs == 3

    assert member_paths(["MPNet=/models/mpnet"]) == {**REAL_MEMBERS, "MPNet": "/models/mpnet"}
    for bad in ("MPNet", "BERT=/x", "MPNet="):
        with pytest.raises(ValueError, match="NAME=PATH with NAME one of MiniLM, MPNet"):
            member_paths([bad])
