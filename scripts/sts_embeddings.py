#!/usr/bin/env python
"""Sentence embeddings of the members and of their fusion on semantic textual similarity: zero-shot, and after
fine-tuning on STS-B train with sentence-transformers.

    python scripts/sts_embeddings.py --output_dir results/sts_full                          # zero-shot only
    python scripts/sts_embeddings.py --output_dir results/sts_full --do_train --seeds 1 2 3 # + fine-tuning

Score: the Spearman correlation (x100) of the cosine of the two sentences' embeddings with the gold similarity, on
STS-B dev and SICK-R test (`--eval_sets`, `task:split` or `task:split:N` for its first N pairs), as
sentence-transformers' EmbeddingSimilarityEvaluator computes it.

Zero-shot, for each `--poolings` value: the fused model (`concat` of all members) encodes every distinct sentence of
the evaluation sets once with `embedding_fusion="fused"` (the raw concatenation of the members' pooled vectors);
every row of the table is computed from those vectors: each member alone (its own block: the member's pooled vector,
exactly what the member alone gives), the raw concatenation, and the training-free fusions of the library
(`models.embedding_multiencoder.normalized_concat`, with equal or `--embedding_weights` member weights).

`--do_train`: for each of `--train_models` (members by name, and `fused`) and each seed, the model is wrapped as a
SentenceTransformer (`hf_multiencoder.to_sentence_transformer`), trained with SentenceTransformerTrainer and
CosineSimilarityLoss on STS-B train (gold scores / 5; `--max_train_samples` random pairs) for `--num_train_epochs`,
and scored again with the SentenceTransformer's `encode` (the Spearman of cosines EmbeddingSimilarityEvaluator
reports, each distinct sentence embedded once). A run whose folder holds results.json is skipped (the script
resumes).

Writes `<output_dir>/results.json` and `results.md` (median, mean and standard deviation over seeds).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field

import torch
from transformers import HfArgumentParser, set_seed

from hf_multiencoder import MultiEncoderModel, MultiEncoderTokenizer
from hf_multiencoder.data.loading import local_path
from hf_multiencoder.data.tasks import get_task
from hf_multiencoder.models.embedding_multiencoder import normalized_concat
from hf_multiencoder.training.fast_path import pin_memory
from hf_multiencoder.training.protocol import REAL_MEMBERS
from hf_multiencoder.training.results import format_summary, summarize
from hf_multiencoder.training.sentence_embeddings import sts_pairs, sts_spearman

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELECTION = "selection"  # the column of the selection set in the zero-shot rows
DEFAULT_ENCODERS = list(REAL_MEMBERS.values())


@dataclass
class StsArguments:
    encoders: list[str] = field(default_factory=lambda: list(DEFAULT_ENCODERS),
                                metadata={"help": "Member checkpoints (names or folders AutoModel accepts)."})
    encoder_names: list[str] = field(default_factory=lambda: ["MiniLM", "MPNet"],
                                     metadata={"help": "Display names of the members."})
    poolings: list[str] = field(default_factory=lambda: ["mean", "last4"],
                                metadata={"help": "Member poolings evaluated zero-shot."})
    eval_sets: list[str] = field(default_factory=lambda: ["stsb:validation", "sick_relatedness:test"],
                                 metadata={"help": "task:split (or task:split:N: its first N pairs) of sentence-pair "
                                                   "similarity tasks."})
    selection_set: str = field(default="stsb:train", metadata={
        "help": "task:split whose pairs pick the member weights (and fit centering / whitening), zero-shot."})
    max_selection_samples: int | None = field(default=2000, metadata={
        "help": "A random N pairs of the selection set (seed 0)."})
    weight_candidates: list[str] | None = field(default=None, metadata={
        "help": "Member weights tried, e.g. 1,1 1,2 (default: equal, and each member x1.5, x2, x3)."})
    data_dir: str | None = field(default=None, metadata={"help": "The data folder (default: ../shared/data)."})
    batch_size: int = field(default=64, metadata={"help": "Sentences per forward pass when encoding."})
    max_seq_length: int = field(default=128, metadata={"help": "Truncation length, every member."})
    output_dir: str = field(default="results/sts_full", metadata={"help": "Where results (and runs) are written."})
    skip_zero_shot: bool = field(default=False, metadata={"help": "Only fine-tune (reuse zero-shot results)."})
    do_train: bool = field(default=False, metadata={"help": "Fine-tune on STS-B train and evaluate again."})
    train_models: list[str] | None = field(default=None, metadata={
        "help": "Members (by display name) and/or `fused` to fine-tune (default: every member and fused)."})
    train_pooling: str = field(default="mean", metadata={"help": "Member pooling when fine-tuning."})
    seeds: list[int] = field(default_factory=lambda: [42], metadata={"help": "One fine-tuning run per seed."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Fine-tuning epochs."})
    learning_rate: float = field(default=2e-5, metadata={"help": "Fine-tuning learning rate (every member)."})
    train_batch_size: int = field(default=16, metadata={"help": "Sentence pairs per training step."})
    warmup_ratio: float = field(default=0.1, metadata={"help": "Linear warm-up share of the training steps."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Train on a random N of the STS-B train pairs (seed 0, the same for every model and seed)."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "First N pairs of each eval set."})

    def __post_init__(self):
        if len(self.encoder_names) != len(self.encoders):
            raise ValueError(f"{len(self.encoder_names)} encoder_names for {len(self.encoders)} encoders.")
        for entry in self.eval_sets:
            parts = entry.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and not parts[2].isdigit()):
                raise ValueError(f"--eval_sets takes task:split or task:split:N entries, got {entry!r}.")
        if self.selection_set.count(":") != 1:
            raise ValueError(f"--selection_set takes task:split, got {self.selection_set!r}.")
        self.train_models = self.train_models or [*self.encoder_names, "fused"]
        unknown = set(self.train_models) - set(self.encoder_names) - {"fused"}
        if unknown:
            raise ValueError(f"--train_models: unknown {sorted(unknown)}; choose among {self.encoder_names} and "
                             f"fused.")
        for candidate in self.weight_candidates or []:
            if len(candidate.split(",")) != len(self.encoders):
                raise ValueError(f"--weight_candidates {candidate!r}: give one weight per encoder, comma-separated.")


def eval_name(entry: str) -> str:
    task, split, *limit = entry.split(":")
    return f"{get_task(task).name}/{split}" + (f" (first {limit[0]})" if limit else "")


def load_pairs(entry: str, data_dir: str | None, limit: int | None, sample: bool = False) -> tuple:
    """``(spec, (sentences1, sentences2, scores))`` of ``task:split``: its first ``limit`` pairs (``task:split:N``:
    N of them), or with ``sample=True`` a random ``limit`` of them (seed 0; STS-B train is ordered by genre, captions
    first)."""
    task, split, *own_limit = entry.split(":")
    limit = int(own_limit[0]) if own_limit else limit
    columns = sts_pairs(task, split, data_dir=data_dir)
    rows = range(len(columns[0]))
    if limit is not None and sample:
        rows = sorted(random.Random(0).sample(list(rows), min(limit, len(rows))))
    elif limit is not None:
        rows = rows[:limit]
    return get_task(task), tuple([c[i] for i in rows] for c in columns)


def load_eval_sets(args: StsArguments) -> dict:
    return {eval_name(entry): load_pairs(entry, args.data_dir, args.max_eval_samples) for entry in args.eval_sets}


# ---- zero-shot ------------------------------------------------------------------------------------------------------
def weight_candidates(args: StsArguments) -> list[list[float]]:
    if args.weight_candidates:
        return [[float(w) for w in c.split(",")] for c in args.weight_candidates]
    n = len(args.encoders)
    grid = [[1.0] * n]
    for i in range(n):
        for factor in (1.5, 2.0, 3.0):
            grid.append([factor if j == i else 1.0 for j in range(n)])
    return grid


def fit_whitening(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and whitening matrix of the rows of ``x`` (BERT-whitening, Su et al. 2021): ``(x - mu) @ W`` has
    identity covariance."""
    x = x.double()
    mu = x.mean(0, keepdim=True)
    u, s, _ = torch.linalg.svd(torch.cov((x - mu).T))
    return mu.float(), (u / torch.sqrt(s + eps)).float()


