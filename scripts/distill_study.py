"""Does a distilled member keep the fused model's gain? A plain MiniLM taught by a MiniLM + MPNet teacher, on the CPU.

    python scripts/distill_study.py --task cola --frozen_teacher outputs/teachers/cola_frozen_dme --seeds 1 2 3
    python scripts/distill_study.py --task cola --teacher FOLDER --teacher_name dme_finetuned --seeds 1 2 3
    python scripts/distill_study.py --report_only

The protocol is the fine-tuned sweep's (`scripts/glue_sweep.py`), so that its rows are the baselines:
- The student (a plain `AutoModelForSequenceClassification` on all-MiniLM-L6-v2) trains on the same 90% of the task's
  training set, 3 epochs, batch 32, learning rate 2e-5 (linear decay, 10% warm-up, weight decay 0.01),
  max_seq_length 128, the fast path's precision; its epoch is chosen on the same fixed 10% held-out slice; the score
  reported is the GLUE dev set's at that epoch (nothing was chosen on it).
- Its loss is `alpha * KL(teacher || student at temperature T) * T^2 + (1 - alpha) * cross-entropy` (MSE to the
  teacher's prediction and to the label for regression), `alpha` 0.5 and `T` 2 by default
  (`hf_multiencoder.training.distill`); the teacher's logits are computed once and cached.
- The member alone with the same budget is the sweep's `plain_MiniLM` row (the same plain model and training, gold
  labels only); the sweep's `MiniLM` row (the member through the plugin) is shown beside it.
- The teacher is any trained multi-encoder classifier (`--teacher`, e.g. a sweep run kept with `--models_dir`), or,
  with `--frozen_teacher FOLDER`, one built here when FOLDER does not exist yet: the members frozen, a DME head on
  their `last4` vectors trained 8 epochs (batch 128, lr 1e-3, seed 1) on the full training set, the last epoch kept
  (nothing chosen on dev); the student's held-out slice is part of that teacher's training set (the student never sees
  the teacher's outputs on it).

Each run writes `runs_dir/TASK/TEACHER_NAME/seed_N/result.json` (last, so a finished run is skipped). A student cut
off resumes from its last finished epoch: each epoch ends in a Trainer checkpoint, with the epochs' predictions and
training seconds so far, in `--checkpoints_dir` (default `outputs/distill_checkpoints/`, git-ignored; removed when
the run finishes; `--checkpoints_dir ''`: none, and a cut run restarts). Each run also writes `predictions.npz` (the
chosen epoch's dev outputs); `teacher.json` beside the seeds holds the teacher's scores. The report
(`results/distill.{json,md}`) gives, per task and teacher: the teacher's dev score, the student's and the baselines'
median, mean and std over seeds, the student minus the member per seed, and the share of the
teacher's gain over the member the student recovers; and, per task, the latency of teacher and student from
benchmarks/bench_distill.py's `results/bench_distill*.json`.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile
import time

import numpy as np

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.protocol import FINE_TUNING, HELDOUT_FRACTION, REAL_MEMBERS, member_paths, study_splits
from hf_multiencoder.training.results import summarize
from hf_multiencoder.training.selection import TrainingClock, choose_epoch, load_last_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDENT = REAL_MEMBERS["MiniLM"]
BASELINE_ROWS = {"plain_MiniLM": "MiniLM alone, plain transformers (the same budget, gold labels only)",
                 "MiniLM": "MiniLM alone through the plugin (mean pooling)"}


def relpath(path: str) -> str:
    return os.path.relpath(os.path.abspath(path), REPO)


# ---- the teacher ----------------------------------------------------------------------------------------------------
def build_frozen_teacher(task: str, folder: str, args) -> None:
    """Frozen members, a DME head on their last4 vectors (module docstring), saved to `folder`."""
    from hf_multiencoder.training.frozen import encode_task, train_head

    names = list(REAL_MEMBERS)
    frozen = encode_task(task, [args.members[n] for n in names], encoder_names=names, poolings=["last4"],
                         max_length=args.max_seq_length, data_dir=args.data_dir,
                         cache_dir=os.path.join(os.path.dirname(os.path.abspath(folder)), "feature_cache"),
                         max_train_samples=args.max_samples)
    result = train_head(frozen, names, fusion="dme", pooling="last4", seed=1, epochs=args.teacher_epochs,
                        learning_rate=1e-3, batch_size=128, return_model=True)
    result["model"].save_pretrained(folder)
    result["tokenizer"].save_pretrained(folder)
    info = {"kind": "frozen members, DME head on last4 vectors", "epochs": args.teacher_epochs,
            "train_examples": frozen.examples["train"], "encode_seconds": round(frozen.seconds, 1),
            "head_seconds": result["train_seconds"], "dev_scores_by_epoch": result["epoch_scores"]}
    with open(os.path.join(folder, "teacher_training.json"), "w") as f:
        json.dump(info, f, indent=1)


def teacher_report(folder: str, spec, heldout, dev, args) -> dict:
    """The teacher's held-out and dev scores and mean fusion weights (its logits cached beside its weights)."""
    from hf_multiencoder import mean_fusion_weights
    from hf_multiencoder.training.distill import load_teacher, teacher_logits
    from hf_multiencoder.training.selection import prediction_arrays, score_outputs

    teacher, tokenizer = load_teacher(folder)
    out = {"folder": relpath(folder), "members": list(teacher.config.encoder_names), "fusion": teacher.config.fusion,
           "pooling": teacher.config.pooling}
    info = os.path.join(folder, "teacher_training.json")
    if os.path.isfile(info):
        with open(info) as f:
            out["training"] = json.load(f)
    for name, ds in (("heldout", heldout), ("dev", dev)):
        logits, weights = teacher_logits(teacher, tokenizer, list(ds["sentence1"]),
                                         list(ds["sentence2"]) if spec.is_pair else None,
                                         max_length=args.max_seq_length, return_fusion_weights=True,
                                         cache_dir=os.path.join(folder, "teacher_cache"))
        arrays = prediction_arrays(logits, np.asarray(ds["label"]), spec)
        out[name] = score_outputs(spec, arrays["outputs"], arrays["labels"])
        if name == "dev" and weights is not None:
            out["dev_fusion_weights"] = mean_fusion_weights(weights, out["members"])
    return out


