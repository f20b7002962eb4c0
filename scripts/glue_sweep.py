"""Does tuning together pay? The fine-tuned answer, against the baselines a reviewer asks for.

    python scripts/glue_sweep.py [--tasks cola stsb mrpc rte wnut17] [--rows MiniLM MPNet concat dme ...]
        [--seeds 1 2 3] [--workers 1] [--member MiniLM=PATH --member MPNet=PATH] [--num_train_epochs 10]
        [--runs_dir results/glue_finetuned_runs] [--results results] [--report_only] [--models_dir DIR]

The protocol (docs/studies.md states it with the numbers):
- Each run trains on 90% of the task's training set; a fixed 10% slice of it (the same for every row and seed) is the
  validation set the epoch is chosen on. The score reported is the dev set's at that epoch (WNUT-17: the test set),
  which nothing was chosen on; "best dev epoch" is reported beside it, as the literature does.
- 3 epochs, batch 32, learning rate 2e-5 (linear decay, 10% warm-up, weight decay 0.01), max_seq_length 128, mean
  pooling; the fast path's precision (fp32 on a CPU without bf16 units, bf16 autocast on a bf16 GPU); 3 seeds (5
  with `--seeds 1 2 3 4 5` where a GPU makes them affordable). `--num_train_epochs 10` runs the seed's budget (with its
  own `--runs_dir` and `--results`; rows that set their own epochs, `MPNet_4ep`, are refused with it).
- Rows (ROWS below): each member alone; the pair fused (concat, dme, cdme); the best member given the pair's compute
  (MPNet for 4 epochs); MPNet alone under the DME head, and (CoLA, STS-B, WNUT-17) each member with its linear head
  at 1e-3 as the shipped single-member configs train it; the seed's levers on CoLA and STS-B (per-member rates, a
  head rate of 1e-3, member dropout on MiniLM; the head rate on WNUT-17 too, with MPNet alone under the DME head at
  1e-3 as its control there); each member once through plain transformers
  (`AutoModelForSequenceClassification`; `AutoModelForTokenClassification` for NER, scored per word at its first
  sub-token). The ensembles of the separately tuned members (mean of probabilities; of predictions for STS-B; of word
  probabilities for NER) are computed from the member rows' stored predictions, per seed, each member at its own
  chosen epoch: `ensemble` of the plugin's members, `plain_ensemble` of the plain transformers members,
  `ensemble_head_lr` of the members with their heads at 1e-3.
- The comparison: the best fused row against the best member (plugin or plain transformers), the best ensemble and the
  best of all baselines, each chosen by its held-out score (while the study is partial, among the rows with all their
  planned seeds where any has them); where a lever wins the held-out slice, the same again with the levers among the
  fused rows and the controls among the members (the pair's rates chosen on the slice, and each member's too: a member
  alone with its head at 1e-3 or under the DME head is then a member).

Each run is its own process writing `runs_dir/TASK/ROW/seed_N/` (default `results/glue_finetuned_runs/`, committed so
that chunks add up): `result.json` (written last, so a finished run is skipped), `predictions.npz` (the chosen epoch's
dev and held-out outputs) and `log.txt`. A run cut off resumes from its last finished epoch: each epoch ends in a
Trainer checkpoint, with the epochs' predictions so far, in `--checkpoints_dir` (default `outputs/sweep_checkpoints/`,
git-ignored; removed when the run finishes; `--checkpoints_dir ''`: none, and a cut run restarts).
`--models_dir DIR` also keeps each run's chosen-epoch model (`DIR/TASK/ROW/seed_N/`, a folder `from_pretrained` loads:
a teacher for `run_distill.py`); by default no weights are kept. `--tasks/--rows/--seeds` run the sweep in chunks;
`--report_only` writes the tables from what has finished:
`results/glue_finetuned.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.training.protocol import FINE_TUNING, HELDOUT_FRACTION, member_paths, study_splits
from hf_multiencoder.training.results import summarize
from hf_multiencoder.training.selection import choose_epoch, ensemble, paired_bootstrap, score_outputs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIR = ("MiniLM", "MPNet")
# the ensembles of separately tuned members: row name -> (member rows, note)
ENSEMBLES = {"ensemble": (PAIR, "mean of the two members' outputs"),
             "plain_ensemble": (tuple(f"plain_{m}" for m in PAIR), "mean of the two plain members' outputs"),
             "ensemble_head_lr": (tuple(f"{m}_head_lr" for m in PAIR),
                                  "mean of the two members' outputs, each with its head at 1e-3")}
GLUE = ("cola", "stsb", "mrpc", "rte")
LEVER_TASKS = ("cola", "stsb")
# The head's rate decided STS-B (a linear head at 2e-5 is too slow to learn there) and, at 2e-5, MPNet's tagger never
# left "O" on WNUT-17: the head-rate rows run on the NER task too.
HEAD_RATE_TASKS = (*LEVER_TASKS, "wnut17")
# The split each task reports on (nothing is chosen on it); the others report the GLUE dev set.
REPORT_SPLIT = {"wnut17": "test"}
# CoLA examples whose fusion weights the fine-tuned DME model reports.
FUSION_EXAMPLES = ["He can will go", "Somebody just left.", "The more you read, the more you learn.",
                   "Him was seen by I."]


@dataclass(frozen=True)
class Row:
    members: tuple[str, ...]
    kind: str  # member | fused | baseline | control | lever | plain
    fusion: str = "concat"
    epochs: int | None = None  # None: the budget's
    encoder_learning_rates: tuple[float, ...] | None = None
    head_learning_rate: float | None = None
    encoder_dropout: tuple[float | None, ...] | None = None
    tasks: tuple[str, ...] | None = None  # None: every task
    seeds: int | None = None  # how many of the seeds (None: all)
    note: str = field(default="", compare=False)


ROWS = {
    "MiniLM": Row(("MiniLM",), "member", note="MiniLM alone (plugin)"),
    "MPNet": Row(("MPNet",), "member", note="MPNet alone (plugin)"),
    "concat": Row(PAIR, "fused", "concat", note="the pair, concatenated"),
    "dme": Row(PAIR, "fused", "dme", note="the pair, DME"),
    "cdme": Row(PAIR, "fused", "cdme", note="the pair, contextual DME"),
    "MPNet_4ep": Row(("MPNet",), "baseline", epochs=4, note="MPNet given the pair's compute (4 epochs)"),
    "MPNet_dme": Row(("MPNet",), "control", "dme", note="MPNet alone under the DME head"),
    # the shipped single-member configs' setting: is the 1e-3 head the plugin's answer to MPNet's weak linear head?
    "MPNet_head_lr": Row(("MPNet",), "control", head_learning_rate=1e-3, tasks=HEAD_RATE_TASKS,
                         note="MPNet alone, head at 1e-3"),
    # the controls for the pair with its head at 1e-3: the ensemble of the members each tuned with their heads at that
    # rate, and (WNUT-17, where the pair led) how much of the lead is the DME head: MPNet alone under it
    "MiniLM_head_lr": Row(("MiniLM",), "control", head_learning_rate=1e-3, tasks=HEAD_RATE_TASKS,
                          note="MiniLM alone, head at 1e-3"),
    "MPNet_dme_head_lr": Row(("MPNet",), "control", "dme", head_learning_rate=1e-3, tasks=("wnut17",),
                             note="MPNet alone under the DME head, head at 1e-3"),
    "dme_member_lr": Row(PAIR, "lever", "dme", encoder_learning_rates=(5e-5, 2e-5), tasks=LEVER_TASKS,
                         note="DME, MiniLM at 5e-5 (MPNet 2e-5)"),
    "dme_head_lr": Row(PAIR, "lever", "dme", head_learning_rate=1e-3, tasks=HEAD_RATE_TASKS,
                       note="DME, fusion and head at 1e-3"),
    "dme_member_dropout": Row(PAIR, "lever", "dme", encoder_dropout=(0.3, None), tasks=LEVER_TASKS,
                              note="DME, dropout 0.3 in MiniLM"),
    "plain_MiniLM": Row(("MiniLM",), "plain", seeds=1, note="MiniLM through plain transformers"),
    "plain_MPNet": Row(("MPNet",), "plain", seeds=1, note="MPNet through plain transformers"),
}
DEFAULT_ROWS = list(ROWS)


def row_epochs(row: str, args) -> int:
    """A row's epochs: its own, else `--num_train_epochs`, else the budget's."""
    return ROWS[row].epochs or getattr(args, "num_train_epochs", None) or FINE_TUNING.num_train_epochs


def row_applies(row: str, task: str, seed_index: int) -> bool:
    spec = ROWS[row]
    if spec.tasks is not None and task not in spec.tasks:
        return False
    return spec.seeds is None or seed_index < spec.seeds


# ---- one run (its own process) --------------------------------------------------------------------------------------
def run_one(task: str, row_name: str, seed: int, args) -> None:
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        set_seed,
    )

    from hf_multiencoder import (
        MultiEncoderForSequenceClassification,
        MultiEncoderForTokenClassification,
        MultiEncoderTokenizer,
    )
    from hf_multiencoder.data.data_collator import MultiEncoderDataCollator
    from hf_multiencoder.data.loading import tokenize_task
    from hf_multiencoder.models.precision_multiencoder import cpu_model
    from hf_multiencoder.training.fast_path import apply_fast_path
    from hf_multiencoder.training.optimization import create_multiencoder_optimizer
    from hf_multiencoder.training.runs import check_finite_weights
    from hf_multiencoder.training.selection import EpochPredictions, TrainingClock, load_last_checkpoint

    row = ROWS[row_name]
    out_dir = run_dir(args, task, row_name, seed)
    raw, spec = study_splits(task, args.data_dir, REPORT_SPLIT.get(get_task(task).name), args.max_samples)
    paths = member_paths(args.member)
    names = list(row.members)
    plain = row.kind == "plain"
    if plain:
        tokenizer = AutoTokenizer.from_pretrained(paths[names[0]])
    else:
        tokenizer = MultiEncoderTokenizer.from_encoders([paths[n] for n in names], encoder_names=names)
    tokenized = tokenize_task(raw, spec, tokenizer, max_length=args.max_seq_length, add_length=False)

    # With --checkpoints_dir, each epoch ends in a checkpoint (with the epoch's predictions) that a killed run resumes
    # from; without, nothing is saved and the Trainer's folder is thrown away.
    checkpoints = checkpoint_dir(args, task, row_name, seed)
    training_args = FINE_TUNING.training_arguments(
        checkpoints or tempfile.mkdtemp(prefix="glue_sweep_"), seed, num_train_epochs=row_epochs(row_name, args),
        use_cpu=args.device == "cpu", save_strategy="epoch" if checkpoints else "no",
        # the chosen epoch's weights are read back from its checkpoint: keep them all when a model is kept; else two,
        # so that a run cut while saving one resumes from the one before (`load_last_checkpoint`)
        save_total_limit=None if args.models_dir else 2)
    precision = apply_fast_path(training_args, [], args.fast_path)
    set_seed(seed)
    labels = {"num_labels": spec.num_labels}
    if spec.label_list:
        labels.update(id2label=dict(enumerate(spec.label_list)),
                      label2id={x: i for i, x in enumerate(spec.label_list)})
    if spec.kind != "token":
        labels["problem_type"] = "regression" if spec.is_regression else "single_label_classification"
    pad = 8 if training_args.bf16 else None
    if plain:
        # float32 weights whatever the checkpoint stores, as `from_encoders` loads the members
        token = spec.kind == "token"
        auto_cls = AutoModelForTokenClassification if token else AutoModelForSequenceClassification
        model = auto_cls.from_pretrained(paths[names[0]], dtype=torch.float32, **labels)
        collator_cls = DataCollatorForTokenClassification if token else DataCollatorWithPadding
        optimizers, collator = (None, None), collator_cls(tokenizer, pad_to_multiple_of=pad)
    else:
        model_cls = MultiEncoderForTokenClassification if spec.kind == "token" else \
            MultiEncoderForSequenceClassification
        model = model_cls.from_encoders([paths[n] for n in names], encoder_names=names, fusion=row.fusion,
                                        pooling="mean", fusion_dropout=0.1,
                                        encoder_dropout=list(row.encoder_dropout) if row.encoder_dropout else None,
                                        tokenizer_fingerprints=tokenizer.member_fingerprints(), **labels)
        model.to(training_args.device)
        optimizer = create_multiencoder_optimizer(
            model, training_args, encoder_learning_rates=list(row.encoder_learning_rates or []) or None,
            head_learning_rate=row.head_learning_rate)
        optimizers, collator = (optimizer, None), MultiEncoderDataCollator(tokenizer, pad_to_multiple_of=pad)
    snapshots = []  # with --models_dir and no checkpoints: each epoch's weights (on the CPU)

    def keep(epoch, arrays):
        snapshots.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})

    callback = EpochPredictions({"heldout": tokenized["heldout"], "dev": tokenized["dev"]}, spec,
                                num_members=None if plain else len(names),
                                on_epoch=keep if args.models_dir and not checkpoints else None)
    clock = TrainingClock()
    trainer = Trainer(model=model, args=training_args, train_dataset=tokenized["train"], data_collator=collator,
                      processing_class=tokenizer, optimizers=optimizers, callbacks=[callback, clock])
    callback.trainer = trainer
    resume = load_last_checkpoint(checkpoints, callback, clock)
    if resume:
        print(f"Resuming from {resume} (epoch {len(callback.epochs)} done)", flush=True)
    train_output = trainer.train(resume_from_checkpoint=resume)
    seconds = clock.seconds()
    check_finite_weights(model, f"{task}/{row_name}/seed {seed}")  # a diverged run fails; it is never scored

    arrays, result = {}, {"task": spec.name, "row": row_name, "seed": seed, "members": names,
                          "train_seconds": round(seconds, 1), "train_loss": train_output.training_loss,
                          "resumed_after_epochs": clock.resumed_after_epochs,
                          "precision": precision, "device": str(training_args.device),
                          "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                          "cpu": cpu_model(), "threads": torch.get_num_threads(),
                          "sizes": {split: len(ds) for split, ds in raw.items()}, "epochs": []}
    for epoch, sets in enumerate(callback.epochs, start=1):
        entry = {}
        for split, data in sets.items():
            entry[split] = score_outputs(spec, data["outputs"], data["labels"], data.get("lengths"))
            for key, value in data.items():
                if split == "dev" or key == "outputs":  # float32 is plenty for scores and halves the files
                    arrays[f"{split}_{key}_{epoch}"] = value.astype(np.float32) if value.dtype == np.float64 else value
            if "weights" in data:
                entry[f"{split}_fusion_weights"] = dict(zip(names, map(float, data["weights"].reshape(
                    -1, len(names)).mean(axis=0))))
        result["epochs"].append(entry)
    if spec.name == "cola" and row.fusion == "dme" and row.kind == "fused":
        result["fusion_examples"] = model.predict_with_fusion_weights(tokenizer, FUSION_EXAMPLES)
    if args.models_dir:
        chosen = chosen_epoch(result)
        weights = snapshots[chosen - 1] if snapshots else os.path.join(
            training_args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{callback.steps[chosen - 1]}")
        save_chosen_model(model, tokenizer, weights, os.path.join(args.models_dir, task, row_name, f"seed_{seed}"))
    np.savez_compressed(os.path.join(out_dir, "predictions.npz"), **kept_arrays(arrays, chosen_epoch(result)))
    tmp = os.path.join(out_dir, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, "result.json"))
    shutil.rmtree(training_args.output_dir, ignore_errors=True)  # the run is finished: its checkpoints go


def save_chosen_model(model, tokenizer, weights: dict | str, path: str) -> None:
    """Save the chosen epoch's weights (a state dict, or the checkpoint folder holding them) as a loadable folder (a
    teacher for run_distill.py). A failure here is logged, never fatal: the run's scores stand without the weights."""
    try:
        if isinstance(weights, str):
            weights = load_checkpoint_weights(weights)
        model.load_state_dict(weights)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    except Exception as error:  # noqa: BLE001 - hours of training are not thrown away for a full disk
        logging.getLogger(__name__).error("The chosen epoch's weights were not saved to %s: %s", path, error)


