#!/usr/bin/env python
"""Peak memory of assembling a multi-encoder: `MultiEncoderForSequenceClassification.from_encoders(members)`.

Each measurement runs in a fresh interpreter (peak RSS is per process): the rise of the process's peak resident
memory over the state after `import hf_multiencoder`, right after `from_encoders` and again after every weight has
been read once (transformers memory-maps safetensors files, so untouched weights are not resident yet), against the
size of the model's parameters.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_assembly.py --out benchmarks/results/assembly_cpu.json
    # an older checkout of the package, measured the same way (e.g. `git worktree add /tmp/old <commit>`):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_assembly.py --code_roots . /tmp/old --labels now old --out ...
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

from transformers import HfArgumentParser

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MEASURE = textwrap.dedent("""
    import json, resource, sys, time
    import torch
    import hf_multiencoder
    from hf_multiencoder import MultiEncoderForSequenceClassification

    def peak_mb():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    start = peak_mb()
    begin = time.perf_counter()
    model = MultiEncoderForSequenceClassification.from_encoders(json.loads(sys.argv[1]), fusion="dme", num_labels=2)
    seconds = time.perf_counter() - begin
    assembled = peak_mb()
    with torch.no_grad():
        for p in model.parameters():  # read every weight once, as the first training step would
            float(p.float().sum())
    print(json.dumps({"peak_over_import_mb": assembled - start, "peak_after_reading_weights_mb": peak_mb() - start,
                      "parameters_mb": sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20,
                      "seconds": seconds, "package": hf_multiencoder.__file__}))
""")


@dataclass
class AssemblyArguments:
    encoders: list[str] = field(default_factory=lambda: ["sentence-transformers/all-MiniLM-L6-v2",
                                                         "sentence-transformers/all-mpnet-base-v2"])
    code_roots: list[str] = field(default_factory=lambda: ["."], metadata={
        "help": "Checkouts of the package to measure (folders holding hf_multiencoder/), relative to the project."})
    labels: list[str] | None = field(default=None, metadata={
        "help": "A name per checkout for the table (default: the folders as given)."})
    repeats: int = field(default=2, metadata={"help": "Fresh processes per checkout (the table shows the median)."})
    out: str | None = field(default=None, metadata={"help": "JSON path; a Markdown table is written beside it."})


def measure(code_root: str, encoders: list[str]) -> dict:
    root = os.path.abspath(os.path.join(REPO_ROOT, code_root))
    env = dict(os.environ, PYTHONPATH=root)  # run from the checkout: `python -c` puts the working folder first
    proc = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(encoders)], capture_output=True, text=True,
                          env=env, cwd=root, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"measuring {code_root} failed: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result.pop("package").startswith(root + os.sep):
        raise RuntimeError(f"measuring {code_root} imported another copy of hf_multiencoder")
    return result


def markdown(results: dict) -> str:
    lines = [f"Peak RSS of `from_encoders({results['encoders']})` over the state after import (median of "
             f"{results['repeats']} fresh processes).", "",
             "| code | parameters MB | peak after from_encoders MB | peak after reading every weight MB | seconds |",
             "|---|---|---|---|---|"]
    for root, row in results["runs"].items():
        lines.append(f"| {root} | {row['parameters_mb']:.0f} | {row['peak_over_import_mb']:.0f} | "
                     f"{row['peak_after_reading_weights_mb']:.0f} | {row['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    (args,) = HfArgumentParser(AssemblyArguments).parse_args_into_dataclasses(args=argv)
    labels = args.labels or args.code_roots
    if len(labels) != len(args.code_roots):
        raise ValueError(f"{len(labels)} --labels for {len(args.code_roots)} --code_roots.")
    runs = {}
    for root, label in zip(args.code_roots, labels):
        samples = [measure(root, args.encoders) for _ in range(args.repeats)]
        runs[label] = {key: sorted(s[key] for s in samples)[len(samples) // 2] for key in samples[0]}
        runs[label]["samples"] = samples
    results = {"encoders": args.encoders, "repeats": args.repeats, "runs": runs}
    table = markdown(results)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(table)
    return results


if __name__ == "__main__":
    main()
