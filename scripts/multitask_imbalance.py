#!/usr/bin/env python
"""The imbalance experiment of the README: an abundant task (CoNLL-2003 NER) beside a small one (TREC, 500 training
questions) on one multi-encoder, with run_multitask.py and configs/multitask/imbalance.yaml.

    python scripts/multitask_imbalance.py                    # every row, 3 seeds: 14 min on a quiet 2-core CPU
    python scripts/multitask_imbalance.py --rows proportional --seeds 1

Rows (the same optimizer-step budget each): the small task alone; both tasks with proportional sampling; with
temperature sampling (T=2); with temperature sampling and the NER head frozen half way; and a control, the small task
alone for as many steps as temperature sampling gives it. Writes, per row,
`run_multitask.py`'s outputs under `--output_dir/<row>/`, and the table `--results`.md / .json (per row: TREC
accuracy and NER entity F1 x100 of every seed, median, mean, std; optimizer steps per task; seconds). A row whose
results exist for the same seeds and steps is read back, not rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from hf_multiencoder.training.results import mean_by_key
from hf_multiencoder.training.runs import run_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_MULTITASK = os.path.join(REPO, "run_multitask.py")

CONFIG = os.path.join(REPO, "configs", "multitask", "imbalance.yaml")
SMALL, ABUNDANT = "trec", "ner"


def rows(max_steps: int) -> dict[str, tuple[str, list[str], int]]:
    """Row name -> (description, run_multitask.py arguments on top of the config, optimizer steps)."""
    temperature = ["--task_sampling", "temperature", "--sampling_temperature", "2"]
    alone = ["--tasks", json.dumps({SMALL: {"task_name": "trec", "max_train_samples": 500}})]
    short = max_steps // 5  # about the TREC steps temperature sampling gives: does NER help them?
    return {
        "trec_alone": ("TREC alone", alone, max_steps),
        "proportional": ("both, proportional sampling", ["--task_sampling", "proportional"], max_steps),
        "temperature": ("both, temperature sampling (T=2)", temperature, max_steps),
        "temperature_ner_head_frozen": (
            f"both, T=2, NER head frozen after {max_steps // 2} steps",
            [*temperature, "--freeze", json.dumps({"heads_after": {ABUNDANT: max_steps // 2}})], max_steps),
        "trec_alone_short": (f"TREC alone, {short} steps (the TREC steps T=2 gives)", alone, short),
    }


def run_row(name: str, extra: list[str], steps: int, args) -> dict:
    out = os.path.join(args.output_dir, name)
    results_path = os.path.join(out, "results.json")
    if os.path.isfile(results_path):
        with open(results_path) as f:
            table = json.load(f)
        done = sorted(r["seed"] for r in table["runs"])
        if done == sorted(args.seeds) and {sum((r.get("task_steps") or {}).values()) for r in table["runs"]} == {
                steps}:
            print(f"[imbalance] {name}: results exist in {out}, not rerun", flush=True)
            return table
    start = time.time()
    # a row folder without matching results is an interrupted or other run: start it afresh
    run_script(RUN_MULTITASK, [CONFIG, "--output_dir", out, "--seeds", *map(str, args.seeds),
                               "--max_steps", str(steps), "--overwrite_output_dir", "true", *extra, *args.overrides])
    with open(results_path) as f:  # run_multitask.py's table
        table = json.load(f)
    table["seconds"] = round(time.time() - start, 1)
    with open(results_path, "w") as f:
        json.dump(table, f, indent=2)
    return table


def summary_row(name: str, description: str, table: dict) -> dict:
    tasks = table["tasks"]
    steps = mean_by_key(r.get("task_steps") for r in table["runs"]) or {}
    return {
        "row": name,
        "description": description,
        "trec_accuracy": tasks.get(SMALL, {}).get("final"),
        "ner_f1": tasks.get(ABUNDANT, {}).get("final"),
        "mean_steps": steps,
        "seconds": table.get("seconds"),
    }


def write_table(summary: list[dict], args, path: str) -> None:
    with open(f"{path}.json", "w") as f:
        json.dump({"max_steps": args.max_steps, "seeds": args.seeds, "threads": args.threads,
                   "config": os.path.relpath(CONFIG, REPO), "rows": summary}, f, indent=2)

    def cell(s):
        if not s:
            return "-"
        seeds = ", ".join(f"{v:.1f}" for v in s["scores"])
        return f"{s['median']:.1f} ({s['mean']:.1f} ± {s['std']:.1f}; {seeds})"

    lines = [f"Imbalance experiment: {args.max_steps} optimizer steps of 16 examples per run (unless the row says "
             f"otherwise), seeds "
             f"{', '.join(map(str, args.seeds))}; scores x100, median (mean ± std; per seed).", "",
             "| row | TREC accuracy | NER entity F1 | steps TREC / NER (mean) | seconds (all seeds) |",
             "|---|---|---|---|---|"]
    for r in summary:
        steps = r["mean_steps"]
        lines.append(f"| {r['description']} | {cell(r['trec_accuracy'])} | {cell(r['ner_f1'])} | "
                     f"{steps.get(SMALL, 0):.0f} / {steps.get(ABUNDANT, 0):.0f} | {r['seconds'] or '-'} |")
    with open(f"{path}.md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=None, help="Rows to run (default: all).")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--max_steps", type=int, default=100, help="Optimizer steps of every run.")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: on a CPU shared with other jobs, 2 threads ran 3.6x slower).")
    parser.add_argument("--output_dir", default=os.path.join(REPO, "outputs", "multitask", "imbalance"))
    parser.add_argument("--results", default=os.path.join(REPO, "results", "multitask_imbalance"),
                        help="Path of the table, without extension (.md and .json are written).")
    parser.add_argument("overrides", nargs="*", help="Further run_multitask.py arguments, after `--`.")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    all_rows = rows(args.max_steps)
    unknown = sorted(set(args.rows or []) - set(all_rows))
    if unknown:
        raise SystemExit(f"Unknown row(s) {unknown}; rows are: {', '.join(all_rows)}.")
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    start = time.time()
    summary = []
    for name, (description, extra, steps) in all_rows.items():
        if args.rows and name not in args.rows:
            continue
        print(f"[imbalance] {name}: {description}", flush=True)
        summary.append(summary_row(name, description, run_row(name, extra, steps, args)))
        write_table(summary, args, args.results)
    print(f"[imbalance] done in {time.time() - start:.0f} s", flush=True)
    return summary


if __name__ == "__main__":
    main()