def load_checkpoint_weights(folder: str) -> dict:
    """The model weights a Trainer checkpoint holds (one safetensors file or shards)."""
    from safetensors.torch import load_file

    files = sorted(f for f in os.listdir(folder) if f.startswith("model") and f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"No model*.safetensors in {folder}.")
    weights = {}
    for name in files:
        weights.update(load_file(os.path.join(folder, name)))
    return weights


# ---- the sweep ------------------------------------------------------------------------------------------------------
def run_dir(args, task: str, row: str, seed: int) -> str:
    return os.path.join(args.runs_dir, task, row, f"seed_{seed}")


def checkpoint_dir(args, task: str, row: str, seed: int) -> str | None:
    return os.path.join(args.checkpoints_dir, task, row, f"seed_{seed}") if args.checkpoints_dir else None


def launch(job, args) -> str:
    task, row, seed = job
    out_dir = run_dir(args, task, row, seed)
    if os.path.isfile(os.path.join(out_dir, "result.json")):
        return f"skip {task}/{row}/seed {seed} (finished)"
    os.makedirs(out_dir, exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--job", task, row, str(seed), "--runs_dir", args.runs_dir,
           "--fast_path", args.fast_path, "--device", args.device,
           "--max_seq_length", str(args.max_seq_length), "--checkpoints_dir", args.checkpoints_dir,
           *(["--num_train_epochs", str(args.num_train_epochs)] if args.num_train_epochs else []),
           *(["--models_dir", args.models_dir] if args.models_dir else []),
           *(["--max_samples", str(args.max_samples)] if args.max_samples else []),
           *(["--data_dir", args.data_dir] if args.data_dir else []), *[f"--member={m}" for m in args.member]]
    start = time.time()
    with open(os.path.join(out_dir, "log.txt"), "a") as log:  # a resumed run's log goes on
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
    status = "ok" if rc == 0 else f"FAILED (exit {rc}; see {os.path.join(out_dir, 'log.txt')})"
    return f"{task}/{row}/seed {seed}: {status} in {time.time() - start:.0f}s"


