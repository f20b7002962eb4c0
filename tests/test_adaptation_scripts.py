"""The adaptation entry points end to end on tiny members: run_mlm_multi.py, run_glue_multi.py --adaptive_mlm_epochs
(the one-command path) and scripts/adaptive_protocol.py (the four-way table)."""

import importlib.util
import json
import os

import pytest
import torch
from transformers import AutoModel

import run_glue_multi
import run_mlm_multi
from hf_multiencoder import MultiEncoderForSequenceClassification

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--num_train_epochs", "2", "--learning_rate", "1e-3", "--per_device_train_batch_size", "8", "--use_cpu",
        "true", "--disable_tqdm", "true", "--report_to", "none", "--max_seq_length", "32"]


def load_protocol():
    spec = importlib.util.spec_from_file_location("adaptive_protocol", os.path.join(REPO, "scripts",
                                                                                    "adaptive_protocol.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_mlm_multi_defaults_and_config(tmp_path):
    base = ["--encoders", "a", "--train_file", "x.txt", "--output_dir", str(tmp_path)]
    _, _, adaptation_args, training_args = run_mlm_multi.parse_args(base)
    # the seed's adaptation settings unless given
    assert (training_args.per_device_train_batch_size, training_args.learning_rate, training_args.weight_decay,
            training_args.warmup_steps, training_args.save_strategy) == (16, 1e-5, 0.01, 0.06, "no")
    assert adaptation_args.objective == "mlm" and adaptation_args.head_warmup == "auto"
    given = run_mlm_multi.parse_args(base + ["--learning_rate", "3e-5", "--whole_word_mask", "true"])
    assert given[3].learning_rate == 3e-5 and given[2].whole_word_mask
    config = tmp_path / "c.yaml"
    config.write_text(f"encoders: [a, b]\ntrain_file: [x.txt]\noutput_dir: {tmp_path}\nnum_train_epochs: 8\n")
    member_args, corpus_args, _, training_args = run_mlm_multi.parse_args([str(config), "--adapt_members", "1"])
    assert member_args.encoders == ["a", "b"] and training_args.num_train_epochs == 8
    with pytest.raises(ValueError, match="Give member checkpoints"):
        run_mlm_multi.parse_args(["--train_file", "x.txt", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="Give unlabelled text"):
        run_mlm_multi.parse_args(["--encoders", "a", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="Unknown objective 'rtd'"):
        run_mlm_multi.parse_args(base + ["--objective", "rtd"])


@pytest.mark.slow
def test_run_mlm_multi_adapts_one_of_two_members(tiny_paths, tmp_path):
    text = tmp_path / "questions.txt"
    text.write_text("\n".join(f"can {w} go to paris or new york ?" for w in ("he", "she", "john", "somebody",
                                                                             "the cat", "a dog", "it")) + "\n")
    out = tmp_path / "adapted"
    report = run_mlm_multi.main(["--encoders", tiny_paths[0], tiny_paths[2], "--encoder_names", "bert", "distil",
                                 "--train_file", str(text), "--adapt_members", "1", "--validation_split_percentage",
                                 "30", "--line_by_line", "false", "--whole_word_mask", "true", "--output_dir",
                                 str(out), *FAST])
    assert report["encoders"] == [tiny_paths[0], str(out / "distil")]  # the member left out is used as it was
    assert sorted(os.listdir(out)) == ["adaptation_results.json", "distil", "trainer"]
    assert AutoModel.from_pretrained(out / "distil").config.model_type == "distilbert"
    member = report["members"][1]
    assert member["end"]["loss"] < member["start"]["loss"]
    assert report["settings"]["line_by_line"] is False and report["settings"]["train_texts"] == 5
    assert member["whole_word_mask"]  # packed blocks keep each text's offsets: words are still found


@pytest.mark.slow
def test_one_command_task_adaptive_pretraining(tiny_paths, tmp_path, shared_data):
    out = tmp_path / "rte"
    args = ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--task_name", "rte",
            "--data_dir", shared_data, "--max_train_samples", "24", "--max_eval_samples", "16",
            "--eval_strategy", "epoch", "--save_strategy", "no", "--do_train", "--do_eval", "--output_dir", str(out),
            "--adaptive_mlm_epochs", "1", "--adaptive_mlm_learning_rate", "1e-3", *FAST]
    table = run_glue_multi.main(args)
    adapted = out / "adapted_members"
    report = json.loads((adapted / "adaptation_results.json").read_text())
    assert [m["name"] for m in report["members"]] == ["bert", "roberta"]
    assert report["settings"]["train_texts"] + report["settings"]["validation_texts"] == 48  # both sides of 24 pairs
    assert report["settings"]["num_train_epochs"] == 1 and report["settings"]["learning_rate"] == 1e-3
    assert len(table["best_epoch"]["scores"]) == 1
    # the task phase started from the adapted members (display names unchanged)
    tuned = MultiEncoderForSequenceClassification.from_pretrained(out)
    assert tuned.config.encoder_names == ["bert", "roberta"]
    assert tuned.config.encoders[0]["_name_or_path"] == str(adapted / "bert")
    # a rerun reuses the adapted members instead of adapting again
    before = AutoModel.from_pretrained(adapted / "roberta").state_dict()
    run_glue_multi.main([*args, "--overwrite_output_dir", "true"])
    after = AutoModel.from_pretrained(adapted / "roberta").state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_protocol_script_four_rows(tiny_paths, tmp_path, shared_data):
    protocol = load_protocol()
    out = tmp_path / "protocol"
    argv = ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--task_name", "cola",
            "--data_dir", shared_data, "--seeds", "1", "2", "--output_dir", str(out), "--max_train_samples", "32",
            "--max_eval_samples", "32", "--num_train_epochs", "2", "--max_seq_length", "32",
            "--adaptation_epochs", "1", "--adaptation_learning_rate", "1e-3", "--use_cpu"]
    summary = protocol.main(argv)
    assert list(summary["rows"]) == ["head_only", "behavioural", "adaptive_head_only", "adaptive_behavioural"]
    assert summary["metric"] == "matthews_correlation" and summary["fusion"] == "dme"
    for row, entry in summary["rows"].items():
        for key in ("best_epoch", "final_epoch"):
            assert len(entry[key]["scores"]) == 2 and {"median", "std"} <= set(entry[key])
        if row.startswith("adaptive"):
            assert entry["best_epoch_delta"]["verdict"] in ("higher", "within spread", "lower")
    # frozen rows kept the members as loaded; the adapted rows started from the adapted members
    head_only = MultiEncoderForSequenceClassification.from_pretrained(out / "head_only" / "seed_1")
    reference = AutoModel.from_pretrained(tiny_paths[0])
    torch.testing.assert_close(head_only.multiencoder.encoders[0].embeddings.word_embeddings.weight,
                               reference.embeddings.word_embeddings.weight)
    # ... run once over the data: their vectors were cached for every epoch and seed
    assert len([f for f in os.listdir(out / "feature_cache") if f.startswith("member-features-")]) >= 2
    adapted = MultiEncoderForSequenceClassification.from_pretrained(out / "adaptive_head_only" / "seed_1")
    assert adapted.config.encoders[0]["_name_or_path"] == str(out / "adapted" / "bert")
    md = (out / "protocol.md").read_text()
    assert md.count("| adaptive_") == 2 and "| head_only |" in md and "Held-out masked-LM loss" in md
    assert json.loads((out / "protocol.json").read_text())["rows"].keys() == summary["rows"].keys()
    # a second call finds every row finished
    again = protocol.main(argv)
    assert again["rows"]["behavioural"]["best_epoch"] == summary["rows"]["behavioural"]["best_epoch"]
