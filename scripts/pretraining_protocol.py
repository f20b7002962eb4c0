"""Which pretraining objective gives the better member at equal steps? Fine-tune models pretrained by
run_pretraining.py (e.g. the same tiny discriminator by replaced-token detection and by masked LM, same corpus and
steps) on a few registered tasks, same settings and seeds for each, and tabulate them with their pretraining:

    python scripts/pretraining_protocol.py --models rtd=runs/pretraining/tiny-rtd mlm=runs/pretraining/tiny-mlm \
        --tasks sst2 mrpc cola --seeds 1 2 3 --max_train_samples 4000 --output_dir runs/pretraining/glue \
        --results results/pretraining [-- RUN_GLUE_ARGS]

Each (task, model) cell is run_glue_multi.py with `--seeds` and the model as the only member; a cell whose
results.json exists is skipped, so a cut-off run continues. Writes `<results>.md` and `<results>.json`: per model its
pretraining (objective, steps, batch, wall time, held-out metrics from `pretraining_results.json`), per task and model
the best-epoch and final-epoch scores (x100, median, mean ± std over seeds), and per task the winner (the median gap
against the larger std).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.pretraining.rtd import RESULTS_FILE
from hf_multiencoder.training.results import format_summary
from hf_multiencoder.training.runs import run_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_GLUE_MULTI = os.path.join(REPO, "run_glue_multi.py")

PRETRAINING_KEYS = ("eval_loss", "eval_generator_accuracy", "eval_discriminator_accuracy",
                    "eval_all_original_accuracy", "eval_replaced_precision", "eval_replaced_recall",
                    "eval_replaced_fraction")


def cell_arguments(args, task: str, name: str, path: str) -> list[str]:
    argv = ["--encoders", path, "--encoder_names", name, "--fusion", "concat", "--pooling", args.pooling,
            "--task_name", task, "--output_dir", os.path.join(args.output_dir, task, name),
            "--seeds", *map(str, args.seeds), "--max_seq_length", str(args.max_seq_length),
            "--num_train_epochs", str(args.num_train_epochs), "--learning_rate", str(args.learning_rate),
            "--head_learning_rate", str(args.head_learning_rate),
            "--per_device_train_batch_size", str(args.batch_size), "--per_device_eval_batch_size", "128",
            "--weight_decay", "0.01", "--warmup_steps", "0.1", "--do_train", "--do_eval", "--eval_strategy", "epoch",
            "--save_strategy", "no", "--load_best_model_at_end", "false", "--report_to", "none",
            "--disable_tqdm", "true", "--logging_steps", "100", "--overwrite_output_dir", "true"]
    for option in ("data_dir", "max_train_samples", "max_eval_samples"):
        if getattr(args, option) is not None:
            argv += [f"--{option}", str(getattr(args, option))]
    return argv + args.extra


def pretraining_summary(path: str) -> dict:
    with open(os.path.join(path, RESULTS_FILE), encoding="utf-8") as f:
        report = json.load(f)
    settings = report["settings"]
    return {"objective": report["objective"], "path": path, "max_steps": settings["max_steps"],
            "batch_size": settings["per_device_train_batch_size"], "max_seq_length": settings["max_seq_length"],
            "learning_rate": settings["learning_rate"], "train_examples": settings["train_examples"],
            "torch_threads": settings.get("torch_threads"), "train_seconds": report["train_seconds"],
            "parameters": report["model"]["parameters"],
            "generator_parameters": report["model"].get("generator_parameters"),
            **{k: report["eval"][k] for k in PRETRAINING_KEYS if k in report["eval"]}}


def winner(scores: dict[str, dict]) -> dict:
    """The model with the best median and its gap to the runner-up, against the larger of their two stds."""
    ranked = sorted(scores, key=lambda m: scores[m]["median"], reverse=True)
    best, second = ranked[0], ranked[1]
    gap = scores[best]["median"] - scores[second]["median"]
    spread = max(scores[best]["std"], scores[second]["std"])
    return {"model": best if gap > 0 else "tie", "gap": gap, "spread": spread, "clear": gap > spread}


def markdown(summary: dict) -> str:
    lines = ["# Pretraining objectives at equal steps, then fine-tuned", "",
             "| model | objective | steps x batch x length | threads | wall s | params (generator) | held-out "
             "generator acc. | discriminator acc. (all-original) | replaced P / R | fraction replaced | "
             "held-out loss |", "|---" * 11 + "|"]
    for name, p in summary["pretraining"].items():
        def pct(key):
            return f"{p[key] * 100:.1f}" if key in p else "-"

        generator = f" ({p['generator_parameters'] / 1e6:.2f}M)" if p.get("generator_parameters") else ""
        lines.append(f"| {name} | {p['objective']} | {p['max_steps']} x {p['batch_size']} x {p['max_seq_length']} | "
                     f"{p['torch_threads']} | {p['train_seconds']:.0f} | {p['parameters'] / 1e6:.2f}M{generator} | "
                     f"{pct('eval_generator_accuracy')} | {pct('eval_discriminator_accuracy')} "
                     f"({pct('eval_all_original_accuracy')}) | {pct('eval_replaced_precision')} / "
                     f"{pct('eval_replaced_recall')} | {pct('eval_replaced_fraction')} | {p['eval_loss']:.3f} |")
    lines += ["", f"Fine-tuned, seeds {summary['seeds']}: metric x100, median (mean ± std); the winner's median gap "
                  f"against the larger std.", "",
              "| task | metric | " + " | ".join(f"{m} best epoch | {m} final epoch" for m in summary["models"])
              + " | best epoch: winner |", "|---" * (3 + 2 * len(summary["models"])) + "|"]
    for task, t in summary["tasks"].items():
        cells = [f"{format_summary(t['scores'][m][k], 1)}" for m in summary["models"]
                 for k in ("best_epoch", "final_epoch")]
        w = t["winner"]
        verdict = (f"{w['model']} +{w['gap']:.1f} ({'clear' if w['clear'] else 'within spread'}, std "
                   f"{w['spread']:.1f})" if w["model"] != "tie" else f"tie (std {w['spread']:.1f})")
        lines.append(f"| {task} | {t['metric']} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", required=True, help="name=folder of a run_pretraining.py output")
    ap.add_argument("--tasks", nargs="+", default=["sst2", "mrpc", "cola"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--results", default=None, help="write <results>.md/.json here too (e.g. results/pretraining)")
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--max_train_samples", type=int, default=None)
    ap.add_argument("--max_eval_samples", type=int, default=None)
    ap.add_argument("--max_seq_length", type=int, default=64)
    ap.add_argument("--num_train_epochs", type=float, default=3)
    ap.add_argument("--learning_rate", type=float, default=3e-4, help="ELECTRA-Small's fine-tuning rate")
    ap.add_argument("--head_learning_rate", type=float, default=1e-3)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--pooling", default="mean")
    ap.add_argument("--only_models", nargs="+", default=None, help="run these models' cells only (no table)")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="after --: arguments passed to every run_glue_multi run")
    args = ap.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]
    args.tasks = [get_task(task).name for task in args.tasks]  # an alias (`sst-2`) keys its runs as its task
    models = dict(spec.split("=", 1) for spec in args.models)
    if len(models) < 2:
        ap.error("compare at least two models (--models name=folder ...)")

    start = time.time()
    summary = {"models": list(models), "seeds": args.seeds, "settings": {k: v for k, v in vars(args).items()
                                                                        if k not in ("models", "only_models")},
               "pretraining": {}, "tasks": {}}
    for task in args.tasks:
        scores, metric = {}, None
        for name, path in models.items():
            result_path = os.path.join(args.output_dir, task, name, "results.json")
            if args.only_models and name not in args.only_models:
                continue
            if not os.path.isfile(result_path):
                run_script(RUN_GLUE_MULTI, cell_arguments(args, task, name, path))
            with open(result_path, encoding="utf-8") as f:
                result = json.load(f)
            metric = result["metric"]
            scores[name] = {k: result[k] for k in ("best_epoch", "final_epoch")}
            scores[name]["train_seconds"] = [r["train_seconds"] for r in result["runs"]]
            print(f"[{time.time() - start:6.0f}s] {task} {name}: best epoch {format_summary(result['best_epoch'])}",
                  flush=True)
        if len(scores) == len(models):
            summary["tasks"][task] = {"metric": metric, "scores": scores,
                                      "winner": winner({m: s["best_epoch"] for m, s in scores.items()})}
    if args.only_models:
        return summary
    summary["pretraining"] = {name: pretraining_summary(path) for name, path in models.items()}
    text = markdown(summary)
    for target in filter(None, [os.path.join(args.output_dir, "pretraining"), args.results]):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        with open(target + ".json", "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
        with open(target + ".md", "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return summary


if __name__ == "__main__":
    main()