def planned_seeds(args, row: str, task: str) -> list[int]:
    return [s for i, s in enumerate(args.seeds) if row_applies(row, task, i)]


def jobs_for(args) -> list[tuple[str, str, int]]:
    order = {"fused": 0, "lever": 1, "baseline": 2, "control": 3, "member": 4, "plain": 5}
    jobs = [(t, r, s) for t in args.tasks for r in args.rows for s in planned_seeds(args, r, t)]
    # seed by seed (a chunk cut off leaves whole seeds), the longest runs first within a seed
    return sorted(jobs, key=lambda j: (args.seeds.index(j[2]), order[ROWS[j[1]].kind]))


# ---- the report -----------------------------------------------------------------------------------------------------
def load_runs(args, task: str, row: str) -> dict[int, tuple[dict, dict]]:
    runs = {}
    for seed in args.seeds:
        path = run_dir(args, task, row, seed)
        if os.path.isfile(os.path.join(path, "result.json")):
            with open(os.path.join(path, "result.json")) as f, np.load(os.path.join(path, "predictions.npz")) as z:
                runs[seed] = (json.load(f), dict(z))
    return runs


def kept_arrays(arrays: dict, chosen: int) -> dict:
    """What a run keeps of its per-epoch arrays: the outputs of the chosen epoch (all the report reads: per-epoch
    scores are in result.json) and the gold labels once (the same every epoch), so that a run's file stays small."""
    return {key: value for key, value in arrays.items()
            if key.endswith(f"_{chosen}") and "_outputs_" in key
            or key.endswith("_1") and ("_labels_" in key or "_lengths_" in key)}


