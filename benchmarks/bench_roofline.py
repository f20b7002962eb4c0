#!/usr/bin/env python
"""Training speed against the machine's own peak: how far each contestant is from what the matrix units can do.

In one run it measures:

* the machine's matmul peak in fp32 and in bf16 (autocast), on transformer-shaped matmuls (best of the shapes);
* the FLOPs of one training step of each contestant (`torch.utils.flop_counter`, forward + backward);
* per contestant and sequence length: samples/s, the step split into data (collating a batch of real sentences),
  forward + backward and optimizer, and the model FLOPs utilisation (MFU) against each peak.

Contestants, interleaved (A B C ... then C B A ..., `--rounds` times), batch 32 at 32 and 128 tokens by default:

- `plain/<member>/fp32`: the member as `AutoModelForSequenceClassification`, fp32, `torch.optim.AdamW` (foreach):
  transformers' stock setup before `adamw_torch_fused` became its default, and the plugin's optimizer before the
  fast path;
- `plain/<member>/fast`: the same on the fast path (`hf_multiencoder.training.fast_path`: bf16 autocast where the
  hardware computes bf16, the fused AdamW);
- `plugin/<member>/fast`: `MultiEncoderForSequenceClassification` with only that member, fast path, the package's
  optimizer;
- `pair/fp32`, `pair/fast`: the fused pair (DME), before and on the fast path;
- `cache/pair/fp32`, `cache/pair/fast`: the frozen pair's forward pass alone (no gradients), what the feature cache
  runs.

Each contestant takes `--warmup` untimed steps before its first round. `--force_bf16` adds bf16 contestants even
where bf16 does not pay (on a CPU without bf16 matrix units a step takes minutes: keep `--lengths 32` and
`--steps 1`). Results: `--out` (JSON) and the same name with `.md`.

    HF_HUB_OFFLINE=1 python benchmarks/bench_roofline.py --out benchmarks/results/roofline_cpu.json
    python benchmarks/bench_roofline.py --tiny      # tiny random members: a smoke test in seconds
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import torch
import transformers
from harness import DEFAULT_MEMBERS, git_commit, save_results
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, HfArgumentParser

import hf_multiencoder
from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderTokenizer,
    create_multiencoder_optimizer,
    freeze_encoders,
    load_task,
)
from hf_multiencoder.models.precision_multiencoder import bf16_pays, cpu_bf16_units, cpu_model
from hf_multiencoder.testing_utils import build_tiny_encoders
from hf_multiencoder.training.fast_path import auto_training_kwargs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


@dataclass
class RooflineArguments:
    members: list[str] = field(default_factory=lambda: list(DEFAULT_MEMBERS),
                               metadata={"help": "The pair's members; the last one is timed alone too."})
    tiny: bool = field(default=False, metadata={"help": "Tiny random members (a smoke test in seconds)."})
    lengths: list[int] = field(default_factory=lambda: [32, 128], metadata={"help": "Tokens per example."})
    batch_size: int = field(default=32, metadata={"help": "Examples per step."})
    steps: int = field(default=2, metadata={"help": "Timed steps per contestant and round."})
    warmup: int = field(default=1, metadata={"help": "Untimed steps per contestant before its first round."})
    rounds: int = field(default=2, metadata={"help": "Interleaved rounds (the order reversed every round)."})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (default: torch's)."})
    force_bf16: bool = field(default=False, metadata={"help": "Add bf16 contestants even where bf16 does not pay."})
    data_dir: str | None = field(default=None, metadata={"help": "Data folder (default ../shared/data)."})
    out: str | None = field(default=None, metadata={
        "help": "JSON path (default benchmarks/results/roofline_cpu.json)."})

    def __post_init__(self):
        if self.steps < 1 or self.warmup < 0 or self.rounds < 1 or self.batch_size < 1:
            raise ValueError("`steps`, `rounds` and `batch_size` must be at least 1, `warmup` at least 0.")
        if any(n < 4 for n in self.lengths):
            raise ValueError(f"`lengths` must be at least 4 tokens each, got {self.lengths}.")
        if self.tiny:
            self.lengths = [min(n, 60) for n in self.lengths]  # the tiny members have 64 positions
        if self.out is None:
            name = "roofline_cpu_tiny.json" if self.tiny else "roofline_cpu.json"
            self.out = os.path.join(REPO_ROOT, "benchmarks", "results", name)


# ---- the machine ----------------------------------------------------------------------------------------------------
def cpu_info() -> dict:
    flags = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    return {"model": cpu_model(), "flags": {flag: flag in flags for flag in CPU_FLAGS},
            "torch_capability": torch.backends.cpu.get_cpu_capability(), "bf16_units": cpu_bf16_units(),
            "threads": torch.get_num_threads(), "bf16_pays": bf16_pays("cpu")[1]}


def matmul_peak(dtype: torch.dtype, budget_s: float = 3.0) -> dict:
    """GFLOP/s of the best of a few transformer-shaped matmuls (autocast for bf16), each timed for ~budget_s / 3."""
    shapes = [(1024, 768, 3072), (4096, 768, 768), (2048, 2048, 2048)]
    if dtype == torch.bfloat16 and not bf16_pays("cpu")[0]:
        shapes = [(256, 768, 3072)]  # emulated bf16 runs below 1% of fp32: one small matmul takes seconds
    best, per_shape = 0.0, {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == torch.bfloat16 else contextlib.nullcontext()
        with ctx:
            a[:64] @ b  # warm-up (a full one takes seconds where bf16 is emulated)
            start, runs = time.perf_counter(), 0
            while True:
                a @ b
                runs += 1
                elapsed = time.perf_counter() - start
                if elapsed > budget_s / len(shapes):
                    break
        gflops = 2 * m * k * n * runs / elapsed / 1e9
        per_shape[f"{m}x{k}x{n}"] = round(gflops, 1)
        best = max(best, gflops)
    return {"gflops": round(best, 1), "per_shape": per_shape}


# ---- data -----------------------------------------------------------------------------------------------------------
def sentences(args: RooflineArguments, n: int) -> list[str]:
    """Real text (CoLA training sentences joined until long enough), else generated words."""
    try:
        raw, _ = load_task("cola", data_dir=args.data_dir)
        pool = list(raw["train"]["sentence"][:4000])
    except Exception:  # no data folder: the smoke test still runs
        pool = ["the cat sat on the mat and he can will go to new york quickly"] * 64
    out, i = [], 0
    for _ in range(n):
        text = []
        while len(" ".join(text).split()) < 200:
            text.append(pool[i % len(pool)])
            i += 1
        out.append(" ".join(text))
    return out


# ---- contestants ----------------------------------------------------------------------------------------------------
@dataclass
class Contestant:
    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    features: list[dict]
    collate: object
    bf16: bool
    train: bool = True
    times: dict = field(default_factory=lambda: {"data": [], "fwd_bwd": [], "optimizer": []})
    flops: float | None = None

    def _forward(self, batch):
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with ctx:
            return self.model(**batch)

    def step(self, record: bool) -> None:
        t0 = time.perf_counter()
        batch = self.collate(self.features)
        t1 = time.perf_counter()
        if self.train:
            self._forward(batch).loss.backward()
            t2 = time.perf_counter()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                self._forward(batch)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        if record:
            self.times["data"].append(t1 - t0)
            self.times["fwd_bwd"].append(t2 - t1)
            self.times["optimizer"].append(t3 - t2)

    def count_flops(self) -> None:
        batch = self.collate(self.features)
        with FlopCounterMode(display=False) as counter:
            if self.train:
                self._forward(batch).loss.backward()
            else:
                with torch.no_grad():
                    self._forward(batch)
        if self.train:
            self.model.zero_grad(set_to_none=True)
        self.flops = float(counter.get_total_flops())


def plain_contestant(name, checkpoint, texts, length, batch_size, fast: dict, bf16: bool) -> Contestant:
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0,
                                  fused=True if fast.get("optim") == "adamw_torch_fused" else None)
    features = [dict(tok(t, truncation=True, max_length=length, padding="max_length"), labels=i % 2)
                for i, t in enumerate(texts[:batch_size])]
    return Contestant(name, model, optimizer, features, DataCollatorWithPadding(tok), bf16)


def plugin_contestant(name, checkpoints, names, texts, length, batch_size, fast: dict, bf16: bool,
                      frozen: bool = False) -> Contestant:
    tok = MultiEncoderTokenizer.from_encoders(checkpoints, encoder_names=names)
    model = MultiEncoderForSequenceClassification.from_encoders(checkpoints, encoder_names=names, fusion="dme",
                                                                num_labels=2).train()
    optimizer = None
    if frozen:
        freeze_encoders(model, list(range(len(checkpoints))))
        model.eval()
    else:
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir=tempfile.mkdtemp(), report_to="none", use_cpu=True, learning_rate=2e-5,
                                 optim=fast.get("optim", "adamw_torch"))
        optimizer = create_multiencoder_optimizer(model, args)
    enc = tok(texts[:batch_size], truncation=True, max_length=length, padding="max_length")  # [member][example]
    features = [dict({k: [per_member[i] for per_member in v] for k, v in enc.items()}, labels=i % 2)
                for i in range(min(batch_size, len(texts)))]
    return Contestant(name, model, optimizer, features, MultiEncoderDataCollator(tok), bf16, train=not frozen)


def build_contestants(args: RooflineArguments, members: list[str], names: list[str], length: int,
                      texts: list[str]) -> list[Contestant]:
    fast = auto_training_kwargs()  # what the fast path picks on this machine
    fast_bf16 = bool(fast.get("bf16"))
    old = {"optim": "adamw_torch"}
    last, last_name = members[-1], names[-1]
    specs = [
        ("plain", f"plain/{last_name}/fp32", old, False),
        ("plain", f"plain/{last_name}/fast", fast, fast_bf16),
        ("plugin", f"plugin/{last_name}/fast", fast, fast_bf16),
        ("pair", "pair/fp32", old, False),
        ("pair", "pair/fast", fast, fast_bf16),
        ("cache", "cache/pair/fp32", old, False),
        ("cache", "cache/pair/fast", fast, fast_bf16),
    ]
    if args.force_bf16 and not fast_bf16:
        forced = dict(fast, bf16=True)
        specs += [("plain", f"plain/{last_name}/bf16-forced", forced, True),
                  ("pair", "pair/bf16-forced", forced, True), ("cache", "cache/pair/bf16-forced", forced, True)]
    out = []
    for kind, name, settings, bf16 in specs:
        name = f"{name}@{length}"
        if kind == "plain":
            out.append(plain_contestant(name, last, texts, length, args.batch_size, settings, bf16))
        elif kind == "plugin":
            out.append(plugin_contestant(name, [last], [last_name], texts, length, args.batch_size, settings, bf16))
        else:
            out.append(plugin_contestant(name, members, names, texts, length, args.batch_size, settings, bf16,
                                         frozen=kind == "cache"))
    return out


# ---- the run --------------------------------------------------------------------------------------------------------
def summarize(c: Contestant, batch_size: int, peaks: dict) -> dict:
    med = {k: statistics.median(v) for k, v in c.times.items()}
    step = sum(med.values())
    row = {
        "contestant": c.name, "bf16": c.bf16, "train": c.train,
        "samples_per_s": round(batch_size / step, 2),
        "step_ms": round(1000 * step, 3),
        "data_ms": round(1000 * med["data"], 2), "fwd_bwd_ms": round(1000 * med["fwd_bwd"], 1),
        "optimizer_ms": round(1000 * med["optimizer"], 1),
        "flop_per_step": int(c.flops),
        "gflop_per_step": round(c.flops / 1e9, 1),
        "achieved_gflops": round(c.flops / step / 1e9, 1),
        "raw_seconds": {k: [round(x, 4) for x in v] for k, v in c.times.items()},
    }
    for name, peak in peaks.items():
        row[f"mfu_vs_{name}_peak"] = round(c.flops / step / 1e9 / peak["gflops"], 3)
    return row


def main(argv: list[str] | None = None) -> dict:
    (args,) = HfArgumentParser(RooflineArguments).parse_args_into_dataclasses(args=argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    members, names = args.members, [m.rstrip("/").split("/")[-1] for m in args.members]
    if args.tiny:
        members = build_tiny_encoders(tempfile.mkdtemp())[:2]
        names = ["bert", "roberta"]
    machine = cpu_info()
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16, budget_s=1.5)}
    peaks["best"] = max(peaks.values(), key=lambda p: p["gflops"])
    print(f"CPU {machine['model']}, {machine['threads']} threads, bf16 units {machine['bf16_units'] or 'none'}; "
          f"matmul peak fp32 {peaks['fp32']['gflops']} GFLOP/s, bf16 {peaks['bf16']['gflops']} GFLOP/s", flush=True)
    texts = sentences(args, args.batch_size)
    rows = []
    for length in args.lengths:
        contestants = build_contestants(args, members, names, length, texts)
        for c in contestants:
            c.count_flops()
        for r in range(args.rounds):
            order = contestants if r % 2 == 0 else contestants[::-1]
            for c in order:
                warmup = args.warmup if r == 0 else 0  # the first steps of a model pay its allocations, once
                for i in range(warmup + args.steps):
                    c.step(record=i >= warmup)
                print(f"  round {r + 1}: {c.name} {1000 * statistics.median(c.times['fwd_bwd']):.0f} ms fwd(+bwd)",
                      flush=True)
        rows += [summarize(c, args.batch_size, peaks) for c in contestants]
        del contestants
    by_name = {row["contestant"]: row for row in rows}
    last = names[-1]
    ratios = {}
    for length in args.lengths:
        def get(name, key="samples_per_s", length=length):
            return by_name[f"{name}@{length}"][key]
        ratios[f"pair_fast_over_fp32@{length}"] = round(get("pair/fast") / get("pair/fp32"), 3)
        ratios[f"plain_fast_over_fp32@{length}"] = round(get(f"plain/{last}/fast") / get(f"plain/{last}/fp32"), 3)
        ratios[f"plugin_over_plain_fast@{length}"] = round(get(f"plugin/{last}/fast") / get(f"plain/{last}/fast"), 3)
        ratios[f"cache_fast_over_fp32@{length}"] = round(get("cache/pair/fast") / get("cache/pair/fp32"), 3)
        ratios[f"mfu_plain_fast_vs_best_peak@{length}"] = get(f"plain/{last}/fast", "mfu_vs_best_peak")
    result = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "machine": machine,
        "fast_path": auto_training_kwargs(),
        "peaks": peaks,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "hf_multiencoder": f"{hf_multiencoder.__version__} ({git_commit() or 'unknown'})",
                     "python": platform.python_version()},
        "load_average": os.getloadavg(),
        "rows": rows,
        "ratios": ratios,
    }
    save_results(result, args.out, to_markdown(result))
    return result


def to_markdown(result: dict) -> str:
    m, p, s = result["machine"], result["peaks"], result["settings"]
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in m["flags"].items())
    lines = [
        "# Training speed against the machine's peak (CPU)", "",
        f"- CPU: {m['model']}, {m['threads']} threads; torch capability {m['torch_capability']}; flags: {flags}",
        f"- bf16: {m['bf16_pays']}",
        f"- matmul peak: fp32 {p['fp32']['gflops']} GFLOP/s, bf16 autocast {p['bf16']['gflops']} GFLOP/s "
        f"(best of {', '.join(p['fp32']['per_shape'])})",
        f"- fast path here: {result['fast_path']}",
        f"- batch {s['batch_size']}, {s['warmup']} warm-up step(s) per contestant, then {s['steps']} timed per round, "
        f"{s['rounds']} interleaved rounds; medians over every timed step",
        f"- versions: {', '.join(f'{k} {v}' for k, v in result['versions'].items())}; "
        f"load average at the end {tuple(round(x, 2) for x in result['load_average'])}", "",
        "| contestant | samples/s | step ms | data ms | fwd+bwd ms | optimizer ms | GFLOP/step | GFLOP/s | "
        "MFU vs fp32 peak | MFU vs bf16 peak |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {r['contestant']} | {r['samples_per_s']} | {r['step_ms']} | {r['data_ms']} | "
                     f"{r['fwd_bwd_ms']} | {r['optimizer_ms'] if r['train'] else '-'} | {r['gflop_per_step']} | "
                     f"{r['achieved_gflops']} | {r['mfu_vs_fp32_peak']:.2f} | {r['mfu_vs_bf16_peak']:.2f} |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["ratios"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
