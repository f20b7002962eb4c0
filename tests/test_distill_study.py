"""scripts/distill_study.py with tiny members on slices of real CoLA: it builds the frozen-member teacher, trains a
student per seed under the sweep's protocol (epoch chosen on the held-out slice), resumes, and reports against the
sweep's member rows."""

import json

import numpy as np
import pytest

SCRIPT = "scripts/distill_study.py"


def study(run_script, tmp_path, tiny_paths, shared_data):
    return run_script(SCRIPT, "--task", "cola", "--frozen_teacher", tmp_path / "teacher", "--seeds", 1,
                      "--data_dir", shared_data, "--member", f"MiniLM={tiny_paths[0]}", "--member",
                      f"MPNet={tiny_paths[1]}", "--student", tiny_paths[0], "--runs_dir", tmp_path / "runs",
                      "--member_runs", tmp_path / "member_runs", "--results", tmp_path / "results",
                      "--max_samples", 40, "--max_seq_length", 32, "--teacher_epochs", 2, timeout=900,
                      OMP_NUM_THREADS="1").stdout


@pytest.mark.slow
def test_distill_study_trains_chooses_on_heldout_resumes_and_reports(tiny_paths, shared_data, tmp_path, run_script):
    # a member-alone baseline as the sweep writes it (two seeds)
    for seed, dev in ((1, 0.10), (2, 0.20)):
        folder = tmp_path / "member_runs" / "cola" / "plain_MiniLM" / f"seed_{seed}"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"train_seconds": 5.0, "epochs": [
            {"heldout": 0.3, "dev": dev}, {"heldout": 0.1, "dev": 0.9}]}))  # epoch 1 chosen: dev 0.9 is never read
    out = study(run_script, tmp_path, tiny_paths, shared_data)
    assert out.count(": ok in ") == 1
    assert (tmp_path / "teacher" / "config.json").is_file()
    teacher = json.loads((tmp_path / "runs" / "cola" / "teacher" / "teacher.json").read_text())
    assert teacher["members"] == ["MiniLM", "MPNet"] and teacher["fusion"] == "dme"
    assert abs(sum(teacher["dev_fusion_weights"].values()) - 1) < 1e-4
    run = json.loads((tmp_path / "runs" / "cola" / "teacher" / "seed_1" / "result.json").read_text())
    held = [e["heldout"] for e in run["epochs"]]
    assert len(held) == 3 and run["chosen_epoch"] == 1 + int(np.argmax(held))
    assert run["sizes"] == {"train": 40, "heldout": 40, "dev": 40}
    report = json.loads((tmp_path / "results" / "distill.json").read_text())["tasks"]["cola"]
    # the study's seeds only (seed 2 of the member has no student to pair with); the chosen epoch's dev score
    assert report["baselines"]["plain_MiniLM"]["dev"]["scores"] == pytest.approx([10.0])
    vs = report["teachers"]["teacher"]["vs_member"]
    assert vs["n_seeds"] == 1 and vs["teacher_gain_over_member"] == pytest.approx(100 * teacher["dev"] - 10.0)
    md = (tmp_path / "results" / "distill.md").read_text()
    assert "MiniLM distilled from `teacher`" in md and "Latency: not measured yet" in md
    # finished runs are skipped; the teacher's logits come from its cache
    again = study(run_script, tmp_path, tiny_paths, shared_data)
    assert again.count("skip ") == 1 and ": ok in " not in again


def test_distill_study_needs_a_teacher(tmp_path, run_script):
    proc = run_script(SCRIPT, "--task", "cola", "--runs_dir", tmp_path, check=False)
    assert proc.returncode != 0 and "--teacher FOLDER" in proc.stderr
    proc = run_script(SCRIPT, "--task", "cola", "--teacher", tmp_path / "none", check=False)
    assert proc.returncode != 0 and "no saved model there" in proc.stderr