def chosen_epoch(result: dict) -> int:
    """The epoch (1-based) chosen on the held-out slice (`choose_epoch`)."""
    return choose_epoch([e["heldout"] for e in result["epochs"]])


def finite(values) -> list[float]:
    """The defined scores (NaN: a correlation of constant predictions); `summarize` counts them in `n`."""
    return [v for v in values if np.isfinite(v)]


def row_table(runs: dict) -> dict:
    chosen = {s: chosen_epoch(r) for s, (r, _) in runs.items()}
    entry = {
        "seeds": sorted(runs),
        "dev": summarize(finite(r["epochs"][chosen[s] - 1]["dev"] for s, (r, _) in runs.items()), scale=100),
        "best_dev_epoch": summarize(finite(max(finite(e["dev"] for e in r["epochs"]), default=np.nan)
                                           for r, _ in runs.values()), scale=100),
        "heldout": summarize(finite(r["epochs"][chosen[s] - 1]["heldout"] for s, (r, _) in runs.items()),
                             scale=100),
        "chosen_epochs": [chosen[s] for s in sorted(runs)],
        "train_seconds": summarize(r["train_seconds"] for r, _ in runs.values())["mean"],
    }
    weights = [r["epochs"][chosen[s] - 1].get("dev_fusion_weights") for s, (r, _) in runs.items()]
    if all(weights):
        entry["fusion_weights"] = {k: float(np.mean([w[k] for w in weights])) for k in weights[0]}
    examples = [r.get("fusion_examples") for r, _ in runs.values() if r.get("fusion_examples")]
    if examples:
        entry["fusion_examples"] = examples[0]
    return entry


