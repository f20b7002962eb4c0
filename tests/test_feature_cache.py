"""The frozen-member feature cache: same logits as running the members, reused while nothing changed, invalidated
when the data or a member's weights change, and a Trainer run on it trains everything that is not frozen."""

import pytest
import torch
from datasets import Dataset, load_from_disk
from transformers import Trainer, TrainingArguments

from hf_multiencoder import MultiEncoderDataCollator, MultiEncoderForSequenceClassification
from hf_multiencoder.data.feature_cache import CachedFeaturesCollator, add_member_features, select_pooling
from hf_multiencoder.training.optimization import freeze_encoders

SENTENCES = ["the cat sat on the mat", "he went to paris", "a cat runs quickly", "somebody just left new york",
             "she can go", "john smith likes the dog", "it was 2024", "the dog sat on it"]
LABELS = [1, 0, 1, 0, 1, 1, 0, 1]


def tokenize(tokenizer, sentences, labels):
    ds = Dataset.from_dict({"sentence": sentences, "label": labels})
    return ds.map(lambda b: dict(tokenizer(b["sentence"], truncation=True, max_length=32)), batched=True,
                  remove_columns=["sentence"])


@pytest.fixture(scope="module")
def dataset(tokenizer):
    return tokenize(tokenizer, SENTENCES * 2, LABELS * 2)


def build(tiny_paths, fusion="dme", frozen=(1,)):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion=fusion, num_labels=2)
    freeze_encoders(model, list(frozen))
    return model


class CallCounter:
    """Counts forward calls of a module through a forward hook."""

    def __init__(self, module):
        self.calls = 0
        self.handle = module.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        self.calls += 1


