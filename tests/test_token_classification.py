"""Token classification across members whose tokenizers split words differently."""

import json
import textwrap

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from hf_multiencoder import MultiEncoderForTokenClassification
from hf_multiencoder.models.modeling_multiencoder import pool_words, tags_to_spans, word_tags
from hf_multiencoder.testing_utils import run_without_package

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
ID2LABEL = dict(enumerate(LABELS))


def build(tiny_paths, **kwargs):
    torch.manual_seed(0)
    return MultiEncoderForTokenClassification.from_encoders(
        tiny_paths, num_labels=len(LABELS), id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}, **kwargs)


def test_alignment_on_hand_checked_sentence(tiny_paths, tokenizer):
    words = ["John", "went", "2024", ","]
    enc = tokenizer(words, is_split_into_words=True)
    bert, roberta, distil = (AutoTokenizer.from_pretrained(p) for p in tiny_paths)
    # BERT knows "john" and "went" whole; the number splits into 2 ##0 ##2 ##4
    assert bert.convert_ids_to_tokens(enc["input_ids"][0]) == ["[CLS]", "john", "went", "2", "##0", "##2", "##4",
                                                               ",", "[SEP]"]
    assert enc["word_ids"][0] == [-1, 0, 1, 2, 2, 2, 2, 3, -1]
    # DistilBERT's vocabulary has neither word: characters
    assert distil.convert_ids_to_tokens(enc["input_ids"][2])[1:5] == ["j", "##o", "##h", "##n"]
    assert enc["word_ids"][2] == [-1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, -1]
    # RoBERTa byte-level BPE: each word's pieces, as its own tokenizer splits the word alone
    per_word = [len(roberta([w], is_split_into_words=True, add_special_tokens=False)["input_ids"]) for w in words]
    expected = [-1] + [i for i, n in enumerate(per_word) for _ in range(n)] + [-1]
    assert enc["word_ids"][1] == expected
    assert enc["word_mask"] == [1, 1, 1, 1]


def test_word_pooling_first_and_mean_by_hand():
    states = torch.arange(6, dtype=torch.float).view(1, 6, 1).repeat(1, 1, 2)  # token t has value t
    word_ids = torch.tensor([[-1, 0, 1, 1, 1, -1]])
    first, present = pool_words("first", states, word_ids, num_words=3)
    assert first[0, :, 0].tolist() == [1.0, 2.0, 0.0]
    assert present.tolist() == [[True, True, False]]
    mean, _ = pool_words("mean", states, word_ids, num_words=3)
    assert mean[0, :, 0].tolist() == [1.0, 3.0, 0.0]


@pytest.mark.parametrize("fusion", ["concat", "dme", "cdme", "mean"])
@pytest.mark.parametrize("word_pooling", ["first", "mean"])
def test_shapes(tiny_paths, tokenizer, fusion, word_pooling):
    model = build(tiny_paths, fusion=fusion, word_pooling=word_pooling).eval()
    batch = tokenizer([["John", "Smith", "went", "to", "Paris"], ["somebody", "left"]], is_split_into_words=True,
                      return_tensors="pt")
    out = model(**batch)
    assert out.logits.shape == (2, 5, len(LABELS))
    assert out.word_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    if fusion in ("dme", "cdme"):
        assert out.fusion_weights.shape == (2, 5, 3)
        torch.testing.assert_close(out.fusion_weights.sum(-1), torch.ones(2, 5))
    else:
        assert out.fusion_weights is None


def test_word_cut_off_by_one_member(tiny_paths, tokenizer):
    """BERT (max_length 5) keeps [CLS] john went 2 [SEP]: it has no vector for ','; the others carry that word."""
    model = build(tiny_paths, fusion="dme").eval()
    batch = tokenizer([["John", "went", "2024", ","]], is_split_into_words=True, truncation=True,
                      max_length=[5, 64, 64], return_tensors="pt")
    assert batch["word_ids"][0].tolist() == [[-1, 0, 1, 2, -1]]
    out = model(**batch)
    weights = out.fusion_weights[0]
    assert weights[3, 0] == 0, "a member that cut the word off gets no weight for it"
    torch.testing.assert_close(weights[3, 1:].sum(), torch.tensor(1.0))
    assert (weights[:3, 0] > 0).all()
    assert out.word_mask.tolist() == [[1, 1, 1, 1]]


