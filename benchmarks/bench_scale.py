#!/usr/bin/env python
"""Full fine-tuning against LoRA and gradient checkpointing: trainable parameters, peak memory and step time of the
same fused model on the same batches, in one run.

    python benchmarks/bench_scale.py --long --batch_size 8    # MiniLM + MPNet, DME, real RTE pairs at 256, CPU
    python benchmarks/bench_scale.py --device cuda --bf16     # on a GPU
    python benchmarks/bench_scale.py --tiny                   # tiny random members: a smoke test

Variants: `full` (every weight trains), `full+gc` (`--gradient_checkpointing`), `lora` (r=8 in every member's
attention query and value; fusion and head train fully), `lora+gc`. They take turns in interleaved timed windows
(benchmarks/bench_train.py's `train_window`: a fresh stock Trainer, `warmup` untimed then `steps` timed steps; the
order reversed every round). Memory is the peak over a window (CUDA allocator, or the process's peak RSS reset per
window) minus what was in use when it started (the models), i.e. gradients, optimizer state and activations. Writes
JSON and a Markdown table (benchmarks/results/scale_<device>[_long][_tiny].json/.md) with each variant's ratios to
`full`, computed per round (median and range).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

from harness import (  # the shared benchmark machinery (benchmarks/ is on sys.path: the script's folder)
    REPO_ROOT,
    BenchmarkArguments,
    Entry,
    benchmark_main,
    build_tiny_members,
    environment,
    finish_train_result,
    load_splits,
    short_name,
    start_run,
    train_window,
)
from timing import cleanup, round_summary
from transformers import set_seed

from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderTokenizer,
    get_task,
    tokenize_task,
)
from hf_multiencoder.training.lora import get_multiencoder_lora_model

VARIANTS = ("full", "lora", "full+gc", "lora+gc")


@dataclass
class ScaleArguments(BenchmarkArguments):
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    variants: list[str] = field(default_factory=lambda: list(VARIANTS), metadata={"help": f"Of {VARIANTS}."})

    def __post_init__(self):
        super().__post_init__()
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown or "full" not in self.variants:
            raise ValueError(f"`variants` must include full and come from {VARIANTS}; got {self.variants}.")
        if self.out is None or os.path.basename(self.out).startswith(("cpu", "cuda")):
            name = "scale_" + self.device + ("_bf16" if self.bf16 else "") + ("_long" if self.long else "") + (
                "_tiny" if self.tiny else "")
            self.out = os.path.join(REPO_ROOT, "benchmarks", "results", f"{name}.json")


def run(args: ScaleArguments) -> dict:
    workdir = start_run(args, "bench_scale_")
    members = build_tiny_members(workdir) if args.tiny else list(args.members)
    names = [short_name(m) for m in members]
    train, _, source = load_splits(args)
    tokenizer = MultiEncoderTokenizer.from_encoders(members, encoder_names=names)
    spec = get_task(args.task)
    train = tokenize_task(train, spec, tokenizer, args.max_seq_length)
    collator = MultiEncoderDataCollator(tokenizer, pad_to_multiple_of=args.pad_to_multiple_of)
    device, versions = environment(args)
    print(f"[bench_scale] {device}; members {names}; {spec.name} from {source}; variants {args.variants}", flush=True)
    entries = []
    for variant in args.variants:
        set_seed(args.seed)
        model = MultiEncoderForSequenceClassification.from_encoders(members, encoder_names=names, fusion="dme",
                                                                    num_labels=2)
        if variant.endswith("+gc"):
            model.activation_checkpointing_enable()  # what the Trainer does for --gradient_checkpointing
        if variant.startswith("lora"):
            model = get_multiencoder_lora_model(model, r=args.lora_r)
        entry = Entry(variant, "fused", members, "dme")
        entry.model, entry.tokenizer = model.to(args.device), tokenizer
        entry.train_ds, entry.collator = train, collator
        entries.append(entry)
    started = time.perf_counter()
    for round_ in range(args.repeats):  # interleaved: a drift of the machine's speed hits every variant alike
        for entry in (entries if round_ % 2 == 0 else entries[::-1]):
            trainer = train_window(args, entry, workdir)
            del trainer
            cleanup()
        print(f"[bench_scale] round {round_ + 1}/{args.repeats}: " + ", ".join(
            f"{e.name} {e.windows[-1]['step_ms']:.0f} ms/step, {e.windows[-1]['memory']['peak_over_start_mb']:.0f} MB"
            for e in entries) + f" ({time.perf_counter() - started:.0f}s elapsed)", flush=True)
    for entry in entries:
        finish_train_result(args, entry)

    def per_round(entry, key) -> dict:
        return round_summary([w[key] / f[key] for w, f in zip(entry.windows, entries[0].windows)])

    rows = {}
    for entry in entries:
        r = entry.result["train"]
        for w in entry.windows:
            w["peak_over_start_mb"] = w["memory"]["peak_over_start_mb"]
        rows[entry.name] = {
            "trainable_parameters": r["trainable_parameters"],
            "parameters": r["parameters"],
            "trainable_share": r["trainable_parameters"] / r["parameters"],
            "peak_over_start_mb": statistics.median(w["peak_over_start_mb"] for w in entry.windows),
            "peak_over_start_mb_windows": [w["peak_over_start_mb"] for w in entry.windows],
            "memory_kind": r["memory"]["kind"],
            "step_ms": r["step_ms"],
            "step_ms_windows": [w["step_ms"] for w in entry.windows],
            "peak_over_start_vs_full": per_round(entry, "peak_over_start_mb"),
            "step_time_vs_full": per_round(entry, "step_ms"),
        }
        entry.model = entry.train_ds = None
    cleanup()
    return {"device": device, "versions": versions, "members": names, "task": spec.name, "data": source,
            "batch_size": args.batch_size, "max_seq_length": args.max_seq_length, "bf16": args.bf16,
            "lora_r": args.lora_r, "warmup_steps": args.warmup, "timed_steps": args.steps, "rounds": args.repeats,
            "total_seconds": time.perf_counter() - started, "variants": rows}


def markdown(results: dict) -> str:
    def ratio(r) -> str:
        return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"

    memory_kind = next(iter(results["variants"].values()))["memory_kind"]
    lines = [f"# Scale-out benchmark: {', '.join(results['members'])} (DME), {results['task']}, batch "
             f"{results['batch_size']}, max length {results['max_seq_length']}",
             "", f"{results['device']}; {results['rounds']} interleaved rounds of {results['timed_steps']} timed "
             f"steps after {results['warmup_steps']}; memory: {memory_kind}; ratios to `full` per round: median "
             "(range)", "",
             "| variant | trainable parameters | share | peak memory over start (MB) | vs full | step (ms) "
             "| vs full |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results["variants"].items():
        lines.append(f"| {name} | {r['trainable_parameters']:,} | {100 * r['trainable_share']:.2f}% | "
                     f"{r['peak_over_start_mb']:.0f} | {ratio(r['peak_over_start_vs_full'])} | "
                     f"{r['step_ms']:.0f} | {ratio(r['step_time_vs_full'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    return benchmark_main(ScaleArguments, run, markdown, argv)


if __name__ == "__main__":
    main()