def chosen_outputs(run, split: str) -> np.ndarray:
    result, arrays = run
    return arrays[f"{split}_outputs_{chosen_epoch(result)}"]


def ensemble_table(spec, member_runs: list[dict], dev: dict) -> tuple[dict, dict]:
    """The ensemble of the separately tuned members, per seed both members present (each at its own chosen epoch);
    returns the table entry and the per-seed dev outputs."""
    seeds = sorted(set.intersection(*(set(r) for r in member_runs)))
    outputs, heldout = {}, []
    for seed in seeds:
        outputs[seed] = ensemble([chosen_outputs(runs[seed], "dev") for runs in member_runs])
        held = ensemble([chosen_outputs(runs[seed], "heldout") for runs in member_runs])
        heldout.append(score_outputs(spec, held, dev["heldout_labels"], dev.get("heldout_lengths")))
    entry = {"seeds": seeds,
             "dev": summarize((score_outputs(spec, outputs[s], dev["labels"], dev.get("lengths")) for s in seeds),
                              scale=100),
             "heldout": summarize(heldout, scale=100)}
    return entry, outputs


def hardware(result: dict) -> str:
    """Where a run ran, for the report's "Runs on" line: the GPU, or the CPU's model and threads where recorded."""
    if result["gpu"]:
        where = result["gpu"]
    elif "cpu" in result:
        where = f"{result['device']}: {result['cpu']}, {result['threads']} threads"
    else:
        where = f"{result['device']}, model not recorded"
    return f"{where} ({'bf16 autocast' if result['precision']['bf16'] else 'fp32'})"


def task_report(args, task: str) -> dict | None:
    spec = get_task(task)
    rows = {r: load_runs(args, task, r) for r in args.rows}
    rows = {r: runs for r, runs in rows.items() if runs}
    if not rows:
        return None
    any_run = next(iter(next(iter(rows.values())).values()))[1]
    dev = {"labels": any_run["dev_labels_1"], "lengths": any_run.get("dev_lengths_1")}
    table = {r: {**row_table(runs), "kind": ROWS[r].kind, "note": ROWS[r].note,
                 "complete": set(runs) >= set(planned_seeds(args, r, task))} for r, runs in rows.items()}
    outputs = {r: {s: chosen_outputs(run, "dev") for s, run in runs.items()} for r, runs in rows.items()}
    held_labels = None
    for name, (members, note) in ENSEMBLES.items():
        if all(m in rows for m in members) and set.intersection(*(set(rows[m]) for m in members)):
            held_labels = held_labels or heldout_labels(args, task)
            entry, outputs[name] = ensemble_table(spec, [rows[m] for m in members], {**dev, **held_labels})
            table[name] = {**entry, "kind": "ensemble", "note": note,
                           "complete": all(table[m]["complete"] for m in members)}
    report = {"metric": spec.main_metric, "rows": table,
              "hardware": sorted({hardware(r) for runs in rows.values() for r, _ in runs.values()})}
    for key, (kinds, member_kinds) in COMPARISONS.items():
        if key != "comparison" and best_row(table, kinds) == report.get("comparison", {}).get("fused"):
            continue  # no lever won: the same comparison (and its bootstrap) again would say nothing new
        comparison = compare(spec, table, outputs, dev, kinds, member_kinds, args.bootstrap)
        if comparison:
            report[key] = comparison
    return report