# ---- one student run ------------------------------------------------------------------------------------------------
def run_student(task: str, seed: int, teacher: str, out_dir: str, args) -> None:
    import datasets
    import torch
    from transformers import set_seed

    from hf_multiencoder.data.loading import tokenize_task
    from hf_multiencoder.training.distill import distillation_trainer
    from hf_multiencoder.training.fast_path import apply_fast_path
    from hf_multiencoder.training.selection import EpochPredictions, score_outputs

    splits, spec = study_splits(task, args.data_dir, max_samples=args.max_samples)
    train, heldout, dev = splits["train"], splits["heldout"], splits["dev"]
    raw = datasets.DatasetDict({"train": train, spec.validation_splits[0]: dev})
    # the student is not kept: its Trainer folder (its epochs' checkpoints, with --checkpoints_dir) goes at the end
    checkpoints = (os.path.join(args.checkpoints_dir, task, os.path.basename(os.path.dirname(out_dir)),
                                os.path.basename(out_dir)) if args.checkpoints_dir else None)
    training_args = FINE_TUNING.training_arguments(
        checkpoints or tempfile.mkdtemp(prefix="distill_study_"), seed, use_cpu=not torch.cuda.is_available(),
        # two: a run cut while saving one resumes from the one before (`load_last_checkpoint`)
        save_strategy="epoch" if checkpoints else "no", save_total_limit=2)
    precision = apply_fast_path(training_args, [], "auto")
    set_seed(seed)
    trainer, tokenized = distillation_trainer(
        teacher, args.student, raw, spec, training_args, temperature=args.temperature, alpha=args.alpha,
        max_length=args.max_seq_length, cache_dir=os.path.join(teacher, "teacher_cache"))
    held = tokenize_task(heldout, spec, trainer.processing_class, max_length=args.max_seq_length, add_length=False)
    callback = EpochPredictions({"heldout": held, "dev": tokenized[spec.validation_splits[0]]}, spec)
    trainer.add_callback(callback)
    callback.trainer = trainer
    clock = TrainingClock()
    trainer.add_callback(clock)
    resume = load_last_checkpoint(checkpoints, callback, clock)
    if resume:
        print(f"Resuming from {resume} (epoch {len(callback.epochs)} done)", flush=True)
    output = trainer.train(resume_from_checkpoint=resume)
    epochs = [{split: score_outputs(spec, data["outputs"], data["labels"]) for split, data in sets.items()}
              for sets in callback.epochs]
    chosen = choose_epoch([e["heldout"] for e in epochs])
    result = {"task": spec.name, "seed": seed, "teacher": relpath(teacher), "student": args.student,
              "temperature": args.temperature, "alpha": args.alpha, "train_seconds": round(clock.seconds(), 1),
              "resumed_after_epochs": clock.resumed_after_epochs,
              "train_loss": output.training_loss, "precision": precision,
              "sizes": {"train": len(train), "heldout": len(heldout), "dev": len(dev)},
              "epochs": epochs, "chosen_epoch": chosen}
    shutil.rmtree(training_args.output_dir, ignore_errors=True)
    np.savez_compressed(os.path.join(out_dir, "predictions.npz"),
                        dev_outputs=callback.epochs[chosen - 1]["dev"]["outputs"].astype(np.float32),
                        dev_labels=callback.epochs[chosen - 1]["dev"]["labels"])
    tmp = os.path.join(out_dir, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, "result.json"))


