import json
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import bench_assembly  # noqa: E402


@pytest.mark.slow  # a fresh interpreter per measurement
def test_assembly_benchmark_on_tiny_members(tiny_paths, tmp_path):
    out = tmp_path / "assembly.json"
    results = bench_assembly.main(["--encoders", *tiny_paths[:2], "--repeats", "1", "--labels", "now", "--out",
                                   str(out)])
    row = results["runs"]["now"]
    assert row["parameters_mb"] > 0 and row["peak_after_reading_weights_mb"] >= row["peak_over_import_mb"] >= 0
    assert json.loads(out.read_text())["runs"]["now"]["samples"][0]["seconds"] > 0
    assert "| now |" in (tmp_path / "assembly.md").read_text()
    with pytest.raises(ValueError, match="2 --labels for 1 --code_roots"):
        bench_assembly.main(["--encoders", *tiny_paths[:2], "--labels", "a", "b"])
