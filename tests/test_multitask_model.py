"""MultiEncoderForMultiTask on tiny random members (BERT 32, RoBERTa 40, DistilBERT 24): a head per task, a fusion per
level, losses, gradients, prediction, save/load and remote code, and the bad inputs."""

import json
import os

import pytest
import torch
from torch.nn import functional as F
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_multiencoder import MultiEncoderForMultiTask, MultiEncoderMultiTaskConfig, MultiEncoderTokenizer
from hf_multiencoder.testing_utils import run_without_package

NAMES = ["bert", "roberta", "distil"]
TASKS = {
    "ner": {"type": "token", "id2label": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]},
    "acc": {"type": "sequence", "id2label": ["unacceptable", "acceptable"]},
    "sts": {"type": "regression"},
    "topics": {"type": "multilabel", "id2label": ["animals", "places", "people"]},
}
SENTENCES = ["He can will go", "Somebody just left the new york cat.", "the dog sat"]
WORDS = [["john", "smith", "went", "to", "paris"], ["the", "cat", "sat"], ["she", "likes", "new", "york"]]


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=NAMES)


@pytest.fixture(scope="module")
def model(tiny_paths):
    torch.manual_seed(0)
    return MultiEncoderForMultiTask.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme", tasks=TASKS).eval()


@pytest.fixture(scope="module")
def sentences(tokenizer):
    return tokenizer(SENTENCES, padding=True, return_tensors="pt")


@pytest.fixture(scope="module")
def words(tokenizer):
    return tokenizer(WORDS, is_split_into_words=True, padding=True, return_tensors="pt")


def test_config_normalises_tasks_and_round_trips(tmp_path):
    config = MultiEncoderMultiTaskConfig(tasks={"a": {"type": "sequence", "id2label": {"0": "x", "1": "y"}},
                                                "b": {"type": "regression"}, "c": {"type": "token", "num_labels": 3}})
    assert config.tasks["a"] == {"type": "sequence", "num_labels": 2, "id2label": {0: "x", 1: "y"}}
    assert config.tasks["b"]["num_labels"] == 1
    assert config.tasks["c"]["id2label"] == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert config.task_problem_type("a") == "single_label_classification"
    assert config.task_label2id("a") == {"x": 0, "y": 1}
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is MultiEncoderMultiTaskConfig and loaded.tasks == config.tasks
    assert list(loaded.tasks) == ["a", "b", "c"]  # in their order, though config.json sorts its keys
    assert list(MultiEncoderMultiTaskConfig(tasks={"z": {"type": "regression"}, "a": {"type": "regression"}})
                .to_dict()["tasks"][0].values())[0] == "z"
    assert MultiEncoderMultiTaskConfig().tasks == {}  # constructible without arguments (save_pretrained diffs)


@pytest.mark.parametrize("tasks, message", [
    ({"a": {"type": "ranking", "num_labels": 2}}, "unknown type 'ranking'"),
    ({"a": {"type": "sequence"}}, "give `id2label`"),
    ({"a": {"type": "sequence", "num_labels": 3, "id2label": ["x", "y"]}}, "num_labels=3 but id2label has 2"),
    ({"a": {"type": "token", "id2label": ["O"]}}, "at least two labels"),
    ({"a.b": {"type": "regression"}}, "Task name 'a.b'"),
    ({"a": {"type": "sequence", "labels": ["x", "y"]}}, "unknown key"),
    ({"a": ["x", "y"]}, "must be a mapping"),
])
def test_bad_task_configs(tasks, message):
    with pytest.raises(ValueError, match=message):
        MultiEncoderMultiTaskConfig(tasks=tasks)


def test_needs_a_task(tiny_paths):
    with pytest.raises(ValueError, match="at least one task"):
        MultiEncoderForMultiTask.from_encoders(tiny_paths[:1], tasks={})


