"""benchmarks/bench_distill.py on tiny random members: teacher and student are timed in turn at batch 1 and 32 and the
tables are written."""

import json
import math
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

import bench_distill  # noqa: E402

SCRIPT = "benchmarks/bench_distill.py"


@pytest.mark.slow  # a subprocess: run by `make test`, skipped by `make test-fast`
def test_tiny_distill_benchmark(tmp_path, shared_data, run_script):
    out = tmp_path / "distill.json"
    run_script(SCRIPT, "--tiny", "--latency_repeats", 2, "--throughput_repeats", 1, "--data_dir", shared_data, "--out",
               out)
    results = json.loads(out.read_text())
    assert set(results["timing"]) == {"batch_1", "batch_32"}
    for timing in results["timing"].values():
        assert set(timing["ms"]) == {"teacher", "student", "teacher_tokenize", "student_tokenize"}
        assert all(math.isfinite(v) and v > 0 for v in timing["ms"].values())
        assert timing["teacher_over_student"] == pytest.approx(timing["ms"]["teacher"] / timing["ms"]["student"])
    assert results["timing"]["batch_32"]["batch_size"] == 32 and results["settings"]["dev_texts"] == 1043
    params = results["parameters_millions"]
    assert params["teacher"] > params["student"] > 0  # the teacher holds the student's architecture and more
    assert "teacher / student" in (tmp_path / "distill.md").read_text()


def test_distill_benchmark_refuses_a_missing_teacher(tmp_path):
    with pytest.raises(ValueError, match="no saved model there"):
        bench_distill.main(["--teacher", str(tmp_path), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
