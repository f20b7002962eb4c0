"""benchmarks/bench_train.py end to end on tiny random members: it runs, and writes the JSON and Markdown reports.

Uses the real CoLA files when the shared data folder is there, generated sentences (``--synthetic``) otherwise, so
the test never skips.
"""

import json
import math
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("HF_MULTIENCODER_DATA", os.path.join(REPO_ROOT, "..", "shared", "data"))

SCRIPT = "benchmarks/bench_train.py"
RATIOS = ("plugin_over_plain", "fused_over_sum", "fused_over_slowest_plain", "cached_over_uncached")
RUNS = ("plain/tiny-bert", "plugin/tiny-bert", "plain/tiny-roberta", "plugin/tiny-roberta", "fused/concat",
        "fused/dme", "frozen/dme", "cached/dme")


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_tiny_benchmark_end_to_end(tmp_path, run_script):
    out = tmp_path / "tiny.json"
    data = ["--data_dir", SHARED_DATA] if os.path.isdir(SHARED_DATA) else ["--synthetic"]
    # one thread: on a shared 2-core machine OpenMP spin-waiting otherwise makes tiny ops 100x slower
    # the timeout is a safety net, not a timing: on one busy core this run took over 150 s
    proc = run_script(SCRIPT, "--tiny", "--device", "cpu", "--threads", "1", "--steps", "3", "--warmup", "1",
                      "--warmup_rounds", "1", "--pipeline_samples", "4", "--out", out, *data, timeout=600)

    results = json.loads(out.read_text())
    assert isinstance(results["device"], str) and results["device"].startswith("cpu")
    for key in RATIOS:
        assert isinstance(results[key], float) and math.isfinite(results[key]) and results[key] > 0, key
    assert set(results["plugin_over_plain_per_member"]) == {"tiny-bert", "tiny-roberta"}
    assert results["plugin_over_plain"] == min(results["plugin_over_plain_per_member"].values())
    assert set(results["runs"]) == set(RUNS)
    for name, run in results["runs"].items():
        train = run["train"]
        assert train["samples_per_second"] > 0 and train["step_ms"] > 0 and train["timed_steps"] == 3, name
        assert train["memory"]["peak_mb"] > 0, name
        if run["kind"] in ("plain", "plugin", "fused"):
            assert run["eval"]["samples_per_second"] > 0, name
            assert run["pipeline"]["batch_1"]["samples_per_second"] > 0, name
    # interleaved rounds: every contestant timed once per round (the untimed warm-up round leaves no window), each
    # ratio computed per round, median + range
    assert "untimed warm-up round done" in proc.stdout and results["settings"]["warmup_rounds"] == 1
    for name, run in results["runs"].items():
        assert run["train"]["windows"] == 2 and len(run["train"]["samples_per_second_windows"]) == 2, name
    for key in ("plugin_over_plain", "fused_over_sum", "fused_over_slowest_plain", "cached_over_uncached"):
        spread = results["spread"][key]
        assert len(spread["rounds"]) == 2 and spread["min"] <= results[key] <= spread["max"], key
    assert "rounds' range" in (tmp_path / "tiny.md").read_text()
    assert results["runs"]["cached/dme"]["train"]["trainable_parameters"] < results["runs"]["fused/dme"]["train"][
        "trainable_parameters"]
    assert results["feature_cache"]["cache_build_seconds"] > 0
    settings, versions = results["settings"], results["versions"]
    assert settings["batch_size"] == 32 and settings["tiny"] is True
    assert settings["data"] == ("synthetic" if "--synthetic" in data else os.path.relpath(
        os.path.join(SHARED_DATA, "glue", "CoLA"), REPO_ROOT))  # relative: no absolute path in committed results
    assert {"torch", "transformers", "datasets", "hf_multiencoder"} <= set(versions)

    table = (tmp_path / "tiny.md").read_text()
    assert results["device"] in table and versions["transformers"] in table
    for key in RATIOS:
        assert key in table
    assert "| fused/dme |" in table and table in proc.stdout


def test_random_weight_members_keep_the_architecture_and_tokenizer(tmp_path):
    """`--random_weights` (speed on the GPU without carrying weights): each member rebuilt from its config, weights
    drawn afresh, its tokenizer beside it, the folder's name kept."""
    import sys

    import torch
    from transformers import AutoModel, AutoTokenizer

    from hf_multiencoder.testing_utils import build_tiny_encoders

    sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
    from harness import build_random_members

    source = build_tiny_encoders(str(tmp_path / "src"))[:2]
    built = build_random_members(source, str(tmp_path / "random"), seed=1)  # the tiny ones used seed 0
    assert [os.path.basename(b) for b in built] == [os.path.basename(s) for s in source]
    for src, new in zip(source, built):
        a, b = AutoModel.from_pretrained(src), AutoModel.from_pretrained(new)
        assert type(a) is type(b) and a.config.hidden_size == b.config.hidden_size
        assert a.num_parameters() == b.num_parameters()
        assert not torch.equal(a.embeddings.word_embeddings.weight, b.embeddings.word_embeddings.weight)
        assert AutoTokenizer.from_pretrained(new)("a cat sat")["input_ids"] == AutoTokenizer.from_pretrained(src)(
            "a cat sat")["input_ids"]