# ---- the report -----------------------------------------------------------------------------------------------------
def chosen_dev(result: dict) -> float:
    """The dev score at the epoch chosen on the held-out slice, as the sweep reports it."""
    return result["epochs"][choose_epoch([e["heldout"] for e in result["epochs"]]) - 1]["dev"]


def read_seeds(folder: str, seeds) -> dict[int, dict]:
    runs = {}
    for seed in seeds:
        path = os.path.join(folder, f"seed_{seed}", "result.json")
        if os.path.isfile(path):
            with open(path) as f:
                runs[seed] = json.load(f)
    return runs


def task_report(args, task: str) -> dict:
    spec = get_task(task)
    report = {"metric": spec.main_metric, "teachers": {}}
    baselines = {}
    for row, note in BASELINE_ROWS.items():
        runs = read_seeds(os.path.join(args.member_runs, task, row), args.seeds)
        if runs:
            baselines[row] = {"note": note, "dev": summarize([chosen_dev(r) for r in runs.values()], 100),
                              "seeds": sorted(runs), "by_seed": {s: 100 * chosen_dev(r) for s, r in runs.items()},
                              "train_seconds": summarize([r["train_seconds"] for r in runs.values()])}
    report["baselines"] = baselines
    task_dir = os.path.join(args.runs_dir, task)
    for name in sorted(os.listdir(task_dir)) if os.path.isdir(task_dir) else []:
        teacher_file = os.path.join(task_dir, name, "teacher.json")
        if not os.path.isfile(teacher_file):
            continue
        with open(teacher_file) as f:
            teacher = json.load(f)
        runs = read_seeds(os.path.join(task_dir, name), args.seeds)
        entry = {"teacher": teacher, "teacher_dev": 100 * teacher["dev"], "seeds": sorted(runs)}
        if runs:
            entry["student"] = {"dev": summarize([chosen_dev(r) for r in runs.values()], 100),
                                "by_seed": {s: 100 * chosen_dev(r) for s, r in runs.items()},
                                "chosen_epochs": [r["chosen_epoch"] for r in runs.values()],
                                "train_seconds": summarize([r["train_seconds"] for r in runs.values()]),
                                "temperature": next(iter(runs.values()))["temperature"],
                                "alpha": next(iter(runs.values()))["alpha"]}
            member = baselines.get("plain_MiniLM")
            if member:
                common = sorted(set(runs) & set(member["seeds"]))
                diffs = [entry["student"]["by_seed"][s] - member["by_seed"][s] for s in common]
                gain = entry["teacher_dev"] - member["dev"]["median"]
                entry["vs_member"] = {
                    "per_seed": dict(zip(common, diffs)), "n_seeds": len(common),
                    "seeds_favouring_student": sum(d > 0 for d in diffs),
                    "median_difference": entry["student"]["dev"]["median"] - member["dev"]["median"],
                    "teacher_gain_over_member": gain,
                    "share_of_gain_recovered": (entry["student"]["dev"]["median"] - member["dev"]["median"]) / gain
                    if gain > 0 else None}
        report["teachers"][name] = entry
    return report


def fmt(summary: dict) -> str:
    if not summary:
        return "–"
    return f"{summary['median']:.1f} ({summary['mean']:.1f} ± {summary['std']:.1f}, {summary['n']})"


