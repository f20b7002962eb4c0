"""Loading a saved multi-encoder with the Auto classes, in-process and where hf_multiencoder cannot be imported."""

import json
import os
import sys

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
from transformers.dynamic_module_utils import get_imports

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.testing_utils import run_without_package

SHIPPED = {"configuration_multiencoder.py", "embedding_multiencoder.py", "fusion_multiencoder.py",
           "modeling_multiencoder.py", "pipeline_multiencoder.py", "precision_multiencoder.py",
           "tokenization_multiencoder.py"}


@pytest.fixture(scope="module")
def saved(tiny_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cola-dme")
    names = ["bert", "roberta", "distil"]
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths, encoder_names=names, fusion="dme", num_labels=2,
        id2label={0: "unacceptable", 1: "acceptable"}, label2id={"unacceptable": 0, "acceptable": 1}).eval()
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=names)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    batch = tokenizer(["He can will go", "the cat sat"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    return str(folder), logits


def test_saved_folder_ships_code_and_auto_map(saved):
    folder, _ = saved
    assert SHIPPED <= set(os.listdir(folder))
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["auto_map"] == {
        "AutoConfig": "configuration_multiencoder.MultiEncoderConfig",
        "AutoModelForSequenceClassification": "modeling_multiencoder.MultiEncoderForSequenceClassification",
    }
    tok_config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    assert tok_config["auto_map"] == {"AutoTokenizer": ["tokenization_multiencoder.MultiEncoderTokenizer", None]}
    for name in SHIPPED:  # the shipped closure imports only torch, transformers, the standard library and itself
        # transformers' own check (it sees imports at any indentation, relative ones left out)
        imports = set(get_imports(os.path.join(folder, name))) - set(sys.stdlib_module_names)
        assert imports <= {"torch", "transformers"}, (name, imports)


def test_auto_classes_and_pipeline_in_process(saved):
    folder, logits = saved
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert isinstance(tokenizer, MultiEncoderTokenizer)
    batch = tokenizer(["He can will go", "the cat sat"], padding=True, return_tensors="pt")
    torch.testing.assert_close(model(**batch).logits, logits, atol=1e-5, rtol=0)
    classifier = pipeline("text-classification", model=folder)
    result = classifier("He can will go")
    assert result[0]["label"] in {"unacceptable", "acceptable"}
    expected = "acceptable" if logits[0].argmax() == 1 else "unacceptable"
    assert result[0]["label"] == expected
    # batched: each member is padded to its own longest sequence; the same scores as one at a time
    texts = ["He can will go", "the cat sat", "somebody just left the new york cat quickly", "a dog"]
    one_by_one = [classifier(t, top_k=None) for t in texts]
    batched = classifier(texts, batch_size=3, top_k=None)
    for single, many in zip(one_by_one, batched):
        assert [r["label"] for r in single] == [r["label"] for r in many]
        torch.testing.assert_close(torch.tensor([r["score"] for r in many]),
                                   torch.tensor([r["score"] for r in single]), atol=1e-5, rtol=0)


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_trust_remote_code_without_the_package(saved, tmp_path):
    """A fresh interpreter that cannot import hf_multiencoder loads model, tokenizer and pipeline from the folder."""
    folder, logits = saved
    result = run_without_package(f"""
        import json
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
        m = AutoModelForSequenceClassification.from_pretrained({folder!r}, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=True)
        b = t(["He can will go", "the cat sat"], padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = m(**b).logits.tolist()
        p = pipeline("text-classification", model={folder!r}, trust_remote_code=True)(["He can will go", "a"],
                                                                                     batch_size=2)
        print(json.dumps({{"model": type(m).__module__, "tokenizer": type(t).__name__, "logits": logits,
                          "pipeline": p}}))
    """, tmp_path)
    assert result["model"].startswith("transformers_modules.")
    assert result["tokenizer"] == "MultiEncoderTokenizer"
    torch.testing.assert_close(torch.tensor(result["logits"]), logits, atol=1e-5, rtol=0)
    assert [r["label"] for r in result["pipeline"]] == [
        "acceptable" if row.argmax() == 1 else "unacceptable" for row in logits[:1]] + [result["pipeline"][1]["label"]]
    assert result["pipeline"][1]["label"] in {"unacceptable", "acceptable"}
