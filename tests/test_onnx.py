"""ONNX export (`hf_multiencoder.deploy.onnx`): the graph of three tiny members of different architectures (BERT with
token types, RoBERTa, DistilBERT) answers as the PyTorch model does, at other batch sizes and lengths than the
export's, for sequence classification, token classification and the embedding model; int8 runs; errors are clear."""

import json
import os
import sys

import numpy as np
import pytest
import torch

from hf_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderTokenizer,
)

pytest.importorskip("onnxruntime", reason="the ONNX export needs the onnx extra")
pytest.importorskip("onnx", reason="the ONNX export needs the onnx extra")

from hf_multiencoder.deploy.onnx import OnnxMultiEncoder, export_onnx  # noqa: E402

NAMES = ["bert", "roberta", "distil"]
TOL = 1e-4
# batches of other sizes and lengths than the export's example (2 sentences): 1 short, 4 of mixed lengths, 7 long
# ones cut by truncation
SENTENCES = [
    ["he"],
    ["the cat sat on the mat", "john smith went to paris quickly !", "it is", "new york 2024 , 12 . she likes it"],
    ["somebody just left and the dog runs quickly in paris " * 3] * 3 + ["a", "the mat", "go", "she went to york"],
]
PAIRS = (["the cat sat on the mat", "he left"], ["a dog runs", "she went to paris and somebody just left"])
WORDS = [
    [["john"]],
    [["john", "smith", "went", "to", "new", "york"], ["the", "cat"], ["she", "likes", "paris", "!"]],
    [["somebody", "just", "left", "quickly", "running", "2024"] * 4, ["a"], ["the", "dog", "sat"]] * 2,
]


def _model(cls, paths, **kwargs):
    torch.manual_seed(0)
    model = cls.from_encoders(paths, encoder_names=NAMES, encoder_dropout=0.0, **kwargs)
    with torch.no_grad():  # a trained-looking fusion: weights away from uniform
        for p in model.base_model.fusion.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def names_tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=NAMES)


@pytest.fixture(scope="module")
def exported(tiny_paths, names_tokenizer, tmp_path_factory):
    """`exported(kind)`: (PyTorch model, onnxruntime runner) of one kind, exported once per module."""
    specs = {
        "dme": (MultiEncoderForSequenceClassification, {"fusion": "dme", "num_labels": 3}),
        "concat": (MultiEncoderForSequenceClassification, {"fusion": "concat", "num_labels": 2}),
        "token": (MultiEncoderForTokenClassification, {"fusion": "dme", "num_labels": 5}),
        "embedding": (MultiEncoderModel, {"fusion": "dme"}),
    }
    cache = {}

    def get(kind):
        if kind not in cache:
            cls, kwargs = specs[kind]
            model = _model(cls, tiny_paths, **kwargs)
            folder = tmp_path_factory.mktemp(f"onnx_{kind}")
            export_onnx(model, folder, tokenizer=names_tokenizer)
            cache[kind] = model, OnnxMultiEncoder(folder, num_threads=1)
        return cache[kind]

    return get


def _close(onnx_value, torch_value):
    assert onnx_value.shape == tuple(torch_value.shape)
    np.testing.assert_allclose(onnx_value, torch_value.numpy(), atol=TOL, rtol=0)


@pytest.mark.parametrize("fusion", ["dme", "concat"])
def test_sequence_classification_matches_pytorch_at_other_shapes(exported, names_tokenizer, fusion):
    model, runner = exported(fusion)
    assert runner.input_names == ["input_ids_0", "attention_mask_0", "token_type_ids_0", "input_ids_1",
                                  "attention_mask_1", "input_ids_2", "attention_mask_2"]  # types for BERT only
    for graph_input in runner.session.get_inputs():  # batch and length are symbolic, not the example's 2 x n
        assert all(isinstance(d, str) for d in graph_input.shape), graph_input
    lengths = set()
    for texts in SENTENCES:
        feed = runner.tokenize(texts, max_length=24)
        lengths.add(tuple(feed[f"input_ids_{i}"].shape for i in range(3)))
        out = runner.run(feed)
        batch = names_tokenizer(texts, padding=True, truncation=True, max_length=24, return_tensors="pt")
        with torch.no_grad():
            ref = model(**batch)
        _close(out["logits"], ref.logits)
        if fusion == "dme":
            _close(out["fusion_weights"], ref.fusion_weights)
        else:
            assert out["fusion_weights"] is None and runner.output_names == ["logits"]
    assert len(lengths) == 3  # three batch sizes, each member at its own lengths
    assert any(len({shape[1] for shape in members}) > 1 for members in lengths)  # members' lengths differ


def test_sentence_pairs_match_pytorch(exported, names_tokenizer):
    model, runner = exported("dme")
    out = runner(*PAIRS)
    batch = names_tokenizer(*PAIRS, padding=True, truncation=True, max_length=runner.member_max_lengths(),
                            return_tensors="pt")
    assert batch["token_type_ids"][0].max() == 1  # BERT sees the second segment
    with torch.no_grad():
        ref = model(**batch)
    _close(out["logits"], ref.logits)
    _close(out["fusion_weights"], ref.fusion_weights)


