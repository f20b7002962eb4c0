"""benchmarks/bench_encode.py end to end on tiny random members: every contestant is timed, the ratios and the
tables are written."""

import json
import math
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "benchmarks/bench_encode.py"


@pytest.mark.slow  # a subprocess: run by `make test`, skipped by `make test-fast`
def test_tiny_encode_benchmark(tmp_path, shared_data, run_script):
    pytest.importorskip("sentence_transformers", reason="the benchmark times the SentenceTransformer module too")
    out = tmp_path / "encode.json"
    proc = run_script(SCRIPT, "--tiny", "--threads", "1", "--sentences", "24", "--batch_size", "8",
                      "--repeats", "1", "--data_dir", shared_data, "--out", str(out), timeout=300)
    results = json.loads(out.read_text())
    assert set(results["runs"]) == {"plain/tiny-bert", "plugin/tiny-bert", "plain/tiny-roberta", "plugin/tiny-roberta",
                                    "fused", "fused_st"}
    for run in results["runs"].values():
        assert run["sentences_per_second"] > 0
    for key in ("plugin_over_plain", "fused_over_sum", "fused_over_slowest_plain", "st_module_over_encode"):
        assert math.isfinite(results[key]) and results[key] > 0, key
    sps = {name: run["sentences_per_second"] for name, run in results["runs"].items()}
    slowest = min(sps["plain/tiny-bert"], sps["plain/tiny-roberta"])
    assert results["fused_over_slowest_plain"] == pytest.approx(sps["fused"] / slowest)  # the slowest, not fastest
    assert results["settings"]["sentences"] == 24
    assert results["settings"]["data"] == os.path.relpath(os.path.join(shared_data, "glue", "STS-B"), REPO_ROOT)
    table = (tmp_path / "encode.md").read_text()
    assert "| fused_st |" in table and "fused_over_sum" in table and table in proc.stdout