def test_a_batch_per_task_gives_its_shapes_and_loss(model, sentences, words):
    acc = model(**sentences, task="acc", labels=torch.tensor([0, 1, 1]))
    assert acc.logits.shape == (3, 2) and acc.fusion_weights.shape == (3, 3)
    torch.testing.assert_close(acc.loss, F.cross_entropy(acc.logits, torch.tensor([0, 1, 1])))
    scores = torch.tensor([0.5, 3.0, 4.5])
    sts = model(**sentences, task="sts", labels=scores)
    assert sts.logits.shape == (3, 1)
    torch.testing.assert_close(sts.loss, F.mse_loss(sts.logits.squeeze(-1), scores))
    multi_hot = torch.tensor([[1.0, 0, 0], [0, 1, 1], [1, 0, 0]])
    topics = model(**sentences, task="topics", labels=multi_hot)
    assert topics.logits.shape == (3, 3)
    torch.testing.assert_close(topics.loss, F.binary_cross_entropy_with_logits(topics.logits, multi_hot))
    # the sentence tasks read the same fused vector through different heads
    torch.testing.assert_close(acc.pooler_output, sts.pooler_output)
    tags = torch.full((3, 5), -100)
    tags[0, :5] = torch.tensor([1, 2, 0, 0, 3])
    tags[1, :3] = 0
    tags[2, :4] = torch.tensor([0, 0, 3, 4])
    ner = model(**words, task="ner", labels=tags)
    assert ner.logits.shape == (3, 5, 5) and ner.fusion_weights.shape == (3, 5, 3)
    assert ner.word_mask.tolist() == [[1] * 5, [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]
    torch.testing.assert_close(ner.loss, F.cross_entropy(ner.logits.reshape(-1, 5), tags.reshape(-1)))


def test_gradients_reach_only_the_active_head_and_the_shared_parts(tiny_paths, sentences, words):
    torch.manual_seed(0)
    model = MultiEncoderForMultiTask.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme", tasks=TASKS)
    for task, batch, labels in (("acc", sentences, torch.tensor([0, 1, 1])),
                                ("ner", words, torch.zeros(3, 5, dtype=torch.long))):
        model.zero_grad(set_to_none=True)
        model(**batch, task=task, labels=labels).loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        for name, grad in grads.items():
            if name.startswith("heads."):
                assert (grad is not None) == name.startswith(f"heads.{task}."), name
        level, other = ("word_fusion", "fusion") if task == "ner" else ("fusion", "word_fusion")
        assert all(g is not None and g.abs().sum() > 0 for n, g in grads.items() if f".{level}." in n)
        assert all(g is None for n, g in grads.items() if f"multiencoder.{other}." in n)
        for i in range(3):  # every member gets gradients from every task
            member = [g for n, g in grads.items() if n.startswith(f"multiencoder.encoders.{i}.") and g is not None]
            assert member and sum(g.abs().sum() for g in member) > 0


def test_one_level_models_build_one_fusion(tiny_paths, words):
    only_tokens = MultiEncoderForMultiTask.from_encoders(tiny_paths, encoder_names=NAMES, tasks={"ner": TASKS["ner"]})
    assert only_tokens.multiencoder.word_level and only_tokens.multiencoder.word_fusion is None
    assert only_tokens(**words).logits.shape == (3, 5, 5)  # one task: `task` may be left out
    only_sentences = MultiEncoderForMultiTask.from_encoders(tiny_paths[:2], tasks={"sts": TASKS["sts"]})
    assert only_sentences.multiencoder.word_fusion is None


def test_bad_inputs(model, sentences, words):
    with pytest.raises(ValueError, match="Unknown task 'pos'; this model's tasks are: ner, acc, sts, topics"):
        model(**sentences, task="pos")
    with pytest.raises(ValueError, match=r"mixes the tasks \['acc', 'sts'\]"):
        model(**sentences, task=["acc", "sts", "acc"])
    assert model(**sentences, task=["acc"] * 3).logits.shape == (3, 2)  # one task gathered per example is fine
    with pytest.raises(ValueError, match="Pass `task=`"):
        model(**sentences)
    with pytest.raises(ValueError, match="Task 'ner' tags words"):
        model(**sentences, task="ner")
    with pytest.raises(ValueError, match="Task 'acc' labels sentences"):
        model(**words, task="acc")


def test_predict_each_task_with_fusion_weights(model, tokenizer):
    acc = model.predict("acc", tokenizer, SENTENCES)
    assert acc["Predictions"][0] in {"unacceptable", "acceptable"} and len(acc["fusion_weights"]) == 3
    assert set(acc["fusion_weights"][0]) == set(NAMES)
    expected = model(**tokenizer(SENTENCES[:1], return_tensors="pt"), task="sts").logits.item()
    assert model.predict("sts", tokenizer, SENTENCES[:1])["Predictions"][0] == pytest.approx(expected, abs=1e-5)
    topics = model.predict("topics", tokenizer, SENTENCES)["Predictions"]
    assert len(topics[0]) == 3 and all(0 < p < 1 for p in topics[0])
    tagged = model.predict("ner", tokenizer, ["john smith went to paris"])
    assert len(tagged[0]["tags"]) == 5 and len(tagged[0]["fusion_weights"]) == 5
    with pytest.raises(ValueError, match="takes no `text_pairs`"):
        model.predict("ner", tokenizer, ["a b"], text_pairs=["c"])


def test_save_load_auto_classes_and_task_labels(model, tokenizer, sentences, words, tmp_path):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = json.load(open(tmp_path / "config.json"))
    assert config["auto_map"] == {"AutoConfig": "configuration_multiencoder_multitask.MultiEncoderMultiTaskConfig",
                                  "AutoModel": "modeling_multiencoder_multitask.MultiEncoderForMultiTask"}
    assert {"configuration_multiencoder_multitask.py", "modeling_multiencoder_multitask.py",
            "modeling_multiencoder.py", "fusion_multiencoder.py"} <= set(os.listdir(tmp_path))
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert loaded.config.task_names == list(TASKS) == list(loaded.heads)  # "topics" after "sts", as built
    assert type(loaded) is MultiEncoderForMultiTask and isinstance(AutoTokenizer.from_pretrained(tmp_path),
                                                                    MultiEncoderTokenizer)
    for task, batch in (("acc", sentences), ("topics", sentences), ("ner", words)):
        torch.testing.assert_close(loaded(**batch, task=task).logits, model(**batch, task=task).logits)
    # the same labels load; other labels (or another order) for a saved head are refused, also through AutoModel
    MultiEncoderForMultiTask.from_pretrained(tmp_path, tasks=TASKS)
    swapped = {**TASKS, "acc": {"type": "sequence", "id2label": ["acceptable", "unacceptable"]}}
    with pytest.raises(ValueError, match="Task 'acc': the saved head predicts the labels"):
        MultiEncoderForMultiTask.from_pretrained(tmp_path, tasks=swapped)
    with pytest.raises(ValueError, match="Task 'acc': the saved head predicts the labels"):
        AutoModel.from_pretrained(tmp_path, tasks=swapped)
    with pytest.raises(ValueError, match="was saved as a token task"):
        MultiEncoderForMultiTask.from_pretrained(tmp_path, tasks={**TASKS, "ner": {"type": "sequence",
                                                                                  "num_labels": 5}})
    # a new task gets a new head next to the trained ones
    grown = MultiEncoderForMultiTask.from_pretrained(tmp_path, tasks={**TASKS, "new": {"type": "regression"}}).eval()
    assert list(grown.heads) == [*TASKS, "new"]
    torch.testing.assert_close(grown(**sentences, task="acc").logits, model(**sentences, task="acc").logits)


@pytest.mark.slow  # a subprocess
def test_trust_remote_code_without_the_package(model, tokenizer, sentences, words, tmp_path):
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    result = run_without_package(f"""
        import json, torch
        from transformers import AutoModel, AutoTokenizer
        m = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        s = t({SENTENCES!r}, padding=True, return_tensors="pt")
        w = t({WORDS!r}, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = {{"acc": m(**s, task="acc").logits.tolist(), "ner": m(**w, task="ner").logits.tolist()}}
        print(json.dumps({{"model": type(m).__module__, "logits": out,
                          "predict": m.predict("acc", t, {SENTENCES[:1]!r})["Predictions"]}}))
    """, tmp_path)
    assert result["model"].startswith("transformers_modules.")
    with torch.no_grad():
        torch.testing.assert_close(torch.tensor(result["logits"]["acc"]), model(**sentences, task="acc").logits)
        torch.testing.assert_close(torch.tensor(result["logits"]["ner"]), model(**words, task="ner").logits)
    assert result["predict"] == model.predict("acc", tokenizer, SENTENCES[:1])["Predictions"]
