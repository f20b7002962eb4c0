"""run_glue_multi.py end to end on tiny members and small slices of real data; config files and overrides; errors."""

import json
import os

import pytest
import yaml

import run_glue_multi  # the repository root is on pytest's pythonpath (pyproject.toml)
from hf_multiencoder import load_task

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_args(tiny_paths, out, *extra):
    return ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--output_dir", str(out),
            "--max_train_samples", "48", "--max_eval_samples", "40", "--num_train_epochs", "2",
            "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "40", "--learning_rate", "1e-3",
            "--eval_strategy", "epoch", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
            "--use_cpu", "true", "--do_train", "--do_eval", "--max_seq_length", "48", *extra]


def test_config_file_with_command_line_overrides(tmp_path):
    config = {"encoders": ["a", "b"], "task_name": "cola", "fusion": "cdme", "learning_rate": 3e-5,
              "encoder_learning_rates": [1e-5, 2e-5], "output_dir": "x", "num_train_epochs": 4}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    model_args, data_args, training_args = run_glue_multi.parse_args(
        [str(path), "--fusion", "dme", "--encoder_learning_rates", "5e-5", "6e-5", "--output_dir", str(tmp_path)])
    assert model_args.encoders == ["a", "b"]
    assert model_args.fusion == "dme"  # the command line wins
    assert model_args.encoder_learning_rates == [5e-5, 6e-5]
    assert training_args.learning_rate == 3e-5 and training_args.num_train_epochs == 4
    assert data_args.task_name == "cola"
    # load_best_model_at_end alone makes TrainingArguments rank checkpoints by loss: the script ranks by the task's
    # metric unless one is given
    assert training_args.metric_for_best_model is None
    given = run_glue_multi.parse_args([str(path), "--load_best_model_at_end", "true", "--eval_strategy", "epoch",
                                       "--save_strategy", "epoch", "--metric_for_best_model", "loss"])[2]
    assert given.metric_for_best_model == "loss" and given.greater_is_better is False
    given = run_glue_multi.parse_args([str(path), "--load_best_model_at_end", "true", "--eval_strategy", "epoch",
                                       "--save_strategy", "epoch", "--metric_for_best_model=loss"])[2]
    assert given.metric_for_best_model == "loss"
    json_path = tmp_path / "c.json"
    json_path.write_text(json.dumps(config))
    assert run_glue_multi.parse_args([str(json_path)])[0].fusion == "cdme"


def test_every_shipped_config_parses():
    folder = os.path.join(REPO, "configs")
    paths = [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".yaml")
             and os.path.basename(d) not in ("accelerate", "multitask")]  # accelerate launch's; run_multitask.py's
    assert len(paths) >= 9 * 3 + 6 + 1
    tasks = set()
    for path in paths:
        model_args, data_args, _ = run_glue_multi.parse_args([path])
        assert model_args.encoders and data_args.task_name
        tasks.add(data_args.task_name)
    # the original project's corpora each ship a config for the MiniLM + MPNet pair
    assert {"clickbait", "isear", "emotion_stimulus", "emobank", "emobank_arousal", "emobank_dominance", "fb_va",
            "fb_va_arousal", "mit_movie", "mit_restaurant"} <= tasks


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="Unknown task 'colaa'"):
        run_glue_multi.parse_args(["--encoders", "a", "--task_name", "colaa", "--output_dir", str(tmp_path)])
    bad = tmp_path / "bad.yaml"
    bad.write_text("encoders: [a]\ntask_name: cola\noutput_dir: x\nlearnin_rate: 1\n")
    with pytest.raises(ValueError, match="Unknown argument.*learnin_rate"):
        run_glue_multi.parse_args([str(bad)])
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        run_glue_multi.parse_args([str(tmp_path / "nope.yaml")])
    with pytest.raises(ValueError, match="Give `encoders`"):
        run_glue_multi.parse_args(["--task_name", "cola", "--output_dir", str(tmp_path)])


def test_missing_data_folder(tiny_paths, tmp_path, hub_offline):
    hub_offline(True)
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        run_glue_multi.main(tiny_args(tiny_paths, tmp_path, "--task_name", "rte", "--data_dir",
                                      str(tmp_path / "no_such_dir")))


