"""scripts/glue_frozen.py (frozen members, trained heads) on tiny members and a slice of real RTE: the table's shape
(the fine-tuned sweep's), the fused rows' fusion weights, and a rerun that reuses finished runs and cached features."""

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "scripts", "glue_frozen.py")


@pytest.mark.slow  # two subprocess runs of the whole script
def test_frozen_sweep_table_and_rerun(tiny_paths, shared_data, tmp_path):
    cmd = [sys.executable, SCRIPT, "--tasks", "rte", "--seeds", "1", "2", "--poolings", "cls", "mean", "--epochs", "2",
           "--max_train_samples", "48", "--max_seq_length", "32", "--data_dir", shared_data,
           "--member", f"MiniLM={tiny_paths[0]}", "--member", f"MPNet={tiny_paths[1]}",
           "--runs_dir", str(tmp_path / "runs"), "--results", str(tmp_path / "results"),
           "--cache_dir", str(tmp_path / "cache")]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO_ROOT)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    table = json.load(open(tmp_path / "results" / "glue_frozen.json"))
    assert set(table["rte"]) == {f"{m}/{p}" for m in ("MiniLM", "MPNet", "concat", "dme", "mean")
                                 for p in ("cls", "mean")}
    for key, entry in table["rte"].items():
        assert len(entry["scores"]) == 2 and entry["kind"] == ("member" if key.split("/")[0] in ("MiniLM", "MPNet")
                                                                else "fused")
        assert {"median", "mean", "std", "final_epoch", "train_seconds"} <= set(entry)
        assert all(0 <= s <= 100 for s in entry["scores"])
    weights = table["rte"]["dme/mean"]["mean_fusion_weights"]
    assert set(weights) == {"MiniLM", "MPNet"} and abs(sum(weights.values()) - 1) < 1e-4
    assert table["_timing"]["rte"]["examples"] == {"train": 48, "validation": 277}
    md = (tmp_path / "results" / "glue_frozen.md").read_text()
    assert "| dme |" in md and "Best fused" in md
    # a rerun: every head is read back, the members run no more (their vectors come from the cache)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO_ROOT)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.load(open(tmp_path / "results" / "glue_frozen.json"))["rte"] == table["rte"]
    assert "Caching features" not in second.stderr
