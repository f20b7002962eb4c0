"""Models saved by the code of before the package re-layout (issue 27) still load, with and without the package.

`tests/fixtures/saved_before_layout/` was written by the flat-package code of commit 7d2a952: two tiny multi-encoders
(BERT 32, RoBERTa 40, DistilBERT 24 members of 2 layers each) with their tokenizer and the code files that
`save_pretrained` shipped, and `reference_logits.json`, the logits those models gave then.
"""

import json
import os

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

import hf_multiencoder  # noqa: F401  (registers the Auto classes)
from hf_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderTokenizer,
)
from hf_multiencoder.testing_utils import run_without_package

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "saved_before_layout")
REFERENCE = json.load(open(os.path.join(FIXTURES, "reference_logits.json")))
CASES = {  # folder -> (Auto class, package class, pre-split words?)
    "seq-cls-dme": (AutoModelForSequenceClassification, MultiEncoderForSequenceClassification, False),
    "token-cls-concat": (AutoModelForTokenClassification, MultiEncoderForTokenClassification, True),
}


def _batch(tokenizer, split: bool):
    texts = REFERENCE["texts"]
    return tokenizer([t.split() for t in texts] if split else texts, padding=True, return_tensors="pt",
                     is_split_into_words=split)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loads_with_the_package(name):
    auto_cls, cls, split = CASES[name]
    folder = os.path.join(FIXTURES, name)
    model = auto_cls.from_pretrained(folder).eval()
    assert type(model) is cls  # the package's class, not the folder's copy
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert isinstance(tokenizer, MultiEncoderTokenizer)
    with torch.no_grad():
        logits = model(**_batch(tokenizer, split)).logits
    torch.testing.assert_close(logits, torch.tensor(REFERENCE[name]), atol=1e-6, rtol=1e-4)


@pytest.mark.slow  # a subprocess
@pytest.mark.parametrize("name", sorted(CASES))
def test_loads_with_trust_remote_code_without_the_package(name, tmp_path):
    auto_cls, _, split = CASES[name]
    folder = os.path.join(FIXTURES, name)
    result = run_without_package(f"""
        import json
        import torch
        from transformers import {auto_cls.__name__}, AutoTokenizer
        m = {auto_cls.__name__}.from_pretrained({folder!r}, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=True)
        texts = {REFERENCE["texts"]!r}
        b = t([s.split() for s in texts] if {split!r} else texts, padding=True, return_tensors="pt",
              is_split_into_words={split!r})
        with torch.no_grad():
            logits = m(**b).logits.tolist()
        print(json.dumps({{"model": type(m).__module__, "logits": logits}}))
    """, tmp_path)
    assert result["model"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(result["logits"]), torch.tensor(REFERENCE[name]), atol=1e-6, rtol=1e-4)
