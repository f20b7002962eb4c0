"""Predicting with a saved model alone: `run_glue_multi.py --model_name_or_path FOLDER --test_file FILE --do_predict`
and the library functions behind it (`hf_multiencoder.training.prediction`, `load_texts`)."""

import json

import pytest
import torch

import run_glue_multi  # the repository root is on pytest's pythonpath (pyproject.toml)
from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderForTokenClassification
from hf_multiencoder.data.loading import load_texts
from hf_multiencoder.models.tokenization_multiencoder import MultiEncoderTokenizer
from hf_multiencoder.training.prediction import load_model_for_prediction, predict_records

NAMES = ["bert", "roberta"]


def _save(model, tiny_paths, folder):
    model.save_pretrained(folder)
    MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def classifier_folder(tiny_paths, tmp_path_factory):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths[:2], encoder_names=NAMES, fusion="dme", num_labels=2, id2label={0: "bad", 1: "good"})
    return _save(model, tiny_paths, tmp_path_factory.mktemp("cls"))


@pytest.fixture(scope="module")
def tagger_folder(tiny_paths, tmp_path_factory):
    torch.manual_seed(0)
    model = MultiEncoderForTokenClassification.from_encoders(
        tiny_paths[:2], encoder_names=NAMES, fusion="dme", num_labels=3, id2label={0: "O", 1: "B-LOC", 2: "I-LOC"})
    return _save(model, tiny_paths, tmp_path_factory.mktemp("ner"))


def _predict(folder, out, test_file, *extra):
    return run_glue_multi.main(["--model_name_or_path", folder, "--test_file", str(test_file), "--do_predict",
                                "--output_dir", str(out), "--use_cpu", "true", "--report_to", "none", *extra])


def test_predict_from_a_saved_model_alone(classifier_folder, tmp_path):
    test_file = tmp_path / "new.csv"
    test_file.write_text('text\nHe can will go\n"A sentence, with a comma"\nThe cat sat on the mat.\n')
    out = tmp_path / "pred"
    result = _predict(classifier_folder, out, test_file, "--per_device_eval_batch_size", "2")
    assert result["predictions"] == 3
    records = [json.loads(line) for line in (out / "predict_results.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records] == ["He can will go", "A sentence, with a comma", "The cat sat on the mat."]
    model = MultiEncoderForSequenceClassification.from_pretrained(classifier_folder).eval()
    tokenizer = MultiEncoderTokenizer.from_pretrained(classifier_folder)
    for r in records:
        with torch.no_grad():
            expected = model(**tokenizer(r["text"], return_tensors="pt", truncation=True, max_length=128))
        probs = expected.logits.softmax(-1)[0]
        assert r["label"] == model.config.id2label[int(probs.argmax())]
        assert r["score"] == pytest.approx(float(probs.max()), abs=1e-5)
        assert list(r["fusion_weights"]) == NAMES
        assert list(r["fusion_weights"].values()) == pytest.approx(expected.fusion_weights[0].tolist(), abs=1e-5)
    rows = (out / "predict_results.txt").read_text().splitlines()
    assert rows[0] == "index\tprediction" and rows[1:] == [f"{r['index']}\t{r['label']}" for r in records]
    # a prediction writes its results and nothing else: no model card, no run files
    assert sorted(p.name for p in out.iterdir()) == ["predict_results.jsonl", "predict_results.txt"]
    # nothing is lost: a second prediction into the same folder is refused unless asked to overwrite
    with pytest.raises(ValueError, match="already holds predict_results"):
        _predict(classifier_folder, out, test_file)
    _predict(classifier_folder, out, test_file, "--overwrite_output_dir", "true", "--max_predict_samples", "1")
    assert len((out / "predict_results.jsonl").read_text().splitlines()) == 1


def test_predict_pairs_by_column_names_and_json(classifier_folder, tmp_path):
    test_file = tmp_path / "pairs.jsonl"
    rows = [{"id": 1, "q": "A man plays.", "a": "Someone plays.", "label": "x"}, {"id": 2, "q": "x", "a": "y"}]
    test_file.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "pred"
    _predict(classifier_folder, out, test_file, "--text_column_names", "q", "a")
    records = [json.loads(line) for line in (out / "predict_results.jsonl").read_text().splitlines()]
    assert [(r["text"], r["text_pair"]) for r in records] == [("A man plays.", "Someone plays."), ("x", "y")]


def test_predict_entities_with_offsets_from_a_tagger(tagger_folder, tmp_path):
    test_file = tmp_path / "ner.tsv"
    test_file.write_text("sentence\nParis is in France.\nNew York, again\n")
    out = tmp_path / "pred"
    _predict(tagger_folder, out, test_file)
    records = [json.loads(line) for line in (out / "predict_results.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records] == ["Paris is in France.", "New York, again"]
    for r in records:
        for e in r["entities"]:
            assert r["text"][e["start"]:e["end"]] == e["word"] and e["entity_group"] == "LOC"
            assert sum(e["fusion_weights"].values()) == pytest.approx(1, abs=1e-5)
    rows = (out / "predict_results.txt").read_text().splitlines()[1:]
    assert rows == [f"{r['index']}\t" + " ".join(f"{e['word']}/LOC" for e in r["entities"]) for r in records]


def test_predict_refuses_what_it_cannot_honour(classifier_folder, tiny_paths, tmp_path):
    test_file = tmp_path / "new.csv"
    test_file.write_text("text\nfine\n")
    with pytest.raises(ValueError, match="model_name_or_path"):
        run_glue_multi.main(["--test_file", str(test_file), "--do_predict", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="--fusion, --learning_rate train"):
        _predict(classifier_folder, tmp_path / "o", test_file, "--fusion", "concat", "--learning_rate", "1e-3")
    with pytest.raises(ValueError, match="--test_file FILE --do_predict"):
        run_glue_multi.main(["--model_name_or_path", classifier_folder, "--do_predict", "--output_dir",
                             str(tmp_path / "o")])
    encoder_only = tmp_path / "encoder"
    from transformers import AutoModel

    AutoModel.from_pretrained(tiny_paths[0]).save_pretrained(encoder_only)
    with pytest.raises(ValueError, match="no multi-encoder classifier or tagger.*'bert'"):
        load_model_for_prediction(str(encoder_only))


def test_load_texts_chooses_columns_and_names_bad_rows(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("idx,sentence1,sentence2,label\n0,a b,c d,1\n1,e,f,0\n")
    assert load_texts(str(path)) == (["a b", "e"], ["c d", "f"])
    assert load_texts(str(path), ["sentence2"]) == (["c d", "f"], None)
    words = tmp_path / "w.json"
    words.write_text(json.dumps({"tokens": ["New", "York"]}) + "\n" + json.dumps({"tokens": ["Paris"]}) + "\n")
    assert load_texts(str(words)) == (["New York", "Paris"], None)
    bad = tmp_path / "bad.csv"
    bad.write_text("text\nfine\n\" \"\n")
    with pytest.raises(ValueError, match="row 3 has no text in column 'text'"):
        load_texts(str(bad))
    with pytest.raises(ValueError, match="no text column"):
        load_texts(str(path), ["nope"])
    with pytest.raises(FileNotFoundError):
        load_texts(str(tmp_path / "missing.csv"))


def test_predict_records_checks_pairs(tiny_paths, classifier_folder):
    model = load_model_for_prediction(classifier_folder)
    tokenizer = MultiEncoderTokenizer.from_pretrained(classifier_folder)
    with pytest.raises(ValueError, match="2 texts but 1 text pairs"):
        predict_records(model, tokenizer, ["a", "b"], ["c"])
