"""Does adapting the members to the domain pay? The seed's four-way protocol, for one member or a fused stack, on a
registered task or your CSV files, over several seeds (same data, settings and seeds in every row):

    1. head_only             frozen members, only fusion + head trained
    2. behavioural           the members fine-tuned with the head (the usual fine-tuning)
    3. adaptive_head_only    members first adapted on the task's training texts (masked LM), then frozen, head only
    4. adaptive_behavioural  adapted, then fine-tuned

    python scripts/adaptive_protocol.py --encoders sentence-transformers/all-MiniLM-L6-v2 --encoder_names MiniLM \
        --task_name fb_va --seeds 1 2 3 --output_dir runs/adaptive/minilm [--adaptation_epochs 3] [-- RUN_GLUE_ARGS]

Adaptation runs once (`adapt_members`, the library defaults: the new masked-LM head warmed up with the member
frozen, then the member at lr 1e-5; seed = the first seed) on the training texts the task phase sees, and is reused
by rows 3 and 4 (`--adapted_encoders` reuses members adapted elsewhere, e.g. by run_mlm_multi.py). Each row is
run_glue_multi.py with `--seeds`. The task phase defaults to the seed's: batch 8, lr 2e-5, weight decay 0.01,
8 epochs, evaluated every epoch (the head's rate: `--head_learning_rate`, default 1e-3 as the shipped configs).
Frozen rows run each member once over the data (`--frozen_feature_cache`) and train the head on the stored vectors.
A row whose results.json exists is skipped, so a cut-off run continues. Writes `protocol.md` and `protocol.json`:
best-epoch and final-epoch scores (x100, median and std over seeds) per row, the adapted rows' difference to their
unadapted twin, each row's wall time (all seeds, data and model loading included), and the members' held-out
masked-LM loss and perplexity before and after adaptation.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from hf_multiencoder.data.corpus import build_corpus, task_texts
from hf_multiencoder.data.loading import load_task
from hf_multiencoder.pretraining.adaptation import (
    RESULTS_FILE,
    adapt_members,
    default_training_arguments,
    format_table,
)
from hf_multiencoder.training.results import format_summary
from hf_multiencoder.training.runs import run_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_GLUE_MULTI = os.path.join(REPO, "run_glue_multi.py")

ROWS = {  # name -> (adapted members?, members frozen?)
    "head_only": (False, True),
    "behavioural": (False, False),
    "adaptive_head_only": (True, True),
    "adaptive_behavioural": (True, False),
}
TWIN = {"adaptive_head_only": "head_only", "adaptive_behavioural": "behavioural"}


def adapt(args) -> tuple[list[str], dict | None]:
    """Members adapted on the task's training texts (or those given); returns their folders and the report."""
    if args.adapted_encoders:
        if len(args.adapted_encoders) != len(args.encoders):
            raise ValueError(f"--adapted_encoders has {len(args.adapted_encoders)} folders for "
                             f"{len(args.encoders)} members.")
        return args.adapted_encoders, reported_adaptation(args.adapted_encoders)
    raw, spec = load_task(args.task_name, data_dir=args.data_dir, train_file=args.train_file,
                          validation_file=args.validation_file)
    train = raw["train"]
    if args.max_train_samples is not None:  # the rows' --max_train_samples: the first examples
        train = train.select(range(min(args.max_train_samples, len(train))))
    texts = task_texts(spec, dataset=train)
    corpus = build_corpus(texts, seed=args.seeds[0], source=f"the {spec.name} training texts")
    training_args = default_training_arguments(
        os.path.join(args.output_dir, "adapted"), num_train_epochs=args.adaptation_epochs,
        learning_rate=args.adaptation_learning_rate, seed=args.seeds[0], use_cpu=args.use_cpu, bf16=args.bf16,
        disable_tqdm=True, logging_steps=50, resume_from_checkpoint=True)
    report = adapt_members(args.encoders, corpus, training_args, encoder_names=args.encoder_names,
                           objective=args.objective, max_seq_length=args.max_seq_length,
                           head_warmup=args.head_warmup, adapt_members=args.adapt_members)
    return report["encoders"], report