def test_word_cut_off_by_every_member_is_ignored(tiny_paths, tokenizer):
    model = build(tiny_paths, fusion="dme").eval()
    batch = tokenizer([["John", "went", "2024", ","]], is_split_into_words=True, truncation=True, max_length=4,
                      return_tensors="pt")
    out = model(**batch, labels=torch.tensor([[1, 0, 0, 3]]))
    assert out.word_mask[0, 3] == 0
    ignored = model(**batch, labels=torch.tensor([[1, 0, 0, -100]]))
    torch.testing.assert_close(out.loss, ignored.loss)
    assert model.predict_tags(tokenizer, [["John", "went", "2024", ","]], max_length=4)[0]["tags"][3] == "O"


def test_training_lowers_loss(tiny_paths, tokenizer):
    model = build(tiny_paths, fusion="dme").train()
    sentences = [["John", "Smith", "went", "to", "Paris"], ["she", "went", "to", "New", "York"]] * 4
    tags = [[1, 2, 0, 0, 3], [0, 0, 0, 3, 4]] * 4
    batch = tokenizer(sentences, is_split_into_words=True, return_tensors="pt")
    labels = torch.tensor(tags)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    result = model.predict_tags(tokenizer, ["John Smith went to Paris"])[0]
    assert result["words"] == ["John", "Smith", "went", "to", "Paris"]
    assert len(result["tags"]) == 5 and len(result["fusion_weights"]) == 5
    assert set(result["fusion_weights"][0]) == {str(p) for p in tiny_paths}


def test_tags_to_spans():
    words = ["John", "Smith", "went", "to", "New", "York", "and", "Paris"]
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O", "I-LOC"]
    assert tags_to_spans(words, tags) == [
        {"type": "PER", "start": 0, "end": 2, "text": "John Smith"},
        {"type": "LOC", "start": 4, "end": 6, "text": "New York"},
        {"type": "LOC", "start": 7, "end": 8, "text": "Paris"},
    ]


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_save_load_and_remote_code(tiny_paths, tokenizer, tmp_path):
    model = build(tiny_paths, fusion="cdme").eval()
    model.save_pretrained(tmp_path / "ner")
    tokenizer.save_pretrained(tmp_path / "ner")
    config = json.load(open(tmp_path / "ner" / "config.json"))
    assert config["auto_map"]["AutoModelForTokenClassification"] == \
        "modeling_multiencoder.MultiEncoderForTokenClassification"
    batch = tokenizer([["John", "went", "to", "Paris"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        ref = model(**batch).logits
    again = AutoModelForTokenClassification.from_pretrained(tmp_path / "ner").eval()
    torch.testing.assert_close(again(**batch).logits, ref, atol=1e-5, rtol=0)

    folder = str(tmp_path / "ner")
    code = textwrap.dedent(f"""
        import json
        import torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer
        m = AutoModelForTokenClassification.from_pretrained({folder!r}, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=True)
        b = t([["John", "went", "to", "Paris"]], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            tags = m.predict_tags(t, ["John went"])[0]["tags"]
            print(json.dumps({{"logits": m(**b).logits.tolist(), "tags": tags}}))
    """)
    result = run_without_package(code, tmp_path)
    torch.testing.assert_close(torch.tensor(result["logits"]), ref, atol=1e-5, rtol=0)
    assert len(result["tags"]) == 2


def test_word_tags_one_tag_per_kept_word():
    id2label = {0: "O", 1: "B-PER", 2: "I-PER"}
    logits = torch.tensor([[[0, 5, 0], [0, 0, 5], [0, 5, 0], [5, 0, 0]],
                           [[0, 0, 5], [5, 0, 0], [0, 0, 5], [0, 5, 0]]], dtype=torch.float)
    seen = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]])  # word 2 of sentence 0: every member cut it off
    keep = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])  # 3 and 2 real words; the rest is padding
    assert word_tags(logits, seen, keep, id2label) == [["B-PER", "I-PER", "O"], ["I-PER", "O"]]