def zero_shot(args: StsArguments, eval_sets: dict, selection: tuple) -> list[dict]:
    """One row per (pooling, embedding); columns: the selection set (STS-B train pairs, used to pick the member
    weights and to fit centering/whitening) and the evaluation sets."""
    rows = []
    tokenizer = MultiEncoderTokenizer.from_encoders(args.encoders, encoder_names=args.encoder_names)
    sets = {SELECTION: selection, **eval_sets}
    for pooling in args.poolings:
        model = MultiEncoderModel.from_encoders(args.encoders, encoder_names=args.encoder_names, fusion="concat",
                                                pooling=pooling).eval()
        widths = model.config.pooled_sizes()
        start = time.time()
        sentences = list(dict.fromkeys(s for _, (s1, s2, _) in sets.values() for s in (*s1, *s2)))
        # every distinct sentence once: the raw concatenation of the members' pooled vectors, split into members
        vectors = model.encode(sentences, tokenizer=tokenizer, batch_size=args.batch_size,
                               max_length=args.max_seq_length, embedding_fusion="fused", convert_to_numpy=False)
        index = {s: i for i, s in enumerate(sentences)}
        seconds = time.time() - start
        del model
        fit_rows = [index[s] for s in dict.fromkeys([*selection[1][0], *selection[1][1]])]
        blocks = torch.split(vectors, widths, dim=-1)
        means = [b[fit_rows].mean(0, keepdim=True) for b in blocks]
        whitening = [fit_whitening(b[fit_rows]) for b in blocks]

        variants = {name: (lambda bl, i=i: bl[i]) for i, name in enumerate(args.encoder_names)}
        variants["concat (raw)"] = lambda bl: torch.cat(bl, dim=-1)
        for weights in weight_candidates(args):
            label = "normalized concat" + ("" if len(set(weights)) == 1 else ", weights " + "/".join(
                f"{w:g}" for w in weights))
            variants[label] = lambda bl, w=weights: normalized_concat(list(bl), w)
        variants["normalized concat of centered members"] = lambda bl: normalized_concat(
            [b - m for b, m in zip(bl, means)])
        variants["normalized concat of whitened members"] = lambda bl: normalized_concat(
            [(b - mu) @ w for b, (mu, w) in zip(bl, whitening)])
        pooling_rows = []
        for name, transform in variants.items():
            row = {"model": name, "pooling": pooling, "kind": "member" if name in args.encoder_names else "fused"}
            for set_name, (spec, (s1, s2, scores)) in sets.items():
                def embed(batch, transform=transform):
                    return transform([b[[index[s] for s in batch]] for b in blocks])

                row[set_name] = 100 * sts_spearman(embed, spec, s1, s2, scores)
            pooling_rows.append(row)
            print(f"zero-shot {pooling:6s} {name:45s} " + "  ".join(f"{k} {row[k]:.2f}" for k in sets), flush=True)
        weighted = [r for r in pooling_rows if r["model"].startswith("normalized concat") and "members" not in
                    r["model"]]
        max(weighted, key=lambda r: r[SELECTION])["selected"] = True  # the weights that win on the selection set
        pooling_rows[0]["encode_seconds"] = seconds
        rows.extend(pooling_rows)
    return rows


