"""scripts/glue_sweep.py (the seed experiment's sweep) on the CPU with tiny members and slices of real GLUE: it runs
the shipped configs in parallel, writes results/glue.{json,md} in the issue's shape, and resumes without redoing
finished runs."""

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = os.path.join(REPO_ROOT, "scripts", "glue_sweep.py")


def sweep(tiny_paths, shared_data, tmp_path, *extra):
    cmd = [sys.executable, SCRIPT, "--tasks", "cola", "stsb", "--models", "MiniLM", "MPNet", "dme", "--seeds", "1",
           "2", "--workers", "2", "--data_dir", shared_data, "--member", f"MiniLM={tiny_paths[0]}",
           "--member", f"MPNet={tiny_paths[1]}", "--runs_dir", str(tmp_path / "runs"), "--results",
           str(tmp_path / "results"), *extra, "--", "--max_train_samples", "32", "--max_eval_samples", "32",
           "--num_train_epochs", "2", "--per_device_train_batch_size", "16", "--max_seq_length", "32",
           "--use_cpu", "true", "--report_to", "none"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_sweep_writes_the_table_and_resumes(tiny_paths, shared_data, tmp_path):
    out = sweep(tiny_paths, shared_data, tmp_path)
    assert out.count(": ok in ") == 12, out
    table = json.loads((tmp_path / "results" / "glue.json").read_text())
    assert set(table) == {"cola", "stsb"}
    for task, rows in table.items():
        assert set(rows) == {"MiniLM", "MPNet", "dme"}
        for model, entry in rows.items():
            assert entry["kind"] == ("fused" if model == "dme" else "member")
            assert len(entry["scores"]) == 2 and all(-100 <= s <= 100 for s in entry["scores"])
            assert sorted(entry["scores"])[0] <= entry["median"] <= sorted(entry["scores"])[1]
            assert {"mean", "std", "final_epoch", "train_seconds"} <= set(entry)
            run = json.loads((tmp_path / "runs" / task / model / "seed_1" / "results.json").read_text())
            assert entry["scores"][0] == run["best_epoch"]["scores"][0]  # the best dev epoch, x100
        weights = rows["dme"]["mean_fusion_weights"]
        assert set(weights) == {"MiniLM", "MPNet"} and abs(sum(weights.values()) - 1) < 1e-4
    md = (tmp_path / "results" / "glue.md").read_text()
    assert "| cola (MCC) |" in md and "| stsb (Spearman) |" in md

    # a second call finds every run finished and only rewrites the tables
    again = sweep(tiny_paths, shared_data, tmp_path)
    assert again.count("skip ") == 12 and ": ok in " not in again
    assert json.loads((tmp_path / "results" / "glue.json").read_text()) == table
