"""The task registry: one entry per task holds its facts; a user's own task registers from Python and then works
everywhere (loading, tokenization, metrics, run_glue_multi.py)."""

import os

import pytest
from datasets import DatasetDict

import run_glue_multi
from hf_multiencoder import MultiEncoderTokenizer, TaskSpec, get_task, load_task, register_task, tokenize_task
from hf_multiencoder.data.loading import READERS, _rows_to_dataset, register_reader
from hf_multiencoder.data.tasks import METRIC_FAMILIES, TASKS
from hf_multiencoder.training.metrics import compute_task_metrics


def test_every_entry_is_complete():
    for name, spec in TASKS.items():
        assert spec.name == name and spec.display_name, name
        assert spec.metric in METRIC_FAMILIES and spec.main_metric, name
        assert spec.reader in READERS and spec.local_path, name  # every built-in task reads local files
        assert spec.kind == "token" or spec.text_keys in (("sentence1",), ("sentence1", "sentence2")), name
        if spec.hub_id is not None:
            assert spec.hub_columns and len(spec.hub_columns[0]) == len(spec.text_keys), name
    assert get_task("SST-2") is TASKS["sst2"] and get_task(" CoLA ") is TASKS["cola"]  # aliases, case
    assert get_task(TASKS["rte"]) is TASKS["rte"]
    assert TASKS["cola"].metric_display_name == "MCC" and TASKS["stsb"].form == "regression"
    assert TASKS["rte"].form == "pair" and TASKS["wnut17"].form == "token"
    assert TASKS["rte"].task_type == "pair"  # the earlier name still reads


def test_bad_specs():
    with pytest.raises(ValueError, match="kind must be one of"):
        TaskSpec("x", kind="sentence", label_list=["a"])
    with pytest.raises(ValueError, match="label_list for classification"):
        TaskSpec("x")
    with pytest.raises(ValueError, match="none for regression"):
        TaskSpec("x", is_regression=True, label_list=["a"])
    with pytest.raises(ValueError, match="unknown metric family 'bleu'"):
        TaskSpec("x", label_list=["a"], metric="bleu")
    with pytest.raises(ValueError, match="text_keys"):
        TaskSpec("x", text_keys=("text",), label_list=["a"])
    with pytest.raises(ValueError, match="already registered"):
        register_task(TaskSpec("cola", label_list=["a", "b"]))
    with pytest.raises(TypeError, match="TaskSpec"):
        register_task({"name": "x"})


def test_register_a_task_of_your_own(registry, tmp_path, tiny_paths):
    """A new format: one reader and one entry; then loading, tokenization, metrics and the script know the task."""
    folder = tmp_path / "reviews"
    folder.mkdir()
    (folder / "reviews.txt").write_text("good+ a cat sat\nbad- the dog left\ngood+ she likes it\nbad- he went\n" * 4)

    @register_reader("plus_minus")
    def read_plus_minus(spec, path):
        rows = []
        for line in open(os.path.join(path, "reviews.txt")):
            label, _, text = line.strip().partition(" ")
            rows.append((text, spec.label_list.index(label)))
        return DatasetDict({"train": _rows_to_dataset(rows, spec), "validation": _rows_to_dataset(rows[:8], spec)})

    spec = register_task(TaskSpec("reviews", label_list=["bad-", "good+"], reader="plus_minus", local_path="reviews",
                                  display_name="My reviews"), aliases=("my_reviews",))
    data, loaded = load_task("my_reviews", data_dir=str(tmp_path))
    assert loaded is spec and len(data["train"]) == 16 and data["validation"][0] == {"sentence1": "a cat sat",
                                                                                      "label": 1}
    assert compute_task_metrics("reviews", [1, 0], [1, 1]) == {"accuracy": 0.5}
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    tokenized = tokenize_task(data, spec, tokenizer, max_length=16)
    assert set(tokenized["train"].column_names) == {"input_ids", "attention_mask", "token_type_ids", "label", "length"}
    assert tokenized["train"][0]["length"] == max(len(ids) for ids in tokenized["train"][0]["input_ids"])
    # and run_glue_multi.py trains and evaluates it by name
    table = run_glue_multi.main([
        "--encoders", *tiny_paths[:2], "--task_name", "reviews", "--data_dir", str(tmp_path), "--output_dir",
        str(tmp_path / "out"), "--do_train", "--do_eval", "--num_train_epochs", "1", "--report_to", "none",
        "--use_cpu", "true", "--save_strategy", "no", "--disable_tqdm", "true", "--max_seq_length", "16"])
    assert table["task"] == "reviews" and table["metric"] == "accuracy" and table["best_epoch"]["n"] == 1

    # the same entry overwritten on purpose
    register_task(TaskSpec("reviews", label_list=["bad-", "good+"], reader=read_plus_minus, local_path="reviews"),
                  overwrite=True)
    assert get_task("reviews").reader is read_plus_minus


def test_task_without_hub_copy_says_so(tmp_path, hub_offline):
    hub_offline(False)
    with pytest.raises(FileNotFoundError, match="no Hub copy"):
        load_task("clickbait", data_dir=str(tmp_path))
