"""benchmarks/bench_scale.py end to end on tiny random members: full fine-tuning against LoRA and gradient
checkpointing, the JSON and Markdown reports."""

import json
import math
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "benchmarks/bench_scale.py"


@pytest.mark.slow  # a subprocess
def test_tiny_scale_benchmark_end_to_end(tmp_path, run_script):
    pytest.importorskip("peft", reason="the LoRA variants need peft (pip install 'hf_multiencoder[peft]')")
    out = tmp_path / "scale.json"
    run_script(SCRIPT, "--tiny", "--synthetic", "--device", "cpu", "--threads", "1", "--steps", "1",
               "--warmup", "1", "--repeats", "2", "--variants", "full", "lora", "full+gc", "--out", out,
               timeout=300)

    results = json.loads(out.read_text())
    variants = results["variants"]
    assert list(variants) == ["full", "lora", "full+gc"]
    full, lora, gc = variants["full"], variants["lora"], variants["full+gc"]
    assert full["peak_over_start_vs_full"]["rounds"] == [1.0, 1.0]
    # LoRA trains adapters + fusion + head only; checkpointing changes no parameter
    assert 0 < lora["trainable_parameters"] < full["trainable_parameters"] / 2
    assert gc["trainable_parameters"] == full["trainable_parameters"] and gc["parameters"] == full["parameters"]
    for row in variants.values():
        assert len(row["step_ms_windows"]) == 2 and all(ms > 0 for ms in row["step_ms_windows"])
        assert math.isfinite(row["step_time_vs_full"]["median"]) and row["step_time_vs_full"]["median"] > 0
    table = (tmp_path / "scale.md").read_text()
    assert "| lora |" in table and "| full+gc |" in table


def test_variants_must_include_full():
    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    from bench_scale import ScaleArguments

    with pytest.raises(ValueError, match="must include full"):
        ScaleArguments(tiny=True, device="cpu", variants=["lora"])
    with pytest.raises(ValueError, match="must include full"):
        ScaleArguments(tiny=True, device="cpu", variants=["full", "qlora"])
