"""Honest model selection: a held-out slice of the training data to choose the epoch on, every epoch's predictions on
the sets a study reports, ensembles of separately trained runs, and a paired bootstrap interval.

`scripts/glue_sweep.py` is built on it: each run trains on 90% of a task's training set, [`EpochPredictions`] stores
the predictions on the held-out 10% (where the epoch is chosen) and on the dev set (which is only reported) after
every epoch, and the report computes the ensembles of separately tuned members and the bootstrap from the stored
predictions, without training again. Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..data.tasks import TaskSpec
from .metrics import _split_outputs, compute_task_metrics, main_metric_value
from .runs import checkpoint_problem, list_checkpoints

logger = logging.getLogger(__name__)


def heldout_split(dataset, fraction: float = 0.1, seed: int = 0):
    """`(train, heldout)`: a fixed `fraction` of `dataset` held out for choosing the epoch (and any rate).

    The slice depends on `seed` alone, never on the run's seed, so every row and seed of a study chooses on the same
    examples and trains on the same rest.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"The held-out fraction must be between 0 and 1 (exclusive), got {fraction}.")
    n_heldout = max(1, round(len(dataset) * fraction))
    if n_heldout >= len(dataset):
        raise ValueError(f"A training set of {len(dataset)} examples is too small to hold out {fraction:.0%} of it.")
    order = np.random.default_rng(seed).permutation(len(dataset))
    heldout, train = np.sort(order[:n_heldout]), np.sort(order[n_heldout:])
    return dataset.select(train), dataset.select(heldout)


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def prediction_arrays(predictions, label_ids, spec: TaskSpec, num_members: int | None = None,
                      word_starts: Sequence[Sequence[int]] | None = None,
                      word_labels: Sequence[Sequence[int]] | None = None) -> dict:
    """A `Trainer.predict` output as flat arrays a study can average and score.

    Sequence tasks: `{"outputs": (n, labels) probabilities or (n,) scores, "labels": (n,)}`. Token tasks, one row
    per gold word: `{"outputs": (words, labels) probabilities, "labels": (words,), "lengths": (n,)}`; a word no member
    saw (all cut it off) gets the probability 1 for "O", as `word_tags` tags it. With `num_members`, `"weights"`: each
    member's fusion weight per example (per word), when the model returns them.

    A one-model token classifier (`AutoModelForTokenClassification`) predicts sub-tokens: pass the `word_starts` and
    `word_labels` columns `tokenize_task` gives a plain tokenizer's token task, and each word takes its first
    sub-token's probabilities ("O" for a word the model did not see), so its rows line up with the multi-encoder's.
    """
    logits, weights, word_mask = _split_outputs(predictions, spec, num_members)
    labels = np.asarray(label_ids[0] if isinstance(label_ids, (tuple, list)) else label_ids)
    logits = logits.astype(np.float64)
    if (word_starts is None) != (word_labels is None):
        raise ValueError("Pass word_starts and word_labels together (the columns tokenize_task adds for a plain "
                         "tokenizer's token task).")
    if word_starts is not None and spec.kind != "token":
        raise ValueError(f"word_starts and word_labels are for token tasks; {spec.name} is a {spec.kind} task: "
                         f"leave them out.")
    if word_starts is not None:  # a one-model token classifier: sub-token outputs back to words
        if len(word_starts) != len(logits):
            raise ValueError(f"word_starts has {len(word_starts)} examples but the predictions {len(logits)}: pass "
                             f"the columns of the dataset that was predicted.")
        probs = _softmax(logits)
        unseen = np.eye(probs.shape[-1])[spec.label_list.index("O")]
        outputs = []
        for row, starts in zip(probs, word_starts):
            starts = np.asarray(starts, dtype=np.int64).reshape(-1)
            words = row[np.maximum(starts, 0)]
            words[starts < 0] = unseen
            outputs.append(words)
        return {"outputs": np.concatenate(outputs), "labels": np.concatenate([np.asarray(t, dtype=np.int64).reshape(
            -1) for t in word_labels]), "lengths": np.array([len(t) for t in word_labels])}
    if spec.kind == "token":
        keep = labels != -100
        probs = _softmax(logits[:, :keep.shape[1]])
        if word_mask is not None:
            unseen = (np.asarray(word_mask)[:, :keep.shape[1]] == 0)
            probs[unseen] = np.eye(probs.shape[-1])[spec.label_list.index("O")]
        out = {"outputs": probs[keep], "labels": labels[keep], "lengths": keep.sum(axis=1)}
        if weights is not None:
            out["weights"] = np.asarray(weights)[:, :keep.shape[1]][keep]
        return out
    outputs = logits.reshape(-1) if spec.is_regression else _softmax(logits)
    out = {"outputs": outputs, "labels": labels.reshape(-1) if spec.is_regression else labels}
    if weights is not None:
        out["weights"] = np.asarray(weights)
    return out