# ---- fine-tuning ----------------------------------------------------------------------------------------------------
def fine_tune_run(args: StsArguments, name: str, seed: int, eval_sets: dict, run_dir: str) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    from hf_multiencoder import to_sentence_transformer

    members = list(range(len(args.encoders))) if name == "fused" else [args.encoder_names.index(name)]
    encoders = [args.encoders[i] for i in members]
    names = [args.encoder_names[i] for i in members]
    set_seed(seed)
    model = MultiEncoderModel.from_encoders(encoders, encoder_names=names, fusion="concat",
                                            pooling=args.train_pooling)
    tokenizer = MultiEncoderTokenizer.from_encoders(encoders, encoder_names=names)
    st = to_sentence_transformer(model, tokenizer, max_seq_length=args.max_seq_length, device="cpu" if not
                                 torch.cuda.is_available() else "cuda")
    _, (s1, s2, scores) = load_pairs("stsb:train", args.data_dir, args.max_train_samples, sample=True)
    train = Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": [s / 5.0 for s in scores]})
    training_args = SentenceTransformerTrainingArguments(
        output_dir=run_dir, num_train_epochs=args.num_train_epochs, per_device_train_batch_size=args.train_batch_size,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_ratio, seed=seed, save_strategy="no",
        report_to=[], logging_steps=50, disable_tqdm=True, dataloader_pin_memory=pin_memory())
    trainer = SentenceTransformerTrainer(model=st, args=training_args, train_dataset=train,
                                         loss=CosineSimilarityLoss(st))
    start = time.time()
    trainer.train()
    train_seconds = time.time() - start
    result = {"model": name, "seed": seed, "pooling": args.train_pooling, "train_pairs": len(train),
              "train_seconds": train_seconds}
    start = time.time()
    encode = functools.partial(st.encode, batch_size=args.batch_size, show_progress_bar=False)
    for set_name, (spec, (a, b, gold)) in eval_sets.items():
        # the Spearman of cosines EmbeddingSimilarityEvaluator reports, each distinct sentence embedded once
        result[set_name] = 100 * sts_spearman(encode, spec, a, b, gold)
    result["eval_seconds"] = time.time() - start
    return result


def fine_tune(args: StsArguments, eval_sets: dict) -> list[dict]:
    runs = []
    for seed in args.seeds:
        for name in args.train_models:
            run_dir = os.path.join(args.output_dir, "runs", name, f"seed_{seed}")
            path = os.path.join(run_dir, "results.json")
            if os.path.isfile(path):
                runs.append(json.load(open(path)))
                print(f"skip {name} seed {seed} (done)", flush=True)
                continue
            os.makedirs(run_dir, exist_ok=True)
            result = fine_tune_run(args, name, seed, eval_sets, run_dir)
            with open(path, "w") as f:
                json.dump(result, f, indent=2)
            print(f"fine-tuned {name} seed {seed}: " + "  ".join(f"{k} {result[k]:.2f}" for k in eval_sets) +
                  f" ({result['train_seconds']:.0f} s training)", flush=True)
            runs.append(result)
    return runs