def test_wrong_label_column(tiny_paths, tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("sentence,target\nthe cat,1\na dog,0\n")
    with pytest.raises(ValueError, match="label"):
        run_glue_multi.main(tiny_args(tiny_paths, tmp_path / "out", "--train_file", str(train),
                                      "--validation_file", str(train)))


def test_cola_end_to_end_with_seeds(tiny_paths, tmp_path, shared_data):
    out = tmp_path / "cola"
    table = run_glue_multi.main(tiny_args(tiny_paths, out, "--task_name", "cola", "--data_dir", shared_data,
                                          "--seeds", "1", "2", "--encoder_learning_rates", "1e-3", "5e-4",
                                          "--head_learning_rate", "3e-3"))
    assert table["metric"] == "matthews_correlation"
    assert len(table["best_epoch"]["scores"]) == 2
    for key in ("median", "mean", "std"):
        assert key in table["best_epoch"] and key in table["final_epoch"]
    assert os.path.isfile(out / "results.md") and os.path.isfile(out / "results.json")
    run = out / "seed_1"
    for name in ("all_results.json", "eval_results.json", "trainer_state.json", "fusion_weights.json",
                 "model.safetensors", "modeling_multiencoder.py"):
        assert os.path.isfile(run / name), name
    results = json.load(open(run / "eval_results.json"))
    assert "eval_matthews_correlation" in results
    assert abs(results["eval_fusion_weight_bert"] + results["eval_fusion_weight_roberta"] - 1) < 1e-4
    report = json.load(open(run / "fusion_weights.json"))
    assert set(report["mean_fusion_weights"]) == {"bert", "roberta"}
    # examples from the task's own data (CoLA's first dev sentence), not a fixed list
    assert report["examples"][0]["sentence"] == "The sailors rode the breeze clear of the rocks."
    # a card for the folder of seeds, with their summary
    card = (out / "README.md").read_text()
    assert "2 seeds" in card and "| 1 |" in card and "| 2 |" in card and "seed_1/" in card
    assert f"median {table['best_epoch']['median']:.2f}" in card
    state = json.load(open(run / "trainer_state.json"))
    assert len([e for e in state["log_history"] if "eval_matthews_correlation" in e]) >= 2  # one per epoch


def test_stsb_regression_end_to_end(tiny_paths, tmp_path, shared_data):
    out = tmp_path / "stsb"
    table = run_glue_multi.main(tiny_args(tiny_paths, out, "--task_name", "stsb", "--data_dir", shared_data,
                                          "--fusion", "concat", "--pooling", "cls", "last4"))
    assert table["metric"] == "spearmanr"
    results = json.load(open(out / "eval_results.json"))
    assert {"eval_pearson", "eval_spearmanr"} <= set(results)
    config = json.load(open(out / "config.json"))
    assert config["problem_type"] == "regression" and config["pooling"] == ["cls", "last4"]
    # a local run's card loads the folder it sits in, not a placeholder id
    assert f'model_id = "{out}"' in (out / "README.md").read_text()


def test_wnut17_token_classification_end_to_end(tiny_paths, tmp_path, shared_data):
    out = tmp_path / "wnut"
    table = run_glue_multi.main(tiny_args(tiny_paths, out, "--task_name", "wnut17", "--data_dir", shared_data,
                                          "--max_seq_length", "16", "--do_predict", "--max_predict_samples", "30"))
    # --do_predict: one tag per word of each test sentence, also for sentences longer than every member's 16 tokens
    test, _ = load_task("wnut17", data_dir=shared_data)
    rows = (out / "predict_results.txt").read_text().splitlines()[1:]
    assert len(rows) == 30
    labels = set(json.load(open(out / "config.json"))["id2label"].values())
    for i, row in enumerate(rows):
        index, tags = row.split("\t")
        assert int(index) == i and len(tags.split()) == len(test["test"][i]["tokens"]), i
        assert set(tags.split()) <= labels
    assert max(len(t) for t in test["test"][:30]["tokens"]) > 16  # some words were cut off by every member
    assert table["metric"] == "overall_f1"
    results = json.load(open(out / "eval_results.json"))
    assert {"eval_overall_precision", "eval_overall_recall", "eval_overall_f1"} <= set(results)
    config = json.load(open(out / "config.json"))
    assert config["architectures"] == ["MultiEncoderForTokenClassification"]
    assert config["id2label"]["1"] == "B-corporation"
