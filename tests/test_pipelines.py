"""The fusion-weights pipelines: `multiencoder-classification` and `multiencoder-ner`, from saved folders (remote
code) and from model objects (the installed package), batched and unbatched."""

import pytest
import torch
from transformers import pipeline

from hf_multiencoder import (
    MultiEncoderClassificationPipeline,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderNerPipeline,
    MultiEncoderTokenizer,
)

NAMES = ["bert", "roberta"]


@pytest.fixture(scope="module")
def pair_tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES)


def _save(model, tokenizer, folder):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def classifier_folder(tiny_paths, pair_tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths[:2], encoder_names=NAMES, fusion="dme", num_labels=3, id2label={0: "a", 1: "b", 2: "c"})
    return _save(model, pair_tokenizer, tmp_path_factory.mktemp("cls"))


@pytest.fixture(scope="module")
def tagger_folder(tiny_paths, pair_tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    model = MultiEncoderForTokenClassification.from_encoders(
        tiny_paths[:2], encoder_names=NAMES, fusion="dme", num_labels=3, id2label={0: "O", 1: "B-LOC", 2: "I-LOC"})
    return _save(model, pair_tokenizer, tmp_path_factory.mktemp("ner"))


def test_classification_pipeline_from_a_folder(classifier_folder):
    clf = pipeline("multiencoder-classification", model=classifier_folder, trust_remote_code=True)
    assert type(clf).__name__ == "MultiEncoderClassificationPipeline"
    out = clf("He can will go")
    assert set(out) == {"label", "score", "fusion_weights"} and out["label"] in {"a", "b", "c"}
    assert list(out["fusion_weights"]) == NAMES and sum(out["fusion_weights"].values()) == pytest.approx(1, abs=1e-5)
    inputs = ["He can will go", ("A man plays.", "Someone plays."), {"text": "x y", "text_pair": "y x"}, "Fine."]
    one_by_one = [clf(x) for x in inputs]
    batched = clf(inputs, batch_size=3)  # a batch mixing sentences and pairs
    for a, b in zip(one_by_one, batched):
        assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-5)
        assert a["fusion_weights"] == pytest.approx(b["fusion_weights"], abs=1e-5)
    ranked = clf("He can will go", top_k=3)
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)
    assert sum(r["score"] for r in ranked) == pytest.approx(1, abs=1e-5)
    # the task is listed in the saved config: no task name needed; the stock text-classification still works
    assert type(pipeline(model=classifier_folder, trust_remote_code=True)).__name__ == type(clf).__name__
    assert pipeline("text-classification", model=classifier_folder, trust_remote_code=True)("Fine.")[0]["label"] in \
        {"a", "b", "c"}


def test_regression_gives_the_score_and_weights(tiny_paths, pair_tokenizer):
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, fusion="dme",
                                                                num_labels=1, problem_type="regression").eval()
    reg = MultiEncoderClassificationPipeline(model=model, tokenizer=pair_tokenizer)
    out = reg(("A man plays.", "Someone plays."))
    with torch.no_grad():
        batch = pair_tokenizer("A man plays.", text_pair="Someone plays.", return_tensors="pt", truncation=True)
        expected = model(**batch).logits.item()
    assert set(out) == {"score", "fusion_weights"} and out["score"] == pytest.approx(expected, abs=1e-5)


def test_ner_pipeline_entities_offsets_and_weights(tagger_folder):
    ner = pipeline("multiencoder-ner", model=tagger_folder, trust_remote_code=True)
    assert type(ner).__name__ == "MultiEncoderNerPipeline"
    text = "Paris is in France."
    words = ner(text, aggregation_strategy="none")
    assert words  # the tiny tagger tags some words
    for w in words:
        assert text[w["start"]:w["end"]] == w["word"] and w["entity"] != "O"
        assert list(w["fusion_weights"]) == NAMES
    # punctuation is its own word ("France." is two words), as a real pre-tokenizer splits it
    all_words = ner.tokenizer.pre_tokenize(text)
    assert [w for w, _ in all_words][-2:] == ["France", "."]
    entities = ner(text)
    for e in entities:
        assert text[e["start"]:e["end"]] == e["word"] and e["entity_group"] == "LOC"
        assert sum(e["fusion_weights"].values()) == pytest.approx(1, abs=1e-5)
    texts = [text, "New York, again", "x"]
    for batched, alone in zip(ner(texts, batch_size=2, aggregation_strategy="none"),
                              [ner(t, aggregation_strategy="none") for t in texts]):
        assert [(w["word"], w["entity"], w["start"]) for w in batched] == [(w["word"], w["entity"], w["start"])
                                                                          for w in alone]
        assert [w["score"] for w in batched] == pytest.approx([w["score"] for w in alone], abs=1e-5)


def test_pipelines_from_model_objects_and_bad_arguments(tiny_paths, pair_tokenizer, tagger_folder):
    model = MultiEncoderForTokenClassification.from_pretrained(tagger_folder)
    ner = pipeline("multiencoder-ner", model=model, tokenizer=pair_tokenizer)  # registered by the package
    assert isinstance(ner, MultiEncoderNerPipeline)
    with pytest.raises(ValueError, match="aggregation_strategy"):
        ner("Paris", aggregation_strategy="max")
    with pytest.raises(ValueError, match="nothing to tag"):
        ner("   ")
    clf = MultiEncoderClassificationPipeline(
        model=MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, fusion="concat",
                                                                  num_labels=2),
        tokenizer=pair_tokenizer)
    with pytest.raises(ValueError, match="top_k"):
        clf("x", top_k=0)
    with pytest.raises(ValueError, match="does not take"):
        clf("x", temperature=2)
    out = clf("x")  # concat: no fusion weights
    assert out["fusion_weights"] is None


def test_predict_tags_splits_words_as_the_ner_pipeline(tiny_paths):
    """`predict_tags` on a string and the `multiencoder-ner` pipeline tag the same words: the tokenizer's
    pre-tokenizer, which splits punctuation off ("France." is two words)."""
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=["bert", "roberta"])
    model = MultiEncoderForTokenClassification.from_encoders(tiny_paths[:2], encoder_names=["bert", "roberta"],
                                                             num_labels=3).eval()
    text = "Paris is in France."
    words = model.predict_tags(tokenizer, [text])[0]["words"]
    assert words == [w for w, _ in tokenizer.pre_tokenize(text)] and words[-2:] == ["France", "."]
    assert [text[a:b] for _, (a, b) in tokenizer.pre_tokenize(text)] == words