# a member tuned alone at the protocol's settings, through the plugin or plain transformers
MEMBER_KINDS = ("member", "plain")
# report key -> (the fused kinds, the member kinds) compared. The comparison: the best fused row against the best
# rows of each baseline kind, chosen on the held-out slice; beside it, where a lever ran and won the held-out slice,
# the same with the levers among the fused rows (the pair's rates chosen on the slice) and the controls among the
# members (so are the members': a member alone with its head at 1e-3 or under the DME head)
COMPARISONS = {"comparison": (("fused",), MEMBER_KINDS),
               "comparison_with_levers": (("fused", "lever"), MEMBER_KINDS + ("control",))}


def best_row(table: dict, kinds: tuple[str, ...]) -> str | None:
    """The row of these kinds with the best held-out score (the mean over its seeds). While the study is partial, a
    row still missing some of its planned seeds is chosen only where no row of these kinds has all of its own: a mean
    over one seed is not set against a mean over three."""
    candidates = [r for r in table if table[r]["kind"] in kinds and table[r]["heldout"]]
    candidates = [r for r in candidates if table[r]["complete"]] or candidates
    return max(candidates, key=lambda r: table[r]["heldout"]["mean"]) if candidates else None


def compare(spec, table: dict, outputs: dict, dev: dict, fused_kinds: tuple[str, ...], member_kinds: tuple[str, ...],
            bootstrap: int) -> dict | None:
    """The best row of `fused_kinds` against the best member (the best row of `member_kinds`), the best ensemble and
    the best of all baselines, each chosen by its held-out score: per-seed differences on the dev set and a paired
    bootstrap against the best baseline."""
    best_f = best_row(table, fused_kinds)
    best_m = best_row(table, member_kinds)
    if not (best_f and best_m):
        return None
    # any row without the second member: a member, an ensemble, MPNet given more compute or the fused rows' head
    best_b = best_row(table, ("member", "plain", "ensemble", "baseline", "control"))
    comparison = {"fused": best_f, "best_member": best_m, "best_baseline": best_b}
    for name, other in (("vs_best_member", best_m), ("vs_ensemble", best_row(table, ("ensemble",))),
                        ("vs_best_baseline", best_b)):
        if other is None:
            continue
        seeds = sorted(set(outputs[best_f]) & set(outputs[other]))
        diffs = [100 * (score_outputs(spec, outputs[best_f][s], dev["labels"], dev["lengths"]) -
                        score_outputs(spec, outputs[other][s], dev["labels"], dev["lengths"])) for s in seeds]
        comparison[name] = {"against": other, "per_seed": diffs, "seeds_favouring_fusion": sum(d > 0 for d in diffs),
                            "n_seeds": len(diffs), "mean": float(np.mean(diffs)) if diffs else None}
    pairs = [(outputs[best_f][s], outputs[best_b][s]) for s in sorted(set(outputs[best_f]) & set(outputs[best_b]))]
    if bootstrap and pairs:
        comparison["bootstrap_vs_best_baseline"] = paired_bootstrap(spec, pairs, dev["labels"], dev["lengths"],
                                                                    n_resamples=bootstrap)
    return comparison


def heldout_labels(args, task: str) -> dict:
    """The held-out slice's gold labels (and sentence lengths for token tasks), read from the data (the runs store
    only their outputs on it)."""
    splits, spec = study_splits(task, args.data_dir, max_samples=args.max_samples)
    heldout = splits["heldout"]
    if spec.kind == "token":
        return {"heldout_labels": np.concatenate([np.asarray(t) for t in heldout["ner_tags"]]),
                "heldout_lengths": np.array([len(t) for t in heldout["ner_tags"]])}
    return {"heldout_labels": np.asarray(heldout["label"])}


def fmt(summary: dict) -> str:
    return f"{summary['median']:.1f} ({summary['mean']:.1f} ± {summary['std']:.1f}, n={summary['n']})" if summary \
        else "-"


