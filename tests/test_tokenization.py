"""MultiEncoderTokenizer and the collator: each member encodes in its own format and is padded to its own length."""

import pytest
import torch
from transformers import AutoTokenizer

from hf_multiencoder import MultiEncoderDataCollator, MultiEncoderTokenizer
from hf_multiencoder.models.tokenization_multiencoder import pad_rows


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths)


def test_each_member_encodes_with_its_own_tokenizer(tiny_paths, tokenizer):
    enc = tokenizer("the cat sat on the mat")
    for i, path in enumerate(tiny_paths):
        own = AutoTokenizer.from_pretrained(path)("the cat sat on the mat")
        assert enc["input_ids"][i] == own["input_ids"]
    assert len(set(map(tuple, enc["input_ids"]))) == 3  # three different vocabularies


def test_sentence_pairs_follow_each_members_format(tiny_paths, tokenizer):
    enc = tokenizer("the cat", text_pair="a dog")
    bert, roberta = (AutoTokenizer.from_pretrained(p) for p in tiny_paths[:2])
    assert enc["input_ids"][0] == bert("the cat", "a dog")["input_ids"]
    assert enc["token_type_ids"][0] == bert("the cat", "a dog")["token_type_ids"]
    assert 1 in enc["token_type_ids"][0]
    assert enc["input_ids"][1] == roberta("the cat", "a dog")["input_ids"]
    assert enc["input_ids"][1].count(roberta.sep_token_id) == 3  # <s> A </s></s> B </s>
    assert set(enc["token_type_ids"][1]) == {0}  # RoBERTa's tokenizer returns none: zeros stand in


def test_batches_are_example_major_without_tensors(tokenizer):
    enc = tokenizer(["the cat", "a dog sat"])
    assert len(enc["input_ids"]) == 2 and len(enc["input_ids"][0]) == 3


def test_tensors_are_member_major_each_padded_to_its_own_longest(tokenizer):
    enc = tokenizer(["the cat", "somebody just left quickly"], padding=True, return_tensors="pt")
    lengths = [t.shape[1] for t in enc["input_ids"]]
    assert all(t.shape[0] == 2 for t in enc["input_ids"])
    assert len(set(lengths)) > 1, "members split differently, so their padded lengths differ"
    for i, (ids, mask) in enumerate(zip(enc["input_ids"], enc["attention_mask"])):
        assert ids.shape == mask.shape
        assert mask[1].all()  # the longest row of every member has no padding
        pad = tokenizer.tokenizers[i].pad_token_id
        assert (ids[0][mask[0] == 0] == pad).all()


def test_max_length_per_member(tokenizer):
    enc = tokenizer(["somebody just left quickly"], truncation=True, max_length=[4, 6, 8], return_tensors="pt")
    assert [t.shape[1] for t in enc["input_ids"]] == [4, 6, 8]
    with pytest.raises(ValueError, match="`max_length` has 2 values for 3 member encoders"):
        tokenizer("a", max_length=[4, 6])


def test_collator_pads_each_member_and_labels(tokenizer):
    features = [dict(tokenizer(t), label=lab) for t, lab in [("the cat", 0), ("somebody just left quickly", 1)]]
    batch = MultiEncoderDataCollator(tokenizer)(features)
    assert batch["labels"].tolist() == [0, 1] and batch["labels"].dtype == torch.long
    for i in range(3):
        longest = max(len(f["input_ids"][i]) for f in features)
        assert batch["input_ids"][i].shape == (2, longest)
    reg = MultiEncoderDataCollator(tokenizer)([dict(features[0], label=0.5), dict(features[1], label=3.0)])
    assert reg["labels"].dtype == torch.float


def test_collator_rejects_missing_member_inputs(tokenizer):
    feature = dict(tokenizer("the cat"))
    feature["input_ids"] = feature["input_ids"][:2]
    with pytest.raises(ValueError, match="inputs for 2 member encoders, but this tokenizer has 3"):
        MultiEncoderDataCollator(tokenizer)([feature])
    with pytest.raises(ValueError, match="no `input_ids`"):
        MultiEncoderDataCollator(tokenizer)([{"label": 1}])


def test_batch_to_moves_member_lists(tokenizer):
    enc = tokenizer(["the cat"], return_tensors="pt").to("cpu")
    assert all(isinstance(t, torch.Tensor) for t in enc["input_ids"])


def test_save_and_load(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["tokenizer_0", "tokenizer_1", "tokenizer_2"]
    again = MultiEncoderTokenizer.from_pretrained(tmp_path)
    assert again.encoder_names == tokenizer.encoder_names
    text = ["somebody just left", "the cat"]
    assert again(text)["input_ids"] == tokenizer(text)["input_ids"]
    with pytest.raises(ValueError, match="no MultiEncoderTokenizer"):
        (tmp_path / "plain").mkdir()
        AutoTokenizer.from_pretrained(tokenizer.tokenizers[0].name_or_path).save_pretrained(tmp_path / "plain")
        MultiEncoderTokenizer.from_pretrained(tmp_path / "plain")


def test_pad_rows_lists_and_tensors_of_any_shape():
    """The one padding routine: lists, 1-D tensors and the pipeline's (1, seq) rows alike, to the longest row (or at
    least `length`), rounded up to `multiple_of`."""
    expected = torch.tensor([[1, 2, 3], [4, 0, 0]])
    assert torch.equal(pad_rows([[1, 2, 3], [4]], 0), expected)
    assert torch.equal(pad_rows([torch.tensor([1, 2, 3]), torch.tensor([4])], 0), expected)
    assert torch.equal(pad_rows([torch.tensor([[1, 2, 3]]), torch.tensor([[4]])], 0), expected)
    assert pad_rows([[1], [2, 3]], 9, length=3, as_tensor=False) == [[1, 9, 9], [2, 3, 9]]
    assert pad_rows([[1, 2, 3, 4, 5]], 0, multiple_of=4).shape == (1, 8)


def test_member_fingerprints_follow_the_tokenizers(tiny_paths):
    """Computed once (check_model runs at every `encode`), recomputed when a member tokenizer changes."""
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    first = tokenizer.member_fingerprints()
    assert tokenizer.member_fingerprints() == first
    tokenizer.tokenizers[0].add_tokens(["zzqx"])
    again = tokenizer.member_fingerprints()
    assert again[0] != first[0] and again[1] == first[1]
    assert again == MultiEncoderTokenizer(tokenizer.tokenizers).member_fingerprints()  # the same as uncached


def test_the_fingerprint_cache_leaves_the_datasets_hash_alone(tiny_paths):
    """The cache is keyed by object ids: were it pickled, each process of a torchrun would hash the tokenizer (and so
    every `Dataset.map` using it) differently and miss the cache files another process wrote."""
    from datasets.fingerprint import Hasher

    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    before = Hasher.hash(tokenizer)
    tokenizer.member_fingerprints()
    assert "_fingerprints" in tokenizer.__dict__
    assert Hasher.hash(tokenizer) == before
    tokenizer.tokenizers[0].add_tokens(["zzqx"])
    assert Hasher.hash(tokenizer) != before  # a real change still changes the hash