# ---- report ---------------------------------------------------------------------------------------------------------
def fine_tune_summary(runs: list[dict], eval_sets) -> list[dict]:
    table = []
    for name in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == name]
        entry = {"model": name, "seeds": [r["seed"] for r in mine],
                 "train_seconds": summarize(r["train_seconds"] for r in mine)}
        for set_name in eval_sets:
            entry[set_name] = summarize(r[set_name] for r in mine)
        table.append(entry)
    return table


ZERO_SHOT_SETTINGS = ("poolings", "selection_set", "max_selection_samples", "weight_candidates", "max_seq_length",
                      "max_eval_samples")
FINE_TUNE_SETTINGS = ("train_models", "train_pooling", "seeds", "num_train_epochs", "learning_rate",
                      "train_batch_size", "warmup_ratio", "max_train_samples", "max_seq_length", "max_eval_samples")


def markdown(results: dict) -> str:
    sets = results["eval_sets"]
    lines = [f"Spearman x100 of the cosine similarity; members: {', '.join(results['members'])}.", ""]
    if results.get("zero_shot"):
        part = results["zero_shot"]
        selection, n = part["settings"]["selection_set"], part["settings"]["max_selection_samples"]
        lines += [f"Zero-shot (`{part['command']}`). Selection: {n or 'all'} random pairs of {selection}; they pick "
                  f"the member weights (*) and fit centering and whitening.", "",
                  f"| model | pooling | selection ({selection}) | " + " | ".join(sets) + " |",
                  "|---|---|---|" + "---|" * len(sets)]
        for row in part["rows"]:
            name = row["model"] + (" (*)" if row.get("selected") else "")
            lines.append(f"| {name} | {row['pooling']} | {row[SELECTION]:.2f} | " + " | ".join(
                f"{row[s]:.2f}" for s in sets) + " |")
        lines.append("")
    if results.get("fine_tuned"):
        part = results["fine_tuned"]
        settings = part["settings"]
        lines += [f"After fine-tuning (`{part['command']}`): {settings['max_train_samples'] or 'all'} STS-B train "
                  f"pairs, {settings['num_train_epochs']:g} epoch, CosineSimilarityLoss, lr "
                  f"{settings['learning_rate']:g}, batch {settings['train_batch_size']}, {settings['train_pooling']} "
                  f"pooling; median (mean ± std over seeds):", "",
                  "| model | " + " | ".join(sets) + " | training s (median) |", "|---|" + "---|" * (len(sets) + 1)]
        for entry in part["models"]:
            lines.append(f"| {entry['model']} | " + " | ".join(format_summary(entry[s]) for s in sets) +
                         f" | {entry['train_seconds']['median']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    (args,) = HfArgumentParser(StsArguments).parse_args_into_dataclasses(args=argv)
    os.makedirs(args.output_dir, exist_ok=True)
    eval_sets = load_eval_sets(args)
    results_path = os.path.join(args.output_dir, "results.json")
    previous = json.load(open(results_path)) if os.path.isfile(results_path) else {}
    command = " ".join(["python", "scripts/sts_embeddings.py", *(sys.argv[1:] if argv is None else argv)])
    settings = asdict(args)
    results = {
        "members": args.encoder_names, "encoders": args.encoders, "eval_sets": list(eval_sets),
        # relative to the repository: committed results name no absolute path
        "data": {name: os.path.relpath(local_path(spec, args.data_dir), REPO) for name, (spec, _) in
                 eval_sets.items()},
        "zero_shot": previous.get("zero_shot"), "fine_tuned": previous.get("fine_tuned"),
    }
    if not args.skip_zero_shot:
        selection = load_pairs(args.selection_set, args.data_dir, args.max_selection_samples, sample=True)
        results["zero_shot"] = {"command": command, "settings": {k: settings[k] for k in ZERO_SHOT_SETTINGS},
                                "rows": zero_shot(args, eval_sets, selection)}
    if args.do_train:
        results["fine_tuned"] = {"command": command, "settings": {k: settings[k] for k in FINE_TUNE_SETTINGS},
                                 "models": fine_tune_summary(fine_tune(args, eval_sets), eval_sets)}
    with open(results_path, "w") as f:
        json.dump(results, f, indent=2)
    table = markdown(results)
    with open(os.path.join(args.output_dir, "results.md"), "w") as f:
        f.write(table)
    print(table)
    return results


if __name__ == "__main__":
    main()
