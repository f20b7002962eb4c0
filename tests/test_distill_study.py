"""scripts/distill_study.py with tiny members on slices of real CoLA: it builds the frozen-member teacher, trains a
student per seed under the sweep's protocol (epoch chosen on the held-out slice), skips finished students, resumes a
cut one from its last epoch, and reports against the sweep's member rows."""

import json

import numpy as np
import pytest

SCRIPT = "scripts/distill_study.py"


def study_args(tmp_path, tiny_paths, shared_data) -> list:
    return ["--task", "cola", "--frozen_teacher", tmp_path / "teacher", "--seeds", 1, "--data_dir", shared_data,
            "--member", f"MiniLM={tiny_paths[0]}", "--member", f"MPNet={tiny_paths[1]}", "--student", tiny_paths[0],
            "--runs_dir", tmp_path / "runs", "--member_runs", tmp_path / "member_runs", "--results",
            tmp_path / "results", "--checkpoints_dir", tmp_path / "checkpoints", "--max_samples", 40,
            "--max_seq_length", 32, "--teacher_epochs", 2]


def study(run_script, tmp_path, tiny_paths, shared_data):
    return run_script(SCRIPT, *study_args(tmp_path, tiny_paths, shared_data), timeout=900,
                      OMP_NUM_THREADS="1").stdout


@pytest.mark.slow
def test_distill_study_trains_chooses_on_heldout_resumes_and_reports(tiny_paths, shared_data, tmp_path, run_script,
                                                                      kill_after_first_checkpoint):
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
    # a student cut off after its first epoch resumes from that epoch's checkpoint, as if it had never stopped
    seed_1 = tmp_path / "runs" / "cola" / "teacher" / "seed_1"
    assert run["resumed_after_epochs"] == 0 and not (tmp_path / "checkpoints" / "cola" / "teacher" / "seed_1").exists()
    (seed_1 / "result.json").unlink()
    kill_after_first_checkpoint(SCRIPT, study_args(tmp_path, tiny_paths, shared_data),
                                tmp_path / "checkpoints" / "cola" / "teacher" / "seed_1")
    assert not (seed_1 / "result.json").exists(), "the student finished before it could be cut"
    resumed_out = study(run_script, tmp_path, tiny_paths, shared_data)
    assert "Resuming from" in resumed_out and ": ok in " in resumed_out
    resumed = json.loads((seed_1 / "result.json").read_text())
    assert resumed["resumed_after_epochs"] >= 1 and len(resumed["epochs"]) == 3
    for a, b in zip(resumed["epochs"], run["epochs"]):
        assert a["heldout"] == pytest.approx(b["heldout"], abs=1e-5) and a["dev"] == pytest.approx(b["dev"], abs=1e-5)
    assert not (tmp_path / "checkpoints" / "cola" / "teacher" / "seed_1").exists()  # finished: its checkpoints go


def test_distill_study_needs_a_teacher(tmp_path, script_main):
    main = script_main(SCRIPT)
    with pytest.raises(SystemExit, match="--teacher FOLDER"):
        main(["--task", "cola", "--runs_dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="no saved model there"):
        main(["--task", "cola", "--teacher", str(tmp_path / "none")])


def bench_result(task: str, teacher_ms: float, tiny: bool = False) -> dict:
    """What benchmarks/bench_distill.py saves (its keys the report reads)."""
    return {"device": "cpu", "settings": {"teacher": f"teachers/{task}", "teacher_members": ["MiniLM", "MPNet"],
                                          "teacher_fusion": "dme", "student": "student", "task": task,
                                          "dev_texts": 10, "threads": 1, "tiny": tiny, "engine": "PyTorch eager fp32"},
            "timing": {"batch_1": {"batch_size": 1, "ms": {"teacher": teacher_ms, "student": 2.0}}}}


def test_distill_report_gives_each_tasks_latency(tmp_path, script_main):
    results = tmp_path / "results"
    results.mkdir()
    for name, bench in {"bench_distill.json": bench_result("cola", 10.0),
                        "bench_distill_stsb.json": bench_result("stsb", 30.0),
                        "bench_distill_tiny.json": bench_result("cola", 99.0, tiny=True)}.items():
        (results / name).write_text(json.dumps(bench))
    main = script_main(SCRIPT)
    main(["--report_only", "--runs_dir", str(tmp_path / "runs"), "--results", str(results)])
    md = (results / "distill.md").read_text()
    cola, stsb = md.index("## Latency on GLUE CoLA"), md.index("## Latency on GLUE STS-B")
    assert "results/bench_distill.json" in md[cola:stsb] and "| 1 | 10.0 | 2.0 | 5.00x |" in md[cola:stsb]
    assert "results/bench_distill_stsb.json" in md[stsb:] and "| 1 | 30.0 | 2.0 | 15.00x |" in md[stsb:]
    assert "99.0" not in md and "not measured yet" not in md  # a tiny-member check is not a measurement
    # two files timing one task: only one can be reported, so the report says which to keep
    (results / "bench_distill_cola.json").write_text(json.dumps(bench_result("cola", 12.0)))
    with pytest.raises(SystemExit, match="bench_distill.json and bench_distill_cola.json both time cola"):
        main(["--report_only", "--runs_dir", str(tmp_path / "runs"), "--results", str(results)])