def markdown(reports: dict, args) -> str:
    lines = ["# Fine-tuning MiniLM and MPNet together: GLUE and WNUT-17", "",
             "Protocol: `scripts/glue_sweep.py` (docs/studies.md). Epoch chosen on a fixed 10% slice of the training "
             "set; scores x100 on the dev set (WNUT-17: test set), median (mean ± std over seeds, n seeds).", ""]
    hardware = sorted({rep_run for rep in reports.values() for rep_run in rep.get("hardware", [])})
    if hardware:
        lines += [f"Runs on: {'; '.join(hardware)}.", ""]
    if args.num_train_epochs and args.num_train_epochs != FINE_TUNING.num_train_epochs:
        lines += [f"{args.num_train_epochs} epochs (`--num_train_epochs {args.num_train_epochs}`), not the protocol's "
                  f"{FINE_TUNING.num_train_epochs}.", ""]
    if args.max_samples:
        lines += [f"**A quick check of the machinery (`--max_samples {args.max_samples}`), not a result.**", ""]
    expected = jobs_for(args)
    missing = [job for job in expected if not os.path.isfile(os.path.join(run_dir(args, *job), "result.json"))]
    if missing:
        hours, unmeasured = remaining_hours(reports, missing, args)
        cost = f" At the rates measured so far the rest is about {hours:.1f} hours of training"
        if unmeasured:
            cost += f", besides {unmeasured} runs whose members have not run on their task yet"
        cost += "."
        lines += [f"**Partial: {len(expected) - len(missing)} of the {len(expected)} runs of these tasks, rows and "
                  f"seeds have finished; the comparisons below are not the study's answer until all have.**{cost}", ""]
    for task, rep in reports.items():
        spec = get_task(task)
        lines += [f"## {task} ({spec.metric_display_name})", "",
                  "| row | what | dev at the chosen epoch | best dev epoch | held-out | chosen epochs | train s | "
                  "fusion weights |", "|---|---|---|---|---|---|---|---|"]
        for name, e in rep["rows"].items():
            weights = ", ".join(f"{k} {v:.2f}" for k, v in e.get("fusion_weights", {}).items())
            epochs = " ".join(map(str, e.get("chosen_epochs", []))) or "-"
            seconds = f"{e['train_seconds']:.0f}" if "train_seconds" in e else "-"
            lines.append(f"| {name} | {e['note']} | {fmt(e['dev'])} | {fmt(e.get('best_dev_epoch'))} | "
                         f"{fmt(e['heldout'])} | {epochs} | {seconds} | {weights} |")
        for comp_key, title in (("comparison", ""),
                                ("comparison_with_levers", "With the levers among the fused rows and the controls "
                                                           "among the members (every rate chosen on the held-out "
                                                           "slice):")):
            comp = rep.get(comp_key)
            if not comp:
                continue
            lines += ["", title] if title else [""]
            for key in ("vs_best_member", "vs_ensemble", "vs_best_baseline"):
                if key in comp:
                    c = comp[key]
                    lines.append(f"- {comp['fused']} minus {c['against']} ({key.split('_', 1)[1].replace('_', ' ')}"
                                 f", chosen on the held-out slice): per seed "
                                 f"{', '.join(f'{d:+.1f}' for d in c['per_seed'])}; mean {c['mean']:+.1f}; "
                                 f"{c['seeds_favouring_fusion']} of {c['n_seeds']} seeds favour fusion.")
            if "bootstrap_vs_best_baseline" in comp:
                b = comp["bootstrap_vs_best_baseline"]
                lines.append(f"- Paired bootstrap ({b['n_resamples']} resamples of the dev set, mean over seeds): "
                             f"{b['mean']:+.1f} [{b['low']:+.1f}, {b['high']:+.1f}] (95%).")
        examples = next((e["fusion_examples"] for e in rep["rows"].values() if e.get("fusion_examples")), None)
        if examples:
            lines += ["", "Fusion weights of the fine-tuned DME model (final epoch, first seed):", ""]
            # runs stored before the key was renamed hold "DME scores"
            weights = examples.get("fusion_weights", examples.get("DME scores"))
            for sentence, pred, w in zip(examples["Sentences"], examples["Predictions"], weights):
                lines.append(f"- {sentence!r} -> {pred}: " + ", ".join(f"{k} {v:.2f}" for k, v in w.items()))
        lines.append("")
    total = sum(e["train_seconds"] * len(e["seeds"]) for rep in reports.values() for e in rep["rows"].values()
                if "train_seconds" in e)
    lines.append(f"Total training time of the runs in this table: {total / 3600:.2f} hours.")
    return "\n".join(lines) + "\n"


def remaining_hours(reports: dict, missing: list[tuple[str, str, int]], args=None) -> tuple[float, int]:
    """The training time of the runs not finished yet, at the rates measured so far: a run costs its row's mean on its
    task, or (a row not run there yet) the mean per epoch of the task's rows with the same members times its epochs.
    Returns the hours and how many runs have no measured rate (no run of their members on their task)."""
    seconds, unmeasured = 0.0, 0
    for task, row, _ in missing:
        rows = reports.get(task, {}).get("rows", {})
        if "train_seconds" in rows.get(row, {}):
            seconds += rows[row]["train_seconds"]
            continue
        epochs = row_epochs(row, args)
        alike = [e["train_seconds"] / row_epochs(r, args) for r, e in rows.items()
                 if r in ROWS and ROWS[r].members == ROWS[row].members and "train_seconds" in e]
        if alike:
            seconds += float(np.mean(alike)) * epochs
        else:
            unmeasured += 1
    return seconds / 3600, unmeasured


