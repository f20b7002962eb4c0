"""run_multitask.py: config files and overrides, every shipped multi-task config, the bad arguments, and a run end to
end on tiny members and small slices of two real tasks (CoNLL-2003 NER and TREC)."""

import json
import os

import pytest
import yaml
from transformers import AutoModel

import run_multitask  # the repository root is on pytest's pythonpath (pyproject.toml)
from hf_multiencoder import MultiEncoderForMultiTask, MultiEncoderTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {"ner": {"task_name": "conll2003", "max_train_samples": 48, "max_eval_samples": 24},
         "trec": {"task_name": "trec", "max_train_samples": 48, "max_eval_samples": 24}}


def tiny_args(tiny_paths, out, *extra):
    return ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--output_dir", str(out),
            "--tasks", json.dumps(TASKS), "--max_steps", "4", "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "24", "--learning_rate", "1e-3", "--report_to", "none",
            "--disable_tqdm", "true", "--use_cpu", "true", "--do_train", "--do_eval", "--max_seq_length", "32",
            *extra]


def test_config_file_with_command_line_overrides(tmp_path):
    config = {"encoders": ["a", "b"], "fusion": "dme", "tasks": {"ner": "conll2003", "trec": {"task_name": "TREC",
              "max_train_samples": 500}}, "task_sampling": "temperature", "loss_weights": {"ner": 0.5},
              "freeze": {"heads": [], "encoders": []}, "output_dir": "x"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    model_args, task_args, training_args = run_multitask.parse_args(
        [str(path), "--task_sampling", "annealed", "--loss_weights", '{"trec": 2}', "--output_dir", str(tmp_path)])
    assert model_args.encoders == ["a", "b"]
    assert task_args.tasks == {"ner": {"task_name": "conll2003"}, "trec": {"task_name": "TREC",
                                                                          "max_train_samples": 500}}
    assert task_args.task_sampling == "annealed" and task_args.loss_weights == {"trec": 2}  # the command line wins
    assert task_args.freeze == {"heads": [], "encoders": []}
    assert training_args.metric_for_best_model == "multitask_score" and training_args.greater_is_better
    given = run_multitask.parse_args([str(path), "--metric_for_best_model", "eval_trec_accuracy"])[2]
    assert given.metric_for_best_model == "eval_trec_accuracy"


def test_every_shipped_multitask_config_parses():
    folder = os.path.join(REPO, "configs", "multitask")
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".yaml"))
    assert len(paths) >= 2
    for path in paths:
        model_args, task_args, _ = run_multitask.parse_args([path])
        assert model_args.encoders and len(task_args.tasks) >= 2


@pytest.mark.parametrize("extra, message", [
    (["--tasks", '{"ner": "conll2004"}'], "unknown task 'conll2004'"),
    (["--tasks", "{}"], "Give `tasks`"),
    (["--tasks", "ner"], "`tasks` must be a mapping"),
    (["--tasks", '{"ner": {"task": "conll2003"}}'], "give `task_name`"),
    (["--task_sampling", "round_robin"], "Unknown task_sampling 'round_robin'"),
    (["--loss_weights", '{"pos": 1}'], r"`loss_weights` names task\(s\) \['pos'\]"),
    (["--freeze", '{"layers": [1]}'], r"Unknown key\(s\) \['layers'\] in `freeze`"),
    (["--freeze", '{"heads_after": {"pos": 3}}'], r"`freeze` names task\(s\) \['pos'\]"),
    (["--adaptive_mlm_epochs", "1"], "does not support --adaptive_mlm_epochs"),
    (["--frozen_feature_cache", "cache"], "does not support --adaptive_mlm_epochs, --frozen_feature_cache or"),
    (["--lora_r", "8"], "or --lora_r"),
])
def test_bad_arguments(extra, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        run_multitask.parse_args(["--encoders", "a", "--tasks", '{"ner": "conll2003", "trec": "trec"}',
                                  "--output_dir", str(tmp_path), *extra])


@pytest.mark.slow  # two short trainings on real data slices
def test_end_to_end_on_two_real_tasks(tiny_paths, shared_data, tmp_path):
    out = tmp_path / "run"
    table = run_multitask.main(tiny_args(
        tiny_paths, out, "--data_dir", shared_data, "--eval_strategy", "steps", "--eval_steps", "2",
        "--save_strategy", "steps", "--save_steps", "2", "--load_best_model_at_end", "true",
        "--task_sampling", "temperature", "--freeze", '{"heads_after": {"ner": 2}}'))
    run = table["runs"][0]
    assert sum(run["task_steps"].values()) == 4
    assert set(run["scores"]) == {"ner", "trec"} and 0 <= run["scores"]["trec"] <= 1
    assert run["multitask_score"] == pytest.approx((run["scores"]["ner"] + run["scores"]["trec"]) / 2)
    assert set(run["fusion_weights"]["trec"]) == {"bert", "roberta"}
    assert json.load(open(out / "results.json"))["tasks"]["trec"]["metric"] == "accuracy"
    eval_results = json.load(open(out / "eval_results.json"))
    assert {"eval_ner_overall_f1", "eval_trec_accuracy", "eval_multitask_score"} <= set(eval_results)
    state = json.load(open(out / "trainer_state.json"))
    assert state["best_metric"] == max(e["eval_multitask_score"] for e in state["log_history"]
                                       if "eval_multitask_score" in e)
    card = (out / "README.md").read_text()
    assert "### Tasks" in card and "| ner " in card and "| trec " in card and "CoNLL-2003" in card
    assert "mean of ner overall_f1, trec accuracy" in card and 'model.predict("trec", tokenizer' in card
    assert "name: Token Classification (ner)" in card and "name: Text Classification (trec)" in card
    model = AutoModel.from_pretrained(out).eval()
    tokenizer = MultiEncoderTokenizer.from_pretrained(out)
    assert isinstance(model, MultiEncoderForMultiTask) and model.config.task_names == ["ner", "trec"]
    assert model.predict("trec", tokenizer, ["What is the capital of Peru ?"])["Predictions"][0] in {
        "ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"}
    assert model.config.task_id2label("ner")[1] == "B-PER"
    # starting from the saved model: the same tasks load; a head given another task's labels is refused
    again = run_multitask.main([*tiny_args(tiny_paths, tmp_path / "again"), "--model_name_or_path", str(out),
                                "--data_dir", shared_data, "--max_steps", "1"])
    assert set(again["runs"][0]["scores"]) == {"ner", "trec"}
    swapped = json.dumps({"ner": TASKS["trec"], "trec": TASKS["ner"]})
    with pytest.raises(ValueError, match="Task 'ner' was saved as a token task"):
        run_multitask.main([*tiny_args(tiny_paths, tmp_path / "bad"), "--model_name_or_path", str(out),
                            "--data_dir", shared_data, "--tasks", swapped])


def test_a_task_without_data(tiny_paths, tmp_path, hub_offline):
    hub_offline(True)
    with pytest.raises(FileNotFoundError, match="Task 'conll2003': local data .*no_data.* not found"):
        run_multitask.main(tiny_args(tiny_paths, tmp_path, "--data_dir", str(tmp_path / "no_data")))