@pytest.mark.parametrize("fusion", ["concat", "dme", "mean"])
def test_cached_logits_equal_uncached(tiny_paths, tokenizer, dataset, tmp_path, fusion):
    model = build(tiny_paths, fusion=fusion, frozen=(1,))
    cached = add_member_features(dataset, model, members=[1], batch_size=3, cache_dir=tmp_path)
    assert [len(v) for v in cached[0]["encoder_features"]] == [0, 40, 0]  # only the RoBERTa-40 member is cached

    model.eval()
    rows = list(range(len(SENTENCES)))
    plain = MultiEncoderDataCollator(tokenizer)([dataset[i] for i in rows])
    batch = CachedFeaturesCollator(tokenizer)([cached[i] for i in rows])
    assert batch["input_ids"][1] is None and batch["attention_mask"][1] is None
    assert batch["encoder_features"][0] is None and batch["encoder_features"][2] is None
    assert batch["encoder_features"][1].shape == (len(rows), 40)
    counter = CallCounter(model.multiencoder.encoders[1])
    with torch.no_grad():
        expected = model(**plain).logits
        calls_uncached = counter.calls
        got = model(**batch).logits
    assert calls_uncached == 1 and counter.calls == 1, "the cached member must not run"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_all_members_cached_runs_no_member(tiny_paths, tokenizer, dataset, tmp_path):
    model = build(tiny_paths, frozen=(0, 1, 2)).eval()
    cached = add_member_features(dataset, model, members=[0, "1", tiny_paths[2]], cache_dir=tmp_path)
    counters = [CallCounter(m) for m in model.multiencoder.encoders]
    with torch.no_grad():
        got = model(**CachedFeaturesCollator(tokenizer)([cached[i] for i in range(4)])).logits
        expected = model(**MultiEncoderDataCollator(tokenizer)([dataset[i] for i in range(4)])).logits
    assert [c.calls for c in counters] == [1, 1, 1]  # once each, for the uncached reference only
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_cache_is_reused_and_invalidated(tiny_paths, tokenizer, dataset, tmp_path):
    model = build(tiny_paths, frozen=(1,))
    counter = CallCounter(model.multiencoder.encoders[1])
    first = add_member_features(dataset, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert counter.calls == 4  # 16 examples in batches of 4

    again = add_member_features(dataset, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert counter.calls == 4, "the second call must load the cache file, not run the member"
    assert again._fingerprint == first._fingerprint
    assert again[3]["encoder_features"] == first[3]["encoder_features"]

    # the member's weights change: recomputed, different vectors
    with torch.no_grad():
        model.multiencoder.encoders[1].encoder.layer[-1].output.dense.bias.add_(0.5)
    changed = add_member_features(dataset, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert counter.calls == 8
    assert changed._fingerprint != first._fingerprint
    assert changed[3]["encoder_features"][1] != first[3]["encoder_features"][1]

    # the data change: recomputed
    other = tokenize(tokenizer, SENTENCES[::-1] * 2, LABELS[::-1] * 2)
    add_member_features(other, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert counter.calls == 12
    # a member that is not cached does not take part in the fingerprint
    with torch.no_grad():
        model.multiencoder.encoders[0].embeddings.word_embeddings.weight.mul_(2.0)
    add_member_features(other, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert counter.calls == 12


def test_dataset_on_disk_uses_datasets_own_cache(tiny_paths, dataset, tmp_path):
    dataset.save_to_disk(str(tmp_path / "ds"))
    on_disk = load_from_disk(str(tmp_path / "ds"))
    model = build(tiny_paths, frozen=(2,))
    counter = CallCounter(model.multiencoder.encoders[2])
    add_member_features(on_disk, model, members=[2], batch_size=8)
    assert counter.calls == 2
    reused = add_member_features(on_disk, model, members=[2], batch_size=8)
    assert counter.calls == 2
    assert reused.cache_files and str(tmp_path / "ds") in reused.cache_files[0]["filename"]


def test_trainer_with_cache_trains_the_rest(tiny_paths, tokenizer, dataset, tmp_path):
    model = build(tiny_paths, frozen=(1, 2))
    cached = add_member_features(dataset, model, members=[1, 2], cache_dir=tmp_path / "cache")
    counters = [CallCounter(m) for m in model.multiencoder.encoders]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, learning_rate=1e-3,
                             max_steps=4, report_to=[], save_strategy="no", use_cpu=True, seed=0,
                             disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=cached, eval_dataset=cached,
                      data_collator=CachedFeaturesCollator(tokenizer))
    trainer.train()
    assert [c.calls for c in counters[1:]] == [0, 0], "cached members ran during training"
    assert counters[0].calls == 4
    params = dict(model.named_parameters())
    for name in ("multiencoder.encoders.0.encoder.layer.0.attention.self.query.weight",
                 "multiencoder.fusion.projections.1.weight", "multiencoder.fusion.scorer.weight", "classifier.weight"):
        assert not torch.equal(params[name].detach(), before[name]), f"{name} did not train"
    for name, p in params.items():
        if name.startswith(("multiencoder.encoders.1.", "multiencoder.encoders.2.")):
            assert torch.equal(p.detach(), before[name]), f"frozen {name} changed"
    metrics = trainer.evaluate()
    assert "eval_loss" in metrics and [c.calls for c in counters[1:]] == [0, 0]


def test_errors(tiny_paths, tokenizer, dataset):
    with pytest.raises(ValueError, match="cdme"):
        add_member_features(dataset, build(tiny_paths, fusion="cdme", frozen=(1,)), members=[1])
    with pytest.raises(ValueError, match=r"Member 0 .* trainable.*freeze_encoders\(model, \[0\]\)"):
        add_member_features(dataset, build(tiny_paths, frozen=(1,)), members=[0, 1])
    with pytest.raises(ValueError, match="No member named"):
        add_member_features(dataset, build(tiny_paths), members=["nope"])
    with pytest.raises(ValueError, match="empty"):
        add_member_features(dataset, build(tiny_paths), members=[])
    model = build(tiny_paths, frozen=(1,))
    cached = add_member_features(dataset, model, members=[1])
    mixed = [cached[0], dict(cached[1], encoder_features=[[], [], []])]
    with pytest.raises(ValueError, match="some examples"):
        CachedFeaturesCollator(tokenizer)(mixed)


def test_several_processes_need_a_shared_cache_file(tiny_paths, dataset, monkeypatch):
    """Under several processes one process per machine computes the features and the others read its file: an
    in-memory dataset without `cache_dir` has no file to share, which is an error saying what to give."""
    from hf_multiencoder.data import feature_cache

    monkeypatch.setattr(feature_cache, "_distributed_state", lambda: object())  # as under torchrun, 2 processes
    with pytest.raises(ValueError, match="Under several processes .* give `cache_dir`"):
        add_member_features(dataset, build(tiny_paths, frozen=(1,)), members=[1])


def test_several_poolings_from_one_pass(tiny_paths, tokenizer, dataset, tmp_path):
    """`poolings=` stores cls, mean and last4 from one pass of each member; each selected pooling gives the logits a
    model with that pooling computes uncached."""
    probe = build(tiny_paths, frozen=(0, 1, 2))
    counters = [CallCounter(m) for m in probe.multiencoder.encoders]
    cached = add_member_features(dataset, probe, members=[0, 1, 2], batch_size=8, cache_dir=tmp_path,
                                 poolings=["cls", "mean", "last4"])
    assert [c.calls for c in counters] == [2, 2, 2]  # 16 examples in batches of 8: one pass per member
    assert {"encoder_features_cls", "encoder_features_mean", "encoder_features_last4"} <= set(cached.column_names)
    rows = list(range(len(SENTENCES)))
    for pooling in ("cls", "mean", "last4"):
        torch.manual_seed(0)
        model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", pooling=pooling,
                                                                    num_labels=2).eval()
        selected = select_pooling(cached, pooling)
        assert "encoder_features" in selected.column_names
        assert not [c for c in selected.column_names if c.startswith("encoder_features_")]
        width = [len(v) for v in selected[0]["encoder_features"]]
        assert width == ([32 * 4, 40 * 4, 24 * 4] if pooling == "last4" else [32, 40, 24])
        with torch.no_grad():
            expected = model(**MultiEncoderDataCollator(tokenizer)([dataset[i] for i in rows])).logits
            got = model(**CachedFeaturesCollator(tokenizer)([selected[i] for i in rows])).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="No cached features for pooling 'last4_mean'"):
        select_pooling(cached, "last4_mean")
    with pytest.raises(ValueError, match="Unknown pooling 'max'"):
        add_member_features(dataset, probe, members=[0], poolings=["max"])


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_cache_file_is_named_and_rebuilt(tiny_paths, dataset, tmp_path, caplog, damage):
    """A cache file cut off (a kill, a full disk) or overwritten is deleted with a warning naming it and computed
    again; before, every rerun failed inside pyarrow until the file was deleted by hand."""
    model = build(tiny_paths, frozen=(1,))
    first = add_member_features(dataset, model, members=[1], batch_size=4, cache_dir=tmp_path)
    expected = first[3]["encoder_features"]
    del first  # it maps the file: damage a new file in its place, not the mapped pages
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("member-features-")]
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\0" * len(data))
    counter = CallCounter(model.multiencoder.encoders[1])
    with caplog.at_level("WARNING"):
        again = add_member_features(dataset, model, members=[1], batch_size=4, cache_dir=tmp_path)
    assert f"The feature cache file {path} is damaged" in caplog.text
    assert counter.calls == 4  # computed again
    assert again[3]["encoder_features"] == expected