def sentence_tags(spec: TaskSpec, tag_ids: np.ndarray, lengths: np.ndarray) -> list[list[str]]:
    """Flat tag ids (all sentences' words end to end) -> one list of tag names per sentence."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return [[spec.label_list[i] for i in tag_ids[start:start + length]] for start, length in zip(starts, lengths)]


def score_outputs(spec: TaskSpec, outputs: np.ndarray, labels: np.ndarray, lengths: np.ndarray | None = None,
                  index: np.ndarray | None = None) -> float:
    """The task's main metric of flat `outputs` (probabilities or scores) against `labels`; `index` picks examples
    (sentences for token tasks, with repeats: the bootstrap)."""
    if spec.kind == "token":
        pred_tags, true_tags = sentence_tags(spec, outputs.argmax(-1), lengths), sentence_tags(spec, labels, lengths)
        if index is not None:
            pred_tags, true_tags = [pred_tags[r] for r in index], [true_tags[r] for r in index]
        return main_metric_value(spec, compute_task_metrics(spec, pred_tags, true_tags))
    if index is not None:
        outputs, labels = outputs[index], labels[index]
    return main_metric_value(spec, compute_task_metrics(spec, outputs, labels))


def resample_scorer(spec: TaskSpec, outputs: np.ndarray, labels: np.ndarray, lengths: np.ndarray | None = None):
    """`index -> score_outputs(spec, outputs, labels, lengths, index)`, for scoring many resamples of one prediction.

    Entity-level F1 (token tasks) is a micro average: seqeval counts each sentence's correct, predicted and gold
    entities and sums them (a sentence drawn twice counts twice). Those counts are taken once here, so a resample
    costs a sum instead of re-reading every tag; other metrics are scored directly.
    """
    if spec.kind != "token" or spec.main_metric != "overall_f1":
        return lambda index: score_outputs(spec, outputs, labels, lengths, index)
    from seqeval.metrics.sequence_labeling import get_entities  # imported here: only NER needs it

    counts = np.zeros((len(lengths), 3))
    for row, (pred, gold) in enumerate(zip(sentence_tags(spec, outputs.argmax(-1), lengths),
                                           sentence_tags(spec, labels, lengths))):
        found, true = set(get_entities(pred)), set(get_entities(gold))
        counts[row] = len(true & found), len(found), len(true)

    def score(index):
        correct, found, true = (counts if index is None else counts[index]).sum(0)
        return float(2 * correct / (found + true)) if correct else 0.0

    return score


class EpochPredictions(TrainerCallback):
    """After every epoch, predict each named dataset and keep `prediction_arrays` of it (in `self.epochs`, one dict
    `{name: arrays}` per epoch; `self.steps`: the global step each epoch ended at). Give it the trainer once built:
    `callback.trainer = trainer`.

    When the Trainer saves a checkpoint, the predictions so far are saved in it ([`FILE`]); a run resumed from that
    checkpoint calls `callback.load(checkpoint)` first, and goes on as if it had never stopped.
    """

    FILE = "epoch_predictions.npz"

    def __init__(self, datasets: Mapping[str, object], spec: TaskSpec, num_members: int | None = None,
                 on_epoch: Callable[[int, dict], None] | None = None):
        self.datasets, self.spec, self.num_members, self.on_epoch = dict(datasets), spec, num_members, on_epoch
        # a plain tokenizer's token task: the words each sub-token prediction belongs to (see `tokenize_task`)
        self._words = {name: {key: list(dataset[key]) for key in ("word_starts", "word_labels")}
                       for name, dataset in self.datasets.items()
                       if "word_starts" in (getattr(dataset, "column_names", None) or ())}
        self.trainer = None
        self.epochs: list[dict] = []
        self.steps: list[int] = []

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.trainer is None:
            raise RuntimeError("EpochPredictions needs the trainer: set `callback.trainer = trainer` after building "
                               "it.")
        arrays = {}
        for name, dataset in self.datasets.items():
            out = self.trainer.predict(dataset, metric_key_prefix=name)
            arrays[name] = prediction_arrays(out.predictions, out.label_ids, self.spec, self.num_members,
                                             **self._words.get(name, {}))
        self.epochs.append(arrays)
        self.steps.append(state.global_step)
        if self.on_epoch is not None:
            self.on_epoch(len(self.epochs), arrays)
        return control

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if state.is_world_process_zero and os.path.isdir(folder):
            flat = {f"{epoch}.{name}.{key}": value for epoch, sets in enumerate(self.epochs, start=1)
                    for name, arrays in sets.items() for key, value in arrays.items()}
            tmp = os.path.join(folder, "tmp." + self.FILE)  # whole or absent, however the run is cut
            np.savez(tmp, steps=np.asarray(self.steps, dtype=np.int64), **flat)
            os.replace(tmp, os.path.join(folder, self.FILE))
        return control

    def load(self, checkpoint: str) -> None:
        """The predictions of the epochs before `checkpoint` (saved in it by `on_save`)."""
        path = os.path.join(checkpoint, self.FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{checkpoint} holds no {self.FILE}: it was not saved by a run with "
                                    f"EpochPredictions, so its earlier epochs' predictions are lost; start the run "
                                    f"again without resuming.")
        with np.load(path) as stored:
            self.steps = [int(s) for s in stored["steps"]]
            self.epochs = [{} for _ in self.steps]
            for key in stored.files:
                if key != "steps":
                    epoch, name, field = key.split(".", 2)
                    self.epochs[int(epoch) - 1].setdefault(name, {})[field] = stored[key]


class TrainingClock(TrainerCallback):
    """Training seconds across resumes: the seconds so far are saved in each checkpoint ([`FILE`]) and a resumed run
    adds them back (`clock.load(checkpoint)` before `trainer.train(resume_from_checkpoint=...)`). `seconds()` is the
    total; `resumed_after_epochs` the epochs the checkpoint had finished (0 for a run that never stopped)."""

    FILE = "training_clock.json"

    def __init__(self):
        self.before, self.start, self.resumed_after_epochs = 0.0, None, 0

    def seconds(self) -> float:
        return self.before + (time.time() - self.start if self.start is not None else 0.0)

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.time()

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if state.is_world_process_zero and os.path.isdir(folder):
            tmp = os.path.join(folder, self.FILE + ".tmp")  # whole or absent, however the run is cut
            with open(tmp, "w") as f:
                json.dump({"seconds": self.seconds(), "epoch": state.epoch}, f)
            os.replace(tmp, os.path.join(folder, self.FILE))

    def load(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, self.FILE)
        if os.path.isfile(path):
            with open(path) as f:
                saved = json.load(f)
            self.before, self.resumed_after_epochs = saved["seconds"], round(saved["epoch"])


def load_last_checkpoint(checkpoints: str | None, *callbacks) -> str | None:
    """The last finished Trainer checkpoint in the folder `checkpoints` (None when there is none, or no folder), after
    loading each callback's state from it ([`EpochPredictions`], [`TrainingClock`]): pass the result to
    `trainer.train(resume_from_checkpoint=...)`.

    A checkpoint is finished once it is complete (`checkpoint_problem`) and every callback has written its file
    (`callback.FILE`) into it: the Trainer calls the callbacks' `on_save` after writing its own files (and after
    deleting older checkpoints beyond `save_total_limit`), so a run cut during a save leaves a newer checkpoint without
    them. That one is skipped with a warning; keep `save_total_limit=2` or more so that the one before it is still
    there.
    """
    for checkpoint in list_checkpoints(checkpoints) if checkpoints else []:
        missing = [cb.FILE for cb in callbacks if not os.path.isfile(os.path.join(checkpoint, cb.FILE))]
        problem = checkpoint_problem(checkpoint) or (f"no {', '.join(missing)} (the save was interrupted)"
                                                     if missing else None)
        if problem is None:
            for callback in callbacks:
                callback.load(checkpoint)
            return checkpoint
        logger.warning(f"Skipping the incomplete checkpoint {checkpoint}: {problem}.")
    return None


def choose_epoch(heldout_scores: Sequence[float]) -> int:
    """The epoch (1-based) with the best held-out score; the earliest on ties. An undefined score (a correlation of
    constant predictions is NaN) is never chosen over a defined one."""
    return 1 + int(np.argmax([s if np.isfinite(s) else -np.inf for s in heldout_scores]))


def ensemble(outputs: Sequence[np.ndarray]) -> np.ndarray:
    """The ensemble of separately trained runs: the mean of their probabilities (the mean prediction for
    regression; word-level probabilities for token tasks)."""
    shapes = {o.shape for o in outputs}
    if len(shapes) != 1:
        raise ValueError(f"Only runs predicting the same examples can be ensembled; got outputs of shapes {shapes}.")
    return np.mean(np.stack(outputs), axis=0)


def paired_bootstrap(spec: TaskSpec, pairs: Sequence[tuple[np.ndarray, np.ndarray]], labels: np.ndarray,
                     lengths: np.ndarray | None = None, n_resamples: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> dict:
    """A paired bootstrap interval of `score(a) - score(b)`, averaged over seeds, on resampled dev examples.

    `pairs`: one `(outputs_a, outputs_b)` per seed, both predicting the same examples. Each resample draws the
    examples (sentences for token tasks) with replacement once and scores every seed's pair on it, so the interval
    reflects the dev set's sampling as well as the seeds. Returns `{"mean", "low", "high", "p_a_not_better"}` (x100).
    """
    n = len(lengths) if spec.kind == "token" else len(labels)
    rng = np.random.default_rng(seed)
    scorers = [tuple(resample_scorer(spec, outputs, labels, lengths) for outputs in pair) for pair in pairs]

    def diff(index):
        return float(np.mean([score_a(index) - score_b(index) for score_a, score_b in scorers]))

    observed = diff(None)
    draws = np.array([diff(rng.integers(0, n, n)) for _ in range(n_resamples)])
    tail = (1 - confidence) / 2
    return {"mean": 100 * observed, "low": 100 * float(np.quantile(draws, tail)),
            "high": 100 * float(np.quantile(draws, 1 - tail)), "p_a_not_better": float(np.mean(draws <= 0)),
            "n_resamples": n_resamples}


__all__ = ["EpochPredictions", "choose_epoch", "ensemble", "heldout_split", "paired_bootstrap", "prediction_arrays",
           "resample_scorer", "score_outputs"]
