"""Several processes: `torchrun --nproc_per_node 2` on the CPU (gloo) runs tests/distributed_worker.py once; the tests
compare what it wrote with the same code in one process. DDP runs with `ddp_find_unused_parameters=False`, so a
trainable parameter left unused by design would fail it at the second step."""

import json
import os
import sys

import numpy as np
import pytest
import torch

from hf_multiencoder import MultiEncoderTokenizer
from hf_multiencoder.training.runs import checkpoint_problem

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import distributed_worker as worker  # noqa: E402

# AdamW over 4 steps: the two runs differ only in the order of float sums (measured: 3e-8, the weights move 7e-3)
WEIGHT_ATOL = 1e-6


@pytest.fixture(scope="module")
def ddp_run(tiny_paths, tmp_path_factory, torchrun):
    out = tmp_path_factory.mktemp("ddp")
    torchrun(os.path.join(os.path.dirname(__file__), "distributed_worker.py"), os.path.dirname(tiny_paths[0]), out,
             log_dir=out / "logs")
    summary = json.load(open(out / "summary.json"))
    return out, summary


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=["bert", "roberta", "distil"])


@pytest.mark.slow
def test_two_processes_match_one_with_the_same_global_batch(ddp_run, tiny_paths, tokenizer, tmp_path):
    out, summary = ddp_run
    assert summary["world_size"] == 2 and summary["wrapped"] == "DistributedDataParallel"
    got = torch.load(out / "weights.pt")
    # one process, 8 examples per step = 2 processes x 4
    reference, _ = worker.train(tiny_paths, tokenizer, tmp_path, per_device=8, frozen=(2,))
    initial = dict(worker.build(tiny_paths, frozen=(2,)).named_parameters())
    for name, expected in reference.items():
        torch.testing.assert_close(got["weights"][name], expected, atol=WEIGHT_ATOL, rtol=0, msg=name)
        if not initial[name].requires_grad:  # the frozen member and the members' poolers
            assert torch.equal(got["weights"][name], initial[name].detach()), name
    assert max((reference[n] - p.detach()).abs().max() for n, p in initial.items()) > 100 * WEIGHT_ATOL
    # resuming the 2-process run from its step-2 checkpoint ends where the uninterrupted run ended
    for name, expected in got["weights"].items():
        torch.testing.assert_close(got["resumed"][name], expected, atol=WEIGHT_ATOL, rtol=0, msg=name)


@pytest.mark.slow
def test_checkpoints_written_once_and_wrappers_pass_through(ddp_run):
    out, summary = ddp_run
    assert summary["saves_during_training"] == [0, 0]  # checkpoint-2 and checkpoint-4, by the main process only
    for step in (2, 4):
        folder = out / "ddp" / f"checkpoint-{step}"
        assert checkpoint_problem(str(folder)) is None
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(os.listdir(folder))  # each process's RNG, to resume
    # the parameter-to-member map and the optimizer factory work through DDP's wrapper (frozen member 2: no group)
    assert summary["members_through_ddp"] == [0, 1, 2]
    assert summary["groups_through_ddp"] == ["encoder_0.decay", "encoder_0.no_decay", "encoder_1.decay",
                                             "encoder_1.no_decay", "head.decay", "head.no_decay"]


@pytest.mark.slow
def test_evaluation_gathers_every_example_once(ddp_run, tiny_paths, tokenizer, tmp_path):
    """13 examples, 4 per process and batch: the last global batch (5) is uneven; accelerate pads it across processes
    and drops the padding when gathering."""
    out, summary = ddp_run
    got = np.load(out / "predictions.npz")
    for kind, prefix in (("sequence", "seq"), ("token", "tok")):
        reference = worker.predict(tiny_paths, tokenizer, kind, tmp_path / kind)
        logits, weights = reference.predictions[0], reference.predictions[1]
        real = reference.label_ids != -100  # words: padding differs with the batches each process saw
        assert got[f"{prefix}_logits"].shape[0] == worker.EVAL_EXAMPLES
        assert got[f"{prefix}_logits"].shape[:real.ndim] == real.shape
        np.testing.assert_allclose(got[f"{prefix}_logits"][real], logits[real], atol=1e-5)
        np.testing.assert_allclose(got[f"{prefix}_weights"][real], weights[real], atol=1e-6)
        metrics = summary[f"{prefix}_metrics"]
        for key, value in reference.metrics.items():
            if "accuracy" in key or "f1" in key or "fusion_weight" in key:
                assert metrics[key] == pytest.approx(value, abs=1e-6), key
    np.testing.assert_array_equal(got["tok_mask"][real], reference.predictions[2][real])


@pytest.mark.slow
def test_feature_cache_is_computed_by_one_process(ddp_run):
    _, summary = ddp_run
    calls = {entry["rank"]: entry["encode_calls"] for entry in summary["cache"]}
    assert calls[0] >= 1 and calls[1] == 0  # process 1 read what process 0 wrote
    assert summary["cache"][0]["first_vector"] == summary["cache"][1]["first_vector"]


@pytest.mark.slow
def test_the_script_under_torchrun_with_lora(ddp_run):
    out, summary = ddp_run
    run = out / "script"
    assert summary["script_saves"] == [[0], []]  # the merged model, written by the main process only
    assert summary["script_table"]["runs"][0]["fusion_weights"]
    for name in ("model.safetensors", "config.json", "results.json", "fusion_weights.json", "README.md",
                 "adapter/adapter_model.safetensors", "adapter/adapter_config.json"):
        assert (run / name).is_file(), name
    evaluated = json.load(open(run / "eval_results.json"))
    assert evaluated["eval_samples"] == 8
    # the same command with --resume_from_checkpoint once finished: no process trains or saves, the scores stay
    assert summary["script_resumed_saves"] == [[], []]
    first, again = summary["script_table"]["runs"][0], summary["script_resumed_table"]["runs"][0]
    assert 0 <= first["final_epoch_score"] <= 1
    assert again["final_epoch_score"] == pytest.approx(first["final_epoch_score"], abs=1e-6)
    assert again["fusion_weights"] == pytest.approx(first["fusion_weights"], abs=1e-5)


@pytest.mark.slow
def test_fsdp2_as_accelerate_prepares_it_matches_one_process(ddp_run, tiny_paths, tokenizer):
    """accelerate's own FSDP2 preparation (what the Trainer runs on GPUs) on the CPU: a unit per member layer class
    (`_no_split_modules`), a frozen member. The Trainer itself cannot run FSDP on the CPU: accelerate enables FSDP
    only for GPU-type processes and falls back to DDP there (see README, Scale out)."""
    out, summary = ddp_run
    assert set(summary["fsdp_units"]) == {f"FSDP{name}" for name in (
        "MultiEncoderForSequenceClassification", "BertEmbeddings", "BertLayer", "RobertaEmbeddings", "RobertaLayer",
        "TransformerBlock")}
    got = torch.load(out / "weights.pt")["fsdp"]
    reference = worker.fsdp_train(tiny_paths, tokenizer, shard=False)
    assert set(got) == set(reference)
    for name, expected in reference.items():
        torch.testing.assert_close(got[name], expected, atol=WEIGHT_ATOL, rtol=0, msg=name)