def test_predict_as_the_pytorch_helper(exported, names_tokenizer):
    model, runner = exported("dme")
    got = runner.predict(PAIRS[0], PAIRS[1], batch_size=1)
    want = model.predict_with_fusion_weights(names_tokenizer, PAIRS[0], PAIRS[1])
    assert got["Predictions"] == want["Predictions"] and got["Sentences"] == want["Sentences"]
    for a, b in zip(got["fusion_weights"], want["fusion_weights"]):
        assert list(a) == NAMES and a == pytest.approx(b, abs=1e-3)
    assert exported("concat")[1].predict(["he went"])["fusion_weights"] == [None]


def test_token_classification_matches_pytorch(exported, names_tokenizer):
    model, runner = exported("token")
    assert runner.input_names[-1] == "word_mask" and "word_ids_2" in runner.input_names
    for words in WORDS:
        out = runner(words, max_length=12)  # short: members cut off words at different places
        batch = names_tokenizer(words, is_split_into_words=True, padding=True, truncation=True, max_length=12,
                                return_tensors="pt")
        with torch.no_grad():
            ref = model(**batch)
        _close(out["logits"], ref.logits)
        _close(out["fusion_weights"], ref.fusion_weights)
        np.testing.assert_array_equal(out["word_mask"], ref.word_mask.numpy())
    assert (out["word_mask"] == 0).any()  # some words no member saw
    tagged = runner.predict([" ".join(w) for w in WORDS[1]])
    want = model.predict_tags(names_tokenizer, [" ".join(w) for w in WORDS[1]])
    assert [t["tags"] for t in tagged] == [t["tags"] for t in want]
    assert [t["words"] for t in tagged] == [t["words"] for t in want]
    assert tagged[0]["fusion_weights"][0] == pytest.approx(want[0]["fusion_weights"][0], abs=1e-3)


def test_embedding_model_matches_encode(exported, names_tokenizer):
    model, runner = exported("embedding")
    assert runner.output_names == ["sentence_embedding", "fusion_weights"]
    assert runner.onnx_config["embedding_fusion"] == "fused"
    texts = SENTENCES[1] + SENTENCES[2]
    vectors = runner.predict(texts, batch_size=3, max_length=24)
    want = model.encode(texts, tokenizer=names_tokenizer, max_length=24)
    assert vectors.shape == want.shape == (len(texts), model.get_embedding_dimension())
    np.testing.assert_allclose(vectors, want, atol=TOL, rtol=0)
    out = runner(texts[:4], max_length=24)
    with torch.no_grad():
        ref = model(**names_tokenizer(texts[:4], padding=True, truncation=True, max_length=24, return_tensors="pt"))
    _close(out["sentence_embedding"], ref.pooler_output)
    _close(out["fusion_weights"], ref.fusion_weights)
    assert runner.predict("he went").shape == (model.get_embedding_dimension(),)