def markdown(reports: dict, benches: dict[str, tuple[str, dict]]) -> str:
    lines = ["# Distilling the fused model into one plain member", "",
             "Protocol (scripts/distill_study.py states it in full): the student, a plain all-MiniLM-L6-v2 "
             "classifier, trains on the fine-tuned sweep's 90% training slice with its budget (3 epochs, batch 32, "
             "lr 2e-5, max_seq_length 128) against the teacher's soft targets (KL at temperature T, times T^2) "
             "mixed with the gold labels; its epoch is chosen on the sweep's held-out 10%; the score is the GLUE dev "
             "set's at that epoch. The member alone is the sweep's `plain_MiniLM` row: the same model and training "
             "on gold labels only. Cells: median (mean ± std, seeds) x100; train s: wall seconds of one core, "
             "measured while the machine's other core was busy with other runs, so compare them with care.", ""]
    for task, rep in reports.items():
        spec = get_task(task)
        lines += [f"## {spec.display_name or task} ({rep['metric']})", ""]
        lines += ["| model | dev | train s (median) |", "|---|---|---|"]
        for row, base in rep["baselines"].items():
            lines.append(f"| {base['note']} | {fmt(base['dev'])} | {base['train_seconds'].get('median', 0):.0f} |")
        for name, entry in rep["teachers"].items():
            t = entry["teacher"]
            lines.append(f"| teacher `{name}`: {' + '.join(t['members'])} {t['fusion']} ({t['pooling']} pooling) | "
                         f"{entry['teacher_dev']:.1f} | – |")
            if "student" in entry:
                st = entry["student"]
                lines.append(f"| MiniLM distilled from `{name}` (T {st['temperature']}, alpha {st['alpha']}) | "
                             f"{fmt(st['dev'])} | {st['train_seconds']['median']:.0f} |")
        lines.append("")
        for name, entry in rep["teachers"].items():
            vs = entry.get("vs_member")
            member = rep["baselines"].get("plain_MiniLM")
            if not vs and member and entry["teacher_dev"] <= member["dev"]["median"]:
                lines.append(f"Teacher `{name}` scores {entry['teacher_dev']:.1f}, not above the member alone "
                             f"({member['dev']['median']:.1f}, median of {member['dev']['n']} seed(s)): it has no "
                             f"gain over the member to pass on"
                             + (", and no student was trained from it." if not entry["seeds"] else "."))
            elif not vs:
                lines.append(f"Teacher `{name}`: no student run has finished against a finished member run yet.")
            if not vs:
                continue
            per_seed = ", ".join(f"seed {s}: {d:+.1f}" for s, d in vs["per_seed"].items())
            share = vs["share_of_gain_recovered"]
            verdict = ("the teacher does not beat the member, so there is no gain to recover" if share is None else
                       f"the student recovers {100 * share:.0f}% of the teacher's gain over the member "
                       f"({vs['median_difference']:+.1f} of {vs['teacher_gain_over_member']:+.1f}); the goal is 50%: "
                       + ("met" if share >= 0.5 else "not met"))
            lines.append(f"Teacher `{name}`: student minus member per seed: {per_seed} "
                         f"({vs['seeds_favouring_student']} of {vs['n_seeds']} favour the student); {verdict}.")
            if "training" in entry["teacher"]:
                tr = entry["teacher"]["training"]
                lines.append(f"The teacher: {tr['kind']}, {tr['epochs']} epochs on {tr['train_examples']} training "
                             f"sentences, the last epoch kept ({tr['encode_seconds']:.0f} s running the members, "
                             f"{tr['head_seconds']:.0f} s the head).")
        lines.append("")
    if not benches:
        lines += ["Latency: not measured yet (run benchmarks/bench_distill.py).", ""]
    for task, (name, bench) in sorted(benches.items()):
        spec = get_task(task)
        settings = bench["settings"]
        lines += [f"## Latency on {spec.display_name or task} (benchmarks/bench_distill.py, results/{name})", "",
                  f"Teacher `{settings['teacher']}` ({' + '.join(settings['teacher_members'])} "
                  f"{settings['teacher_fusion']}) against the student, `{settings['student']}`; "
                  f"{settings['dev_texts']} {task} dev texts, {settings['threads']} thread(s), {settings['engine']}, "
                  f"{bench['device']}; interleaved medians.", "",
                  "| batch | teacher ms | student ms | teacher / student |", "|---|---|---|---|"]
        for t in bench["timing"].values():
            lines.append(f"| {t['batch_size']} | {t['ms']['teacher']:.1f} | {t['ms']['student']:.1f} | "
                         f"{t['ms']['teacher'] / t['ms']['student']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def read_latency(results: str) -> dict[str, tuple[str, dict]]:
    """benchmarks/bench_distill.py's results in `results` (`bench_distill*.json`, tiny-member checks left out), keyed
    by task: {task: (file name, result)}. Two files of one task: an error naming both, since only one can be
    reported."""
    found = {}
    for path in sorted(glob.glob(os.path.join(results, "bench_distill*.json"))):
        with open(path) as f:
            bench = json.load(f)
        if bench["settings"].get("tiny"):
            continue
        task = bench["settings"]["task"]
        if task in found:
            raise SystemExit(f"{found[task][0]} and {os.path.basename(path)} both time {task}: keep one of them.")
        found[task] = (os.path.basename(path), bench)
    return found


def write_report(args) -> dict:
    tasks = sorted(os.listdir(args.runs_dir)) if os.path.isdir(args.runs_dir) else []
    reports = {task: task_report(args, task) for task in tasks}
    benches = read_latency(args.results)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "distill.json"), "w") as f:
        json.dump({"protocol": {"budget": FINE_TUNING.to_dict(), "heldout_fraction": HELDOUT_FRACTION,
                                "student": STUDENT, "max_samples": args.max_samples}, "tasks": reports}, f, indent=1)
    with open(os.path.join(args.results, "distill.md"), "w") as f:
        f.write(markdown(reports, benches))
    return reports


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="cola")
    teachers = ap.add_mutually_exclusive_group()
    teachers.add_argument("--teacher", help="Folder of a trained multi-encoder classifier for --task.")
    teachers.add_argument("--frozen_teacher", help="Folder of the frozen-member DME teacher (built when absent).")
    ap.add_argument("--teacher_name", default=None, help="The teacher's name in the report (default: its folder's).")
    ap.add_argument("--student", default=STUDENT)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--temperature", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--teacher_epochs", type=int, default=8)
    ap.add_argument("--max_seq_length", type=int, default=FINE_TUNING.max_seq_length)
    ap.add_argument("--member", action="append", default=[], help="NAME=PATH: load member NAME from PATH.")
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--runs_dir", default=os.path.join(REPO, "results", "distill_runs"))
    ap.add_argument("--member_runs", default=os.path.join(REPO, "results", "glue_finetuned_runs"),
                    help="The fine-tuned sweep's runs: the member-alone baselines.")
    ap.add_argument("--results", default=os.path.join(REPO, "results"))
    ap.add_argument("--checkpoints_dir", default=os.path.join(REPO, "outputs", "distill_checkpoints"),
                    help="Where each unfinished student keeps its last epoch's checkpoint (git-ignored), so that a "
                         "killed run resumes from its last finished epoch; removed when the run finishes. '': no "
                         "checkpoints (a killed run restarts from the start).")
    ap.add_argument("--max_samples", type=int, default=None,
                    help="Use only the first N examples of each split: a quick check of the machinery, not a result.")
    ap.add_argument("--report_only", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.members = member_paths(args.member)
    except ValueError as error:
        ap.error(str(error))
    if args.report_only:
        return write_report(args)
    spec = get_task(args.task)  # an unknown task fails here, naming the known ones
    if spec.kind != "sequence":
        raise SystemExit(f"{spec.name} is a {spec.kind} task: distillation covers sequence tasks.")
    teacher = args.teacher or args.frozen_teacher
    if teacher is None:
        raise SystemExit("Give the teacher: --teacher FOLDER (a trained multi-encoder classifier) or "
                         "--frozen_teacher FOLDER (built when absent).")
    if args.frozen_teacher and not os.path.isdir(teacher):
        print(f"Building the frozen-member DME teacher in {teacher}", flush=True)
        build_frozen_teacher(spec.name, teacher, args)
    elif not os.path.isfile(os.path.join(teacher, "config.json")):
        raise SystemExit(f"--teacher {teacher}: no saved model there (config.json missing).")
    name = args.teacher_name or os.path.basename(os.path.normpath(teacher))
    task_dir = os.path.join(args.runs_dir, spec.name, name)
    os.makedirs(task_dir, exist_ok=True)
    if not os.path.isfile(os.path.join(task_dir, "teacher.json")):
        splits, _ = study_splits(spec.name, args.data_dir, max_samples=args.max_samples)
        report = teacher_report(teacher, spec, splits["heldout"], splits["dev"], args)  # before the file exists
        with open(os.path.join(task_dir, "teacher.json"), "w") as f:
            json.dump(report, f, indent=1)
    for seed in args.seeds:
        out_dir = os.path.join(task_dir, f"seed_{seed}")
        if os.path.isfile(os.path.join(out_dir, "result.json")):
            print(f"skip {spec.name}/{name}/seed {seed} (finished)", flush=True)
            continue
        os.makedirs(out_dir, exist_ok=True)
        start = time.time()
        run_student(spec.name, seed, teacher, out_dir, args)
        print(f"{spec.name}/{name}/seed {seed}: ok in {time.time() - start:.0f}s", flush=True)
    reports = write_report(args)
    print(open(os.path.join(args.results, "distill.md")).read())
    return reports


if __name__ == "__main__":
    main()