def reported_adaptation(folders: list[str]) -> dict | None:
    """The adaptation report of members adapted elsewhere (`adaptation_results.json` beside their folders)."""
    members = []
    for folder in folders:
        path = os.path.join(os.path.dirname(os.path.normpath(folder)), RESULTS_FILE)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        name = os.path.basename(os.path.normpath(folder))
        members += [m for m in report["members"] if m["name"] == name]
    return {"settings": report["settings"], "members": members, "table": format_table(members)}


def row_arguments(args, row: str, encoders: list[str]) -> list[str]:
    adapted, frozen = ROWS[row]
    argv = ["--encoders", *encoders, "--encoder_names", *args.encoder_names, "--fusion", args.fusion,
            "--output_dir", os.path.join(args.output_dir, row), "--seeds", *map(str, args.seeds),
            "--max_seq_length", str(args.max_seq_length), "--num_train_epochs", str(args.num_train_epochs),
            "--learning_rate", str(args.learning_rate), "--per_device_train_batch_size", str(args.batch_size),
            "--per_device_eval_batch_size", "64", "--weight_decay", str(args.weight_decay),
            "--head_learning_rate", str(args.head_learning_rate), "--do_train", "--do_eval",
            "--eval_strategy", "epoch", "--save_strategy", "no", "--load_best_model_at_end", "false",
            "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "50",
            "--overwrite_output_dir", "true"]  # only unfinished rows run: what a cut-off run left is replaced
    if args.task_name:
        argv += ["--task_name", args.task_name]
    for option in ("data_dir", "train_file", "validation_file", "max_train_samples", "max_eval_samples"):
        if getattr(args, option) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    if args.use_cpu:
        argv += ["--use_cpu", "true"]
    if args.bf16:
        argv += ["--bf16", "true"]
    if frozen:
        argv += ["--freeze_encoders", *map(str, range(len(encoders)))]
        if args.fusion != "cdme":  # frozen members run once, their vectors are reused by every epoch and seed
            argv += ["--frozen_feature_cache", os.path.join(args.output_dir, "feature_cache")]
    return argv + args.extra


def table(rows: dict, adaptation: dict | None, args, metric: str) -> dict:
    out = {"task": args.task_name or args.train_file, "metric": metric, "members": args.encoder_names,
           "fusion": args.fusion, "seeds": args.seeds, "rows": {}, "adaptation": adaptation}
    for row, result in rows.items():
        entry = {"best_epoch": result["best_epoch"], "final_epoch": result["final_epoch"],
                 "seconds": result["seconds"]}
        twin = rows.get(TWIN.get(row))
        if twin:
            for key in ("best_epoch", "final_epoch"):
                delta = result[key]["median"] - twin[key]["median"]
                spread = max(result[key]["std"], twin[key]["std"])
                verdict = "higher" if delta > spread else "lower" if delta < -spread else "within spread"
                entry[f"{key}_delta"] = {"delta": delta, "spread": spread, "verdict": verdict}
        out["rows"][row] = entry
    return out


def cell(summary: dict) -> str:
    return f"{summary['median']:.1f} ({summary['mean']:.1f} ± {summary['std']:.1f})"


