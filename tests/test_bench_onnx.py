"""benchmarks/bench_onnx.py end to end on tiny random members: a head is trained, exported and quantized, every engine
is timed and scored on the dev set, the tables are written."""

import json
import math
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "benchmarks/bench_onnx.py"


@pytest.mark.slow  # a subprocess: run by `make test`, skipped by `make test-fast`
def test_tiny_onnx_benchmark(tmp_path, shared_data, run_script):
    pytest.importorskip("onnxruntime", reason="the benchmark runs the ONNX export (the onnx extra)")
    out = tmp_path / "onnx.json"
    proc = run_script(SCRIPT, "--tiny", "--train_samples", 64, "--epochs", 1, "--latency_repeats", 2,
                      "--throughput_repeats", 1, "--data_dir", shared_data, "--out", out)
    results = json.loads(out.read_text())
    engines = {"pytorch_fp32", "onnx_fp32", "onnx_int8"}
    assert set(results["accuracy"]) == engines
    for name, acc in results["accuracy"].items():
        assert 0 <= acc["accuracy"] <= 1 and set(acc["mean_fusion_weights"]) == {"tiny-bert", "tiny-roberta"}
    assert results["accuracy"]["onnx_fp32"]["max_abs_logit_diff_vs_pytorch"] < 1e-4
    assert results["accuracy"]["onnx_fp32"]["agreement_with_pytorch"] == 1.0
    assert set(results["timing"]) == {"batch_1", "batch_32"}
    for timing in results["timing"].values():
        assert set(timing["ms"]) == engines | {"tokenize"}
        assert all(math.isfinite(v) and v > 0 for v in timing["speedup_vs_pytorch"].values())
    settings = results["settings"]
    assert settings["dev_samples"] == 872 and settings["train_samples"] == 64 and settings["threads"] == 1
    assert settings["data"] == os.path.relpath(os.path.join(shared_data, "glue", "SST-2"), REPO_ROOT)
    assert results["bf16"]["measured"] is False and results["bf16"]["why"]
    table = (tmp_path / "onnx.md").read_text()
    assert "| onnx int8 |" in table and "speed-up over PyTorch" in table and table in proc.stdout
