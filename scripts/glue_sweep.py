"""Does tuning together pay? Each member alone and the pair fused (concat, dme, cdme) on CoLA, STS-B, MRPC and RTE,
5 seeds each, with run_glue_multi.py and the shipped configs; several trainings at once on one GPU; resumable.

    python scripts/glue_sweep.py --workers 8 --bf16 [--tasks cola stsb mrpc rte] [--seeds 1 2 3 4 5]
        [--member MiniLM=/path/to/minilm --member MPNet=/path/to/mpnet] [--runs_dir runs/glue] [--results results]

A run whose folder already holds results.json is skipped, so a sweep cut off by a time limit continues where it
stopped. `--aggregate_only` writes the tables from whatever has finished. Writes results/glue.json and
results/glue.md: per task and model the best-epoch scores (x100) of every seed, their median, mean and standard
deviation, the final-epoch summary, the mean fusion weight of each member and the run time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.results import mean_by_key, summarize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {  # name -> (config suffix, extra arguments, kind)
    "MiniLM": ("_minilm", [], "member"),
    "MPNet": ("_mpnet", [], "member"),
    "concat": ("", ["--fusion", "concat"], "fused"),
    "dme": ("", ["--fusion", "dme"], "fused"),
    "cdme": ("", ["--fusion", "cdme"], "fused"),
}


def job_command(task, model, seed, args, out_dir):
    suffix, extra, kind = MODELS[model]
    cmd = [sys.executable, os.path.join(REPO, "run_glue_multi.py"), os.path.join(REPO, "configs", "glue",
                                                                                   f"{task}{suffix}.yaml"),
           *extra, "--seed", str(seed), "--output_dir", out_dir, "--overwrite_output_dir", "true",
           "--save_strategy", "no",
           "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--logging_steps", "100"]
    if args.bf16:
        cmd += ["--bf16", "true"]
    if args.data_dir:
        cmd += ["--data_dir", args.data_dir]
    members = dict(m.split("=", 1) for m in args.member)
    if members:
        if kind == "fused":
            cmd += ["--encoders", members["MiniLM"], members["MPNet"], "--encoder_names", "MiniLM", "MPNet"]
        else:
            cmd += ["--encoders", members[model], "--encoder_names", model]
        # the same members from another place: the config's per-member rates still apply (run_glue_multi.py refuses
        # a config's per-member options left behind when the members change, so they are given again)
        with open(cmd[2], encoding="utf-8") as f:
            rates = yaml.safe_load(f).get("encoder_learning_rates")
        if rates:
            cmd += ["--encoder_learning_rates", *map(str, rates)]
    return cmd + args.extra


def run_job(task, model, seed, args) -> str:
    out_dir = os.path.join(args.runs_dir, task, model, f"seed_{seed}")
    if os.path.isfile(os.path.join(out_dir, "results.json")):
        return f"skip {task}/{model}/{seed}"
    os.makedirs(out_dir, exist_ok=True)
    start = time.time()
    with open(os.path.join(out_dir, "log.txt"), "w") as log:
        proc = subprocess.run(job_command(task, model, seed, args, out_dir), stdout=log, stderr=subprocess.STDOUT,
                              cwd=REPO)
    status = "ok" if proc.returncode == 0 else f"FAILED (rc {proc.returncode}, see {out_dir}/log.txt)"
    return f"{task}/{model}/seed {seed}: {status} in {time.time() - start:.0f}s"


def aggregate(args) -> dict:
    table: dict = {}
    for task in args.tasks:
        for model, (_, _, kind) in MODELS.items():
            runs = []
            for seed in args.seeds:
                path = os.path.join(args.runs_dir, task, model, f"seed_{seed}", "results.json")
                if os.path.isfile(path):
                    runs.append(json.load(open(path)))
            if not runs:
                continue
            entry = {**summarize(r["best_epoch"]["scores"][0] for r in runs), "kind": kind,
                     "seeds": args.seeds[:len(runs)],
                     "final_epoch": summarize(r["final_epoch"]["scores"][0] for r in runs),
                     "train_seconds": summarize(r["runs"][0]["train_seconds"] for r in runs)["mean"]}
            weights = mean_by_key(r.get("mean_fusion_weights") for r in runs)
            if weights:
                entry["mean_fusion_weights"] = weights
            table.setdefault(task, {})[model] = entry
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "glue.json"), "w") as f:
        json.dump(table, f, indent=2)
    with open(os.path.join(args.results, "glue.md"), "w") as f:
        f.write(markdown(table, args))
    return table


def markdown(table: dict, args) -> str:
    lines = ["# Tuning MiniLM and MPNet together on GLUE", "",
             f"Best dev epoch, median of {len(args.seeds)} seeds (x100; mean ± std in brackets). "
             "Final-epoch medians in the second table. Members' mean DME/CDME weight in the last column.", ""]
    models = list(MODELS)
    lines.append("| task (metric) | " + " | ".join(models) + " | best member | best fusion - best member |")
    lines.append("|---" * (len(models) + 3) + "|")
    for task, rows in table.items():
        cells = []
        for m in models:
            e = rows.get(m)
            cells.append(f"{e['median']:.1f} ({e['mean']:.1f} ± {e['std']:.1f})" if e else "-")
        members = [rows[m] for m in ("MiniLM", "MPNet") if m in rows]
        fused = [rows[m] for m in ("concat", "dme", "cdme") if m in rows]
        if members and fused:
            best_m = max(members, key=lambda e: e["median"])
            best_f = max(fused, key=lambda e: e["median"])
            gap = best_f["median"] - best_m["median"]
            verdict = f"{gap:+.1f} ({'> 1 std' if gap > best_m['std'] else 'within 1 std' if gap >= 0 else 'below'})"
            lines.append(f"| {task} ({get_task(task).metric_display_name}) | " + " | ".join(cells) +
                         f" | {best_m['median']:.1f} | {verdict} |")
        else:
            lines.append(f"| {task} | " + " | ".join(cells) + " | - | - |")
    lines += ["", "| task | " + " | ".join(models) + " | mean fusion weights (dme; cdme) |", "|---" * (len(models) + 2)
              + "|"]
    for task, rows in table.items():
        cells = [f"{rows[m]['final_epoch']['median']:.1f}" if m in rows else "-" for m in models]
        w = "; ".join(", ".join(f"{k} {v:.2f}" for k, v in rows[m]["mean_fusion_weights"].items())
                      for m in ("dme", "cdme") if m in rows and rows[m].get("mean_fusion_weights"))
        lines.append(f"| {task} | " + " | ".join(cells) + f" | {w} |")
    times = [f"{task} " + ", ".join(f"{m} {e['train_seconds']:.0f}" for m, e in rows.items())
             for task, rows in table.items()]
    lines += ["", "Run time per training (s): " + "; ".join(times)]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["cola", "stsb", "mrpc", "rte"])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--member", action="append", default=[], help="NAME=PATH: load member NAME from PATH")
    ap.add_argument("--runs_dir", default=os.path.join(REPO, "runs", "glue"))
    ap.add_argument("--results", default=os.path.join(REPO, "results"))
    ap.add_argument("--aggregate_only", action="store_true")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: arguments passed to every run")
    args = ap.parse_args()
    args.extra = [a for a in args.extra if a != "--"]
    if not args.aggregate_only:
        # Longest jobs first (fused CoLA/STS-B), so the pool ends evenly.
        order = {"cola": 0, "stsb": 1, "mrpc": 2, "rte": 3}
        jobs = sorted(((t, m, s) for s in args.seeds for t in args.tasks for m in args.models),
                      key=lambda j: (j[2], order.get(j[0], 9), MODELS[j[1]][2] != "fused"))
        start = time.time()
        with ThreadPoolExecutor(args.workers) as pool:
            for line in pool.map(lambda j: run_job(*j, args), jobs):
                print(f"[{time.time() - start:6.0f}s] {line}", flush=True)
    table = aggregate(args)
    print(markdown(table, args))


if __name__ == "__main__":
    main()