def markdown(summary: dict) -> str:
    lines = [f"# Adaptive then behavioural fine-tuning: {summary['task']}, {' + '.join(summary['members'])} "
             f"({summary['fusion']})", "",
             f"{summary['metric']} x100, seeds {summary['seeds']}: median (mean ± std); the adapted rows' median "
             f"minus their unadapted twin's, against the larger of the two stds.", "",
             "| row | best epoch | final epoch | best: adapted - unadapted | final: adapted - unadapted | seconds |",
             "|---|---|---|---|---|---|"]
    for row, e in summary["rows"].items():
        deltas = [f"{e[k]['delta']:+.1f} ({e[k]['verdict']}; std {e[k]['spread']:.1f})" if k in e else "-"
                  for k in ("best_epoch_delta", "final_epoch_delta")]
        seconds = "-" if e["seconds"] is None else f"{e['seconds']:.0f}"
        lines.append(f"| {row} | {cell(e['best_epoch'])} | {cell(e['final_epoch'])} | {deltas[0]} | {deltas[1]} | "
                     f"{seconds} |")
    if summary.get("adaptation"):
        lines += ["", "Held-out masked-LM loss of each member (perplexity = exp(loss)):", "",
                  summary["adaptation"]["table"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoders", nargs="+", required=True)
    ap.add_argument("--encoder_names", nargs="+", default=None)
    ap.add_argument("--fusion", default=None, help="default: dme for several members, concat for one")
    ap.add_argument("--task_name", default=None)
    ap.add_argument("--train_file", default=None)
    ap.add_argument("--validation_file", default=None)
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--max_train_samples", type=int, default=None)
    ap.add_argument("--max_eval_samples", type=int, default=None)
    ap.add_argument("--max_seq_length", type=int, default=128)
    ap.add_argument("--num_train_epochs", type=float, default=8)
    ap.add_argument("--learning_rate", type=float, default=2e-5)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--weight_decay", type=float, default=0.01)
    ap.add_argument("--head_learning_rate", type=float, default=1e-3)
    ap.add_argument("--adaptation_epochs", type=float, default=3)
    ap.add_argument("--adaptation_learning_rate", type=float, default=1e-5)
    ap.add_argument("--objective", default="mlm")
    ap.add_argument("--head_warmup", default="auto", choices=["auto", "always", "never"])
    ap.add_argument("--adapt_members", nargs="+", default=None)
    ap.add_argument("--adapted_encoders", nargs="+", default=None, help="members adapted elsewhere (skip adapting)")
    ap.add_argument("--use_cpu", action="store_true")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast in adaptation and tuning (GPUs; recent CPUs)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: arguments passed to every run_glue_multi run")
    args = ap.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]
    if not args.task_name and not args.train_file:
        ap.error("give --task_name or --train_file/--validation_file")
    args.encoder_names = args.encoder_names or [os.path.basename(os.path.normpath(e)) for e in args.encoders]
    args.fusion = args.fusion or ("dme" if len(args.encoders) > 1 else "concat")
    os.makedirs(args.output_dir, exist_ok=True)

    start = time.time()
    adapted, report = (None, None)
    if any(ROWS[row][0] for row in args.rows):
        adapted, report = adapt(args)
    adaptation = {k: report[k] for k in ("settings", "members", "table")} if report else None
    rows, metric = {}, None
    for row in args.rows:
        path = os.path.join(args.output_dir, row, "results.json")
        timing = os.path.join(args.output_dir, row, "wall_seconds.json")
        if not os.path.isfile(path):
            row_start = time.time()
            run_script(RUN_GLUE_MULTI, row_arguments(args, row, adapted if ROWS[row][0] else args.encoders))
            with open(timing, "w", encoding="utf-8") as f:
                json.dump({"seconds": round(time.time() - row_start, 1)}, f)
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        metric = result["metric"]
        seconds = None
        if os.path.isfile(timing):
            with open(timing, encoding="utf-8") as f:
                seconds = json.load(f)["seconds"]
        rows[row] = {**result, "seconds": seconds}
        print(f"[{time.time() - start:6.0f}s] {row}: best epoch {format_summary(result['best_epoch'])}", flush=True)
    summary = table(rows, adaptation, args, metric)
    with open(os.path.join(args.output_dir, "protocol.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    text = markdown(summary)
    with open(os.path.join(args.output_dir, "protocol.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return summary


if __name__ == "__main__":
    main()
