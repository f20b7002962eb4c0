"""benchmarks/bench_roofline.py end to end on tiny random members: peaks, FLOPs, the step split, MFU and ratios."""

import json
import math
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "benchmarks/bench_roofline.py"


@pytest.mark.slow  # a subprocess: run by `make test`, skipped by `make test-fast`
def test_tiny_roofline_benchmark(tmp_path, shared_data, run_script):
    out = tmp_path / "roofline.json"
    proc = run_script(SCRIPT, "--tiny", "--threads", "1", "--lengths", "16", "--batch_size", "4", "--steps", "1",
                      "--warmup", "0", "--rounds", "2", "--data_dir", shared_data, "--out", str(out), timeout=600)
    result = json.loads(out.read_text())
    assert set(result["machine"]["flags"]) >= {"avx2", "amx_bf16", "avx512_bf16"}
    for precision in ("fp32", "bf16"):
        assert result["peaks"][precision]["gflops"] > 0
    peaks = result["peaks"]
    assert peaks["best"]["gflops"] == max(peaks["fp32"]["gflops"], peaks["bf16"]["gflops"])
    names = [row["contestant"] for row in result["rows"]]
    assert names == [f"{n}@16" for n in ("plain/roberta/fp32", "plain/roberta/fast", "plugin/roberta/fast",
                                          "pair/fp32", "pair/fast", "cache/pair/fp32", "cache/pair/fast")]
    for row in result["rows"]:
        assert len(row["raw_seconds"]["fwd_bwd"]) == 2  # one timed step in each of the two rounds
        assert row["flop_per_step"] > 0 and row["samples_per_s"] > 0
        step_s = row["step_ms"] / 1000
        assert row["samples_per_s"] == pytest.approx(4 / step_s, rel=0.01)
        achieved = row["flop_per_step"] / step_s / 1e9
        assert row["mfu_vs_fp32_peak"] == pytest.approx(achieved / peaks["fp32"]["gflops"], rel=0.01, abs=1e-3)
    rows = {row["contestant"]: row for row in result["rows"]}
    # the pair does both members' work: more FLOPs than one member; the frozen pass no backward
    assert rows["pair/fast@16"]["flop_per_step"] > rows["plain/roberta/fast@16"]["flop_per_step"]
    assert rows["cache/pair/fast@16"]["flop_per_step"] < rows["pair/fast@16"]["flop_per_step"]
    for key in ("pair_fast_over_fp32@16", "plain_fast_over_fp32@16", "plugin_over_plain_fast@16",
                "cache_fast_over_fp32@16"):
        assert math.isfinite(result["ratios"][key]) and result["ratios"][key] > 0, key
    table = (tmp_path / "roofline.md").read_text()
    assert "| pair/fast@16 |" in table and "matmul peak" in table and table in proc.stdout