@pytest.mark.slow
def test_export_from_a_saved_folder_is_self_contained_and_int8_is_close(tiny_paths, names_tokenizer, tmp_path):
    model = _model(MultiEncoderForSequenceClassification, tiny_paths, fusion="dme", num_labels=2)
    model.save_pretrained(tmp_path / "trained")
    names_tokenizer.save_pretrained(tmp_path / "trained")
    path = export_onnx(tmp_path / "trained", tmp_path / "onnx", quantize=True)
    assert os.path.basename(path) == "model.onnx"
    files = set(os.listdir(tmp_path / "onnx"))
    assert {"model.onnx", "model_int8.onnx", "onnx_config.json", "config.json", "tokenizer_config.json",
            "tokenizer_0", "tokenizer_1", "tokenizer_2"} <= files
    assert not any(f.endswith(".safetensors") for f in files)  # the graph holds the weights
    config = json.loads((tmp_path / "onnx" / "onnx_config.json").read_text())
    assert config["task"] == "sequence-classification" and config["exporter"] == "torchscript"
    assert config["max_abs_diff_vs_pytorch"] < TOL and config["int8_file"] == "model_int8.onnx"
    import onnx

    ops = {node.op_type for node in onnx.load(tmp_path / "onnx" / "model_int8.onnx").graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops  # int8 matrix products

    fp32 = OnnxMultiEncoder.from_pretrained(tmp_path / "onnx", num_threads=1)
    int8 = OnnxMultiEncoder(tmp_path / "onnx", quantized=True, num_threads=1)
    texts = SENTENCES[1] + SENTENCES[2]
    a, b = fp32(texts), int8(texts)
    # measured on these random members: logits within 2e-3, fusion weights within 1e-3
    assert np.abs(a["logits"] - b["logits"]).max() < 0.02
    assert np.abs(a["fusion_weights"] - b["fusion_weights"]).max() < 0.02
    assert "model_int8.onnx" in repr(int8)


@pytest.mark.slow
def test_cdme_and_last4_export(tiny_paths, names_tokenizer, tmp_path):
    model = _model(MultiEncoderForSequenceClassification, tiny_paths, fusion="cdme", pooling="last4", num_labels=2)
    export_onnx(model, tmp_path, tokenizer=names_tokenizer)
    runner = OnnxMultiEncoder(tmp_path, num_threads=1)
    for texts in SENTENCES:  # the BiLSTM's initial state follows the batch size (the export's was 2)
        batch = names_tokenizer(texts, padding=True, truncation=True, max_length=24, return_tensors="pt")
        with torch.no_grad():
            ref = model(**batch)
        out = runner(texts, max_length=24)
        _close(out["logits"], ref.logits)
        _close(out["fusion_weights"], ref.fusion_weights)


# ---- errors -----------------------------------------------------------------------------------------------------
def test_missing_onnxruntime_names_the_extra(exported, monkeypatch, tiny_paths, names_tokenizer, tmp_path):
    _, runner = exported("concat")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    with pytest.raises(ImportError, match=r'pip install "hf_multiencoder\[onnx\]"'):
        OnnxMultiEncoder(runner.folder)
    monkeypatch.setitem(sys.modules, "onnx", None)
    model = _model(MultiEncoderForSequenceClassification, tiny_paths, fusion="concat", num_labels=2)
    with pytest.raises(ImportError, match=r"`onnx`.*hf_multiencoder\[onnx\]"):
        export_onnx(model, tmp_path, tokenizer=names_tokenizer)


def test_bad_inputs_give_clear_errors(exported):
    _, runner = exported("dme")
    feed = runner.tokenize(["the cat sat", "he"])
    with pytest.raises(ValueError, match=r"missing: \['attention_mask_1'\]"):
        runner.run({k: v for k, v in feed.items() if k != "attention_mask_1"})
    with pytest.raises(ValueError, match=r"not taken: \['token_type_ids_1'\]"):
        runner.run({**feed, "token_type_ids_1": feed["input_ids_1"] * 0})
    swapped = {**feed, "input_ids_0": feed["input_ids_1"], "attention_mask_0": feed["attention_mask_1"],
               "token_type_ids_0": feed["attention_mask_1"] * 0}
    with pytest.raises(ValueError, match=r"Member 0 \(bert\) got token ids outside its vocabulary"):
        runner.run(swapped)
    with pytest.raises(ValueError, match=r"`attention_mask_2` has shape"):
        runner.run({**feed, "attention_mask_2": feed["attention_mask_2"][:, :-1]})
    with pytest.raises(ValueError, match="one batch size"):
        runner.run({**feed, "input_ids_2": feed["input_ids_2"][:1], "attention_mask_2": feed["attention_mask_2"][:1]})
    too_long = np.ones((2, 65), dtype=np.int64)
    with pytest.raises(ValueError, match=r"takes at most 64 tokens, got 65"):
        runner.run({**feed, "input_ids_2": too_long, "attention_mask_2": too_long})
    with pytest.raises(ValueError, match="texts but"):
        runner(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="batch_size"):
        runner.predict(["a"], batch_size=0)
    _, tagger = exported("token")
    with pytest.raises(ValueError, match="text_pairs"):
        tagger(["a b"], ["c"])
    with pytest.raises(ValueError, match="no words"):
        tagger(["a b", "  "])


def test_bad_exports_and_folders_give_clear_errors(exported, tiny_paths, names_tokenizer, tmp_path):
    model = _model(MultiEncoderForSequenceClassification, tiny_paths, fusion="dme", num_labels=2)
    with pytest.raises(ValueError, match="MultiEncoderTokenizer"):
        export_onnx(model, tmp_path)
    with pytest.raises(ValueError, match="embedding_fusion"):
        export_onnx(model, tmp_path, tokenizer=names_tokenizer, embedding_fusion="fused")
    with pytest.raises(ValueError, match="float32"):
        export_onnx(model.to(torch.bfloat16), tmp_path, tokenizer=names_tokenizer)
    other = MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES[:2])
    with pytest.raises(ValueError, match="member tokenizers"):
        export_onnx(model.float(), tmp_path, tokenizer=other)
    with pytest.raises(FileNotFoundError, match="no ONNX export"):
        OnnxMultiEncoder(tmp_path)
    _, runner = exported("dme")
    with pytest.raises(FileNotFoundError, match=r"quantize=True"):
        OnnxMultiEncoder(runner.folder, quantized=True)


def test_exported_model_still_checks_its_inputs_in_pytorch(exported, names_tokenizer):
    """The model skips its python input checks only while traced for the export: afterwards (and in eager PyTorch)
    a batch whose members disagree is refused as before."""
    model, _ = exported("dme")
    batch = names_tokenizer(["he left", "the cat sat"], padding=True, return_tensors="pt")
    inputs = {key: [t if i else t[:1] for i, t in enumerate(batch[key])] for key in batch}  # member 0: one example
    with pytest.raises(ValueError, match="got a batch of"):
        model(**inputs)