def write_report(args) -> dict:
    reports = {t: r for t in args.tasks if (r := task_report(args, t))}
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "glue_finetuned.json"), "w") as f:
        json.dump({"protocol": {"heldout_fraction": HELDOUT_FRACTION, **FINE_TUNING.to_dict(),
                                "num_train_epochs": args.num_train_epochs or FINE_TUNING.num_train_epochs,
                                "max_seq_length": args.max_seq_length, "max_samples": args.max_samples,
                                "seeds": args.seeds},
                   "tasks": reports}, f, indent=1)
    text = markdown(reports, args)
    with open(os.path.join(args.results, "glue_finetuned.md"), "w") as f:
        f.write(text)
    return reports


def main(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=[*GLUE, "wnut17"])
    ap.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, choices=list(ROWS))
    # 3 seeds: 5 seeds of every row cost some 300 hours of a 2-core CPU (the partial report prices what is left);
    # on a GPU, `--seeds 1 2 3 4 5` runs the protocol's 5
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--workers", type=int, default=1, help="Runs at once (each its own process).")
    ap.add_argument("--member", action="append", default=[], help="NAME=PATH: load member NAME from PATH.")
    ap.add_argument("--data_dir", default=None)
    ap.add_argument("--fast_path", default="auto", choices=["auto", "off"])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu"], help="cpu: never use a GPU.")
    ap.add_argument("--runs_dir", default=os.path.join(REPO, "results", "glue_finetuned_runs"),
                    help="Where each run's result.json and predictions.npz go (committed, so that chunks run on "
                         "different days add up).")
    ap.add_argument("--results", default=os.path.join(REPO, "results"))
    ap.add_argument("--bootstrap", type=int, default=1000, help="Bootstrap resamples (0: none).")
    ap.add_argument("--max_seq_length", type=int, default=FINE_TUNING.max_seq_length)
    ap.add_argument("--num_train_epochs", type=int, default=None,
                    help=f"Epochs of every row that sets none (default: the protocol's "
                         f"{FINE_TUNING.num_train_epochs}; the seed's 10 where a GPU is lent). Give such runs their "
                         "own --runs_dir and --results.")
    ap.add_argument("--report_only", action="store_true")
    ap.add_argument("--models_dir", default=None,
                    help="Also save each run's chosen-epoch model to MODELS_DIR/TASK/ROW/seed_N (e.g. a distillation "
                         "teacher); by default nothing is saved. Weights are large: keep this folder out of git.")
    ap.add_argument("--checkpoints_dir", default=os.path.join(REPO, "outputs", "sweep_checkpoints"),
                    help="Where each unfinished run keeps its last epoch's checkpoint (git-ignored), so that a killed "
                         "run resumes from its last finished epoch; removed when the run finishes. '' : no "
                         "checkpoints (a killed run restarts from the start).")
    ap.add_argument("--max_samples", type=int, default=None,
                    help="Use only the first N examples of each split: a quick check of the machinery, not a result.")
    ap.add_argument("--job", nargs=3, metavar=("TASK", "ROW", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.runs_dir = os.path.abspath(args.runs_dir)
    args.checkpoints_dir = os.path.abspath(args.checkpoints_dir) if args.checkpoints_dir else ""
    if args.models_dir:
        args.models_dir = os.path.abspath(args.models_dir)
    # an unknown task fails here, naming the known ones; an alias (`wnut_17`) becomes its task's name, so that its runs
    # are stored, scored and reported with the task's (REPORT_SPLIT, the rows' task lists and runs_dir are keyed by it)
    args.tasks = [get_task(task).name for task in args.tasks]
    if args.num_train_epochs is not None:
        if args.num_train_epochs < 1:
            ap.error(f"--num_train_epochs must be at least 1; got {args.num_train_epochs}.")
        own = [r for r in args.rows if ROWS[r].epochs]
        if own and args.num_train_epochs != FINE_TUNING.num_train_epochs and not (args.report_only or args.job):
            ap.error(f"--rows {' '.join(own)} set their own epochs for the {FINE_TUNING.num_train_epochs}-epoch "
                     f"budget; leave them out with --num_train_epochs {args.num_train_epochs}.")
    if args.job:
        logging.basicConfig(level=logging.WARNING)
        task, row, seed = args.job
        run_one(task, row, int(seed), args)
        return
    try:
        member_paths(args.member)
    except ValueError as error:
        ap.error(str(error))
    if not args.report_only:
        jobs = jobs_for(args)
        start = time.time()
        print(f"{len(jobs)} runs; {args.workers} at once", flush=True)
        with ThreadPoolExecutor(args.workers) as pool:
            for line in pool.map(lambda j: launch(j, args), jobs):
                print(f"[{time.time() - start:6.0f}s] {line}", flush=True)
    write_report(args)
    print(open(os.path.join(args.results, "glue_finetuned.md")).read())


if __name__ == "__main__":
    main()
