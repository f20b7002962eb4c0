"""Does fusion add information before any member is tuned? Frozen members, trained heads, real GLUE, 5 seeds.

    python scripts/glue_frozen.py [--tasks cola stsb mrpc rte] [--seeds 1 2 3 4 5] [--epochs 8]
        [--poolings cls mean last4] [--results results] [--runs_dir runs/glue_frozen]

For each task the real MiniLM and MPNet run once over the full train and dev sets (`training.frozen`: the
feature cache, cls / mean / last4 pooled from one pass of each member); then, for every pooling and seed, a head trains
on the stored vectors with the stock Trainer (a fixed budget of epochs, evaluated after each): each member alone,
`concat`, `dme` and `mean`. A finished run is kept in --runs_dir and skipped when the sweep is run again. Writes
results/glue_frozen.json (`{"cola": {"dme/mean": {"scores", "median", "mean", "std", "kind", "final_epoch",
"mean_fusion_weights", "train_seconds"}}}`, scores x100 at the best epoch) and results/glue_frozen.md.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.frozen import encode_task, train_head
from hf_multiencoder.training.protocol import REAL_MEMBERS
from hf_multiencoder.training.results import mean_by_key, summarize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENCODERS = REAL_MEMBERS
MODELS = {  # row -> (members, fusion, kind)
    "MiniLM": (["MiniLM"], "concat", "member"),
    "MPNet": (["MPNet"], "concat", "member"),
    "concat": (["MiniLM", "MPNet"], "concat", "fused"),
    "dme": (["MiniLM", "MPNet"], "dme", "fused"),
    "mean": (["MiniLM", "MPNet"], "mean", "fused"),
}


def run_task(task: str, args) -> dict:
    """Every model x pooling x seed of one task; finished runs are read back from --runs_dir."""
    start, threads = time.perf_counter(), torch.get_num_threads()
    encoders = {**ENCODERS, **dict(m.split("=", 1) for m in args.member)}
    encode_record = os.path.join(args.runs_dir, task, "encode.json")
    if args.report_only and not os.path.isfile(encode_record):
        print(f"[frozen] {task}: no finished runs, left out of the report", flush=True)
        return {}
    frozen = None if args.report_only else encode_task(
        task, list(encoders.values()), encoder_names=list(encoders), poolings=args.poolings, data_dir=args.data_dir,
        cache_dir=args.cache_dir, max_length=args.max_seq_length, max_train_samples=args.max_train_samples)
    if not os.path.isfile(encode_record):  # the first run computed the features: keep what it took
        os.makedirs(os.path.dirname(encode_record), exist_ok=True)
        with open(encode_record, "w") as f:
            json.dump({"seconds": round(frozen.seconds, 1), "examples": frozen.examples}, f)
    with open(encode_record) as f:
        encoding = json.load(f)
    print(f"[frozen] {task}: members ran over {encoding['examples']} examples in {encoding['seconds']:.0f}s",
          flush=True)
    torch.set_num_threads(args.head_threads)  # a head's steps are tiny: more threads only wait on each other
    rows = {}
    for model, (members, fusion, kind) in MODELS.items():
        for pooling in args.poolings:
            runs = []
            for seed in args.seeds:
                path = os.path.join(args.runs_dir, task, f"{model}-{pooling}", f"seed_{seed}.json")
                if os.path.isfile(path):
                    with open(path) as f:
                        runs.append(json.load(f))
                    continue
                if args.report_only:
                    break
                result = train_head(frozen, members, fusion=fusion, pooling=pooling, seed=seed, epochs=args.epochs,
                                    learning_rate=args.learning_rate, batch_size=args.batch_size)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    json.dump(result, f, indent=2)
                runs.append(result)
            if len(runs) < len(args.seeds):  # --report_only: a row without all its seeds is left out
                continue
            entry = {**summarize((r["best_epoch_score"] for r in runs), scale=100), "kind": kind, "fusion": fusion,
                     "pooling": pooling, "seeds": list(args.seeds),
                     "final_epoch": summarize((r["final_epoch_score"] for r in runs), scale=100),
                     "train_seconds": summarize(r["train_seconds"] for r in runs)["mean"]}
            if kind == "fused":
                entry["mean_fusion_weights"] = mean_by_key(r["fusion_weights"] for r in runs)
            rows[f"{model}/{pooling}"] = entry
            print(f"[frozen] {task} {model}/{pooling}: {entry['median']:.2f} ± {entry['std']:.2f} "
                  f"({time.perf_counter() - start:.0f}s)", flush=True)
    torch.set_num_threads(threads)
    head_seconds = sum(row["train_seconds"] * len(row["seeds"]) for row in rows.values())
    rows["_timing"] = {"encode_seconds": encoding["seconds"], "head_seconds": round(head_seconds),
                       "runs": len(rows) * len(args.seeds), "examples": encoding["examples"],
                       "this_call_seconds": round(time.perf_counter() - start)}
    return rows


def markdown(table: dict, args) -> str:
    lines = ["# Frozen members, trained heads: MiniLM and MPNet on GLUE", "",
             f"Members frozen (run once per task through the feature cache, max_seq_length {args.max_seq_length}), "
             f"heads trained {args.epochs} epochs (batch {args.batch_size}, lr {args.learning_rate}) on the full "
             f"training sets and evaluated on the full dev sets after each epoch; best-epoch median of "
             f"{len(args.seeds)} seeds x100 (± std). Rows: each member alone and the pair fused; columns: pooling.",
             ""]
    for task, rows in table.items():
        spec = get_task(task)
        lines += [f"## {spec.display_name} ({spec.metric_display_name})", "",
                  "| model | " + " | ".join(args.poolings) + " |", "|---" * (len(args.poolings) + 1) + "|"]
        for model in MODELS:
            cells = [rows.get(f"{model}/{p}") for p in args.poolings]
            lines.append(f"| {model} | " + " | ".join(f"{c['median']:.1f} ± {c['std']:.1f}" if c else "-"
                                                       for c in cells) + " |")
        members = [v for k, v in rows.items() if v.get("kind") == "member"]
        fused = [(k, v) for k, v in rows.items() if v.get("kind") == "fused"]
        if not members or not fused:
            lines += ["", "(Not every row has finished: no comparison yet.)", ""]
            continue
        best_member = max(members, key=lambda e: e["median"])
        best_key, best_fused = max(fused, key=lambda kv: kv[1]["median"])
        gap = best_fused["median"] - best_member["median"]
        spread = max(best_member["std"], best_fused["std"])
        verdict = "above by more than one std" if gap > spread else "within one std" if gap >= -spread else "below"
        weights = ", ".join(f"{k} {v:.2f}" for k, v in (best_fused.get("mean_fusion_weights") or {}).items())
        also = f"; its mean fusion weights {weights}" if weights else ""
        timing = rows["_timing"]
        lines += ["", f"Best fused ({best_key}) {best_fused['median']:.1f} vs best member "
                      f"{best_member['median']:.1f}: {gap:+.1f}, {verdict}{also}.",
                  f"Members ran {timing['encode_seconds']:.0f} s over {timing['examples']}; the {timing['runs']} "
                  f"heads trained {timing['head_seconds']} s in all.", ""]
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["cola", "stsb", "mrpc", "rte"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--poolings", nargs="+", default=["cls", "mean", "last4"])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--learning_rate", type=float, default=1e-3)
    ap.add_argument("--batch_size", type=int, default=128)
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--report_only", action="store_true",
                    help="write the tables from the finished runs only (rows missing a seed are left out)")
    ap.add_argument("--head_threads", type=int, default=1, help="torch threads while heads train (members use all)")
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--member", action="append", default=[], help="NAME=PATH: load member NAME from PATH")
    ap.add_argument("--max_train_samples", type=int, default=None, help="a smoke run on part of the training set")
    ap.add_argument("--cache_dir", default=os.path.join(REPO, "runs", "feature_cache"))
    ap.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "glue_frozen"))
    ap.add_argument("--results", default=os.path.join(REPO, "results"))
    args = ap.parse_args(argv)
    args.tasks = [get_task(task).name for task in args.tasks]  # an alias (`sts-b`) keys its runs as its task
    start = time.perf_counter()
    table = {task: rows for task in args.tasks if (rows := run_task(task, args))}
    os.makedirs(args.results, exist_ok=True)
    summary = {"settings": {k: v for k, v in vars(args).items() if k not in ("cache_dir", "runs_dir", "results",
                                                                              "data_dir", "report_only")},
               "members": ENCODERS, "this_call_seconds": round(time.perf_counter() - start),
               "seconds": round(sum(r["_timing"]["encode_seconds"] + r["_timing"]["head_seconds"]
                                    for r in table.values()))}
    with open(os.path.join(args.results, "glue_frozen.json"), "w") as f:
        json.dump({**{t: {k: v for k, v in rows.items() if not k.startswith("_")} for t, rows in table.items()},
                   "_run": summary, "_timing": {t: rows["_timing"] for t, rows in table.items()}}, f, indent=2)
    text = markdown(table, args) + (f"\nWhole run: {summary['seconds']} s of members and heads (a rerun reads "
                                    f"finished runs back).\n")
    with open(os.path.join(args.results, "glue_frozen.md"), "w") as f:
        f.write(text)
    print(text)
    return table


if __name__ == "__main__":
    main()
