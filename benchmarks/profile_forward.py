#!/usr/bin/env python
"""Per-step overhead of the multi-encoder's forward/backward, against the same member run as a plain HF model.

Times, on one fixed batch of real sentences (median of ``--repeats``, the contestants interleaved step by step):

* ``plain``: ``AutoModelForSequenceClassification`` of the member;
* ``plugin``: ``MultiEncoderForSequenceClassification`` with that one member;
* ``member_only``: the member's own ``AutoModel`` forward + mean pooling (the floor the plugin cannot beat);

then profiles one plugin step (all members) with ``torch.profiler`` and reports where the time goes outside the
members (pooling, fusion, head, loss) and how many device-to-host synchronisations the forward makes.

    python benchmarks/profile_forward.py [--members A B] [--tiny] [--device cpu|cuda] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
import transformers
from harness import DEFAULT_MEMBERS, BenchmarkArguments, build_tiny_members, load_splits
from timing import interleaved_median_ms
from timing import synchronize as sync
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer


def train_step(model, batch):
    def step():
        model.zero_grad(set_to_none=True)
        model(**batch).loss.backward()
    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", nargs="+", default=DEFAULT_MEMBERS)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    members = build_tiny_members(tempfile.mkdtemp()) if args.tiny else args.members
    bench_args = BenchmarkArguments(tiny=args.tiny, steps=1, warmup=1, batch_size=args.batch_size, device=args.device)
    train, _, _ = load_splits(bench_args)
    sentences = train["sentence1"][: args.batch_size]
    labels = torch.tensor(train["label"][: args.batch_size], device=args.device)
    max_length = bench_args.max_seq_length
    report = {"device": args.device, "threads": torch.get_num_threads(), "per_member": {}}

    for member in members:
        tok = AutoTokenizer.from_pretrained(member)
        plain_batch = dict(tok(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))
        plain_batch = {k: v.to(args.device) for k, v in plain_batch.items()} | {"labels": labels}
        plain = AutoModelForSequenceClassification.from_pretrained(member, num_labels=2).to(args.device).train()
        bare = AutoModel.from_pretrained(member).to(args.device).train()
        mtok = MultiEncoderTokenizer.from_encoders([member])
        mbatch = mtok(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        mbatch = dict(mbatch.to(args.device)) | {"labels": labels}
        plugin = MultiEncoderForSequenceClassification.from_encoders([member], num_labels=2).to(args.device).train()
        head = torch.nn.Linear(bare.config.hidden_size, 2).to(args.device)

        def bare_step():
            bare.zero_grad(set_to_none=True)
            inputs = {k: v for k, v in plain_batch.items() if k != "labels"}
            states = bare(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1)
            torch.nn.functional.cross_entropy(head(pooled), labels).backward()

        with torch.no_grad():
            fwd = interleaved_median_ms({"plain": lambda: plain(**plain_batch), "plugin": lambda: plugin(**mbatch)},
                                        args.repeats, args.device)
        steps = interleaved_median_ms({"plain": train_step(plain, plain_batch), "member_only": bare_step,
                                       "plugin": train_step(plugin, mbatch)}, args.repeats, args.device)
        row = {
            "tokens": int(plain_batch["attention_mask"].sum()), "padded_shape": list(plain_batch["input_ids"].shape),
            "plain_train_step_ms": steps["plain"],
            "member_only_train_step_ms": steps["member_only"],
            "plugin_train_step_ms": steps["plugin"],
            "plain_forward_ms": fwd["plain"],
            "plugin_forward_ms": fwd["plugin"],
        }
        row["plugin_step_over_plain_step"] = row["plugin_train_step_ms"] / row["plain_train_step_ms"]  # >1: slower
        report["per_member"][os.path.basename(member)] = row
        print(os.path.basename(member), json.dumps(row, indent=1), flush=True)
        plain = bare = plugin = None  # free before the next member

    # one step of the fused model under the profiler
    mtok = MultiEncoderTokenizer.from_encoders(members)
    fused = MultiEncoderForSequenceClassification.from_encoders(members, fusion="dme", num_labels=2)
    fused = fused.to(args.device).train()
    batch = dict(mtok(sentences, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
                 .to(args.device)) | {"labels": labels}
    step = train_step(fused, batch)
    for _ in range(3):
        step()
    member_ms = []
    hooks = []

    def before(*_):
        sync(args.device)
        member_ms.append(-time.perf_counter())

    def after(*_):
        sync(args.device)
        member_ms[-1] += time.perf_counter()

    for m in fused.multiencoder.encoders:
        hooks += [m.register_forward_pre_hook(before), m.register_forward_hook(after)]
    with torch.no_grad():
        sync(args.device)
        start = time.perf_counter()
        for _ in range(args.repeats):
            fused(**batch)
        sync(args.device)
        forward_ms = (time.perf_counter() - start) * 1000 / args.repeats
    for h in hooks:
        h.remove()
    inside = sum(member_ms) * 1000 / args.repeats
    report["fused_forward"] = {"forward_ms": forward_ms, "inside_members_ms": inside,
                               "outside_members_ms": forward_ms - inside,
                               "outside_share": (forward_ms - inside) / forward_ms}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        sync(args.device)
    events = prof.key_averages()
    syncs = [e for e in events if e.key in ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize",
                                            "cudaDeviceSynchronize", "aten::is_nonzero")]
    report["fused_step_syncs"] = {e.key: e.count for e in syncs}
    table = events.table(sort_by="self_cpu_time_total", row_limit=18)
    report["profile_top_ops"] = table
    print(json.dumps({k: v for k, v in report.items() if k != "profile_top_ops"}, indent=1))
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
