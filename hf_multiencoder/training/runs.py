"""Run folders: no silent reuse of an old run, resuming only from complete checkpoints, and a record of what a run was.

- [`prepare_output_dir`]: a run writes into an empty (or new) folder, unless asked to overwrite it or to resume.
- [`last_complete_checkpoint`]: the newest `checkpoint-N/` that a save finished (a `kill -9` in the middle of a save
  leaves weights without `trainer_state.json`, or a truncated one; such a folder is skipped, with a warning).
- [`write_run_args`] / [`check_resume_args`]: `run_args.json` records the model and data arguments of a run, so that
  resuming with other ones is an error instead of a silently different model.
- [`AtomicCheckpointMixin`]: a `Trainer` whose `checkpoint-N/` folders appear only complete (written into a staging
  folder, then renamed), and [`save_final_model`]: a run's final model files, whole or not at all.

Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .fast_path import fast_path_choice, pin_memory

try:  # transformers >= 5.x where the rotation is a function; earlier 5.x releases have the Trainer method
    from transformers.trainer_utils import rotate_checkpoints
except ImportError:
    rotate_checkpoints = None

logger = logging.getLogger(__name__)

RUN_ARGS_NAME = "run_args.json"
STAGING_DIR = ".checkpoint.partial"  # not named checkpoint-N: neither the Trainer nor `list_checkpoints` sees it
FINAL_PARTIAL = ".final.partial"
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")


def setup_run(training_args, *logger_names: str) -> None:
    """What every script does first (as run_glue.py): log to stdout at the Trainer's process log level (these
    loggers, the package's and transformers'; datasets' at warnings), and pin no memory without a GPU the run uses
    (nothing to pin to, and no warning about it)."""
    import datasets
    import transformers

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)])
    log_level = training_args.get_process_log_level()
    for name in (*logger_names, "hf_multiencoder"):
        logging.getLogger(name).setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    datasets.utils.logging.set_verbosity(max(log_level, logging.WARNING))
    if not pin_memory(training_args.use_cpu):
        training_args.dataloader_pin_memory = False


def checkpoint_problem(folder: str, needs_optimizer: bool = True) -> str | None:
    """Why a checkpoint folder cannot be resumed from (None if it is complete): what is missing or unreadable."""
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    state = os.path.join(folder, "trainer_state.json")
    if not os.path.isfile(state):
        return "no trainer_state.json (the save was interrupted)"
    try:
        with open(state, encoding="utf-8") as f:
            json.load(f)
    except (OSError, ValueError) as err:
        return f"trainer_state.json is unreadable ({type(err).__name__}: {err}; the save was interrupted)"
    if not any(os.path.isfile(os.path.join(folder, name)) for name in _WEIGHTS):
        return "no model weights"
    if needs_optimizer and not os.path.isfile(os.path.join(folder, "optimizer.pt")):
        return "no optimizer.pt (saved with save_only_model: it holds no training state to resume)"
    if needs_optimizer and not os.path.isfile(os.path.join(folder, "scheduler.pt")):
        return "no scheduler.pt (the save was interrupted)"
    for name in ("model.safetensors", "adapter_model.safetensors"):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not safetensors_file_is_whole(path):
            return f"{name} is damaged (truncated or not a safetensors file)"
    for name in ("optimizer.pt", "scheduler.pt"):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not torch_file_is_whole(path):
            return f"{name} is damaged (truncated or not a torch.save file)"
    return None


def safetensors_file_is_whole(path: str) -> bool:
    """Whether a `.safetensors` file holds its whole header and every tensor's bytes (a cut-off copy does not)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return False
            n = int.from_bytes(head, "little")
            if n <= 0 or 8 + n > size:
                return False
            header = json.loads(f.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        return 8 + n + max(ends, default=0) == size
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def torch_file_is_whole(path: str) -> bool:
    """Whether a `torch.save` file (a zip archive) is whole: a truncated one has lost its central directory."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def list_checkpoints(output_dir: str) -> list[str]:
    """`checkpoint-N` folders of a run, newest (highest N) first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := _CHECKPOINT.match(name))]
    return [os.path.join(output_dir, name) for _, name in sorted(found, reverse=True)
            if os.path.isdir(os.path.join(output_dir, name))]


def run_finished(output_dir: str) -> bool:
    """Whether a run folder holds a finished training: its final model and the train metrics and trainer state saved
    after it (`train_and_save`)."""
    return (os.path.isfile(os.path.join(output_dir, "trainer_state.json"))
            and os.path.isfile(os.path.join(output_dir, "train_results.json"))
            and any(os.path.isfile(os.path.join(output_dir, name)) for name in _WEIGHTS))


# kept by --overwrite_output_dir: the adapted members (--adaptive_mlm_epochs), reused when their settings match, and
# the log a driver script opened for this run before starting it (scripts/glue_sweep.py)
KEPT_ON_OVERWRITE = ("adapted_members", "log.txt")
# what a run that stopped before its first checkpoint leaves: nothing worth keeping
_NOT_A_RESULT = {RUN_ARGS_NAME, STAGING_DIR, FINAL_PARTIAL}


def run_started(output_dir: str) -> bool:
    """Whether a folder holds anything of a run beyond its `run_args.json` (and staging folders): a checkpoint, a
    result, a seed's folder that started, or a file of the user's. A run that stopped on bad arguments, or was killed
    before its first checkpoint, has not started: it is started afresh, never resumed nor refused as used."""
    if not os.path.isdir(output_dir):
        return False
    for entry in os.listdir(output_dir):
        if entry in _NOT_A_RESULT:
            continue
        path = os.path.join(output_dir, entry)
        if re.match(r"^seed_-?\d+$", entry) and os.path.isdir(path) and not run_started(path):
            continue
        return True
    return False


def _is_run_folder(output_dir: str) -> bool:
    """Whether a folder was written by a run script (its `run_args.json` or result files, or seed folders holding
    them): only such a folder is emptied by `--overwrite_output_dir`."""
    marks = (RUN_ARGS_NAME, "all_results.json", "results.json", "adaptation_results.json", "pretraining_results.json")
    if any(os.path.isfile(os.path.join(output_dir, m)) for m in marks):
        return True
    return any(re.match(r"^seed_-?\d+$", e) and _is_run_folder(os.path.join(output_dir, e))
               for e in os.listdir(output_dir) if os.path.isdir(os.path.join(output_dir, e)))


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest complete checkpoint of a run; incomplete newer ones are skipped with a warning naming them."""
    for folder in list_checkpoints(output_dir):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        logger.warning(f"Skipping the incomplete checkpoint {folder}: {problem}.")
    return None


def resolve_resume(output_dir: str, resume_from_checkpoint: str | None) -> str | None:
    """The checkpoint to resume from: None (start afresh), the newest complete one for "true"/"last", or the folder
    given (which must be complete). "true" with no complete checkpoint yet (a run killed before its first save, or a
    job script that always passes it) starts from the beginning, with a warning. Raises a `ValueError` naming what is
    missing in a folder given by name."""
    if resume_from_checkpoint in (None, "", "false", "False"):
        return None
    if resume_from_checkpoint in ("true", "True", "last"):
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            logger.warning(f"--resume_from_checkpoint {resume_from_checkpoint}: {output_dir} holds no complete "
                           f"checkpoint yet; training from the beginning.")
        return checkpoint
    problem = checkpoint_problem(resume_from_checkpoint)
    if problem is not None:
        raise ValueError(f"Cannot resume from {resume_from_checkpoint}: {problem}.")
    return resume_from_checkpoint


def prepare_output_dir(output_dir: str, overwrite: bool = False, resuming: bool = False, create: bool = True) -> None:
    """Refuse to run into a folder that holds anything, unless resuming or asked to overwrite. Overwriting removes
    the old run's checkpoints (they would otherwise be mistaken for this run's). With `create=False` only the check
    runs (call it before the run's own input checks, then again with `create=True` once they passed, so that bad input
    leaves no folder behind)."""
    entries = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    if entries and not run_started(output_dir):  # a run that stopped before its first checkpoint: start afresh
        _empty_folder(output_dir)
        entries = []
    if entries and not (overwrite or resuming):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ValueError(
            f"The output folder {output_dir} is not empty ({shown}). Choose another --output_dir, pass "
            f"--overwrite_output_dir true to start this run afresh there (its old checkpoints are deleted), or "
            f"--resume_from_checkpoint true (or a checkpoint folder) to continue the run it holds."
        )
    if not create:
        return
    if entries and overwrite and not resuming:
        if _is_run_folder(output_dir):  # the old run's results, metrics and plots go too, not only its checkpoints
            _empty_folder(output_dir, keep=KEPT_ON_OVERWRITE)
        else:
            for folder in list_checkpoints(output_dir):
                shutil.rmtree(folder)
    os.makedirs(output_dir, exist_ok=True)


def _empty_folder(output_dir: str, keep: tuple[str, ...] = ()) -> None:
    for entry in os.listdir(output_dir):
        if entry in keep:
            continue
        path = os.path.join(output_dir, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def save_into(output_dir: str, save, partial: str = FINAL_PARTIAL) -> None:
    """Write a run's final files whole or not at all: `save(folder)` writes them into a temporary folder inside
    `output_dir`, then each is moved into `output_dir` (replacing an older one of the same name)."""
    tmp = os.path.join(output_dir, partial)
    shutil.rmtree(tmp, ignore_errors=True)
    save(tmp)
    _publish(tmp, output_dir)


def _publish(tmp: str, output_dir: str) -> None:
    """Move every entry of `tmp` into `output_dir` (each `os.replace` is atomic), then remove `tmp`."""
    for entry in os.listdir(tmp):
        destination = os.path.join(output_dir, entry)
        if os.path.isdir(destination):
            shutil.rmtree(destination)
        os.replace(os.path.join(tmp, entry), destination)
    os.rmdir(tmp)


def save_final_model(trainer, output_dir: str | None = None) -> None:
    """`trainer.save_model()` into `output_dir` (default `args.output_dir`), whole or not at all: every process saves
    into one staging folder (FSDP gathers its shards collectively), then the main process moves the files in. A kill
    in the middle leaves the staging folder, never a half-written model. Nothing is pushed here (the scripts push once,
    at the end)."""
    output_dir = output_dir or trainer.args.output_dir
    tmp = os.path.join(output_dir, FINAL_PARTIAL)
    if trainer.args.should_save:
        shutil.rmtree(tmp, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(tmp, _internal_call=True)
    trainer.accelerator.wait_for_everyone()
    if trainer.args.should_save:
        _publish(tmp, output_dir)
    trainer.accelerator.wait_for_everyone()


class AtomicCheckpointMixin:
    """For a `Trainer` subclass: each `checkpoint-N/` appears only once complete. The stock Trainer writes weights,
    optimizer, RNG and `trainer_state.json` straight into `checkpoint-N/`, so a `kill -9` in the middle leaves a
    folder that looks like a checkpoint and is not one. Here the Trainer saves into `<run>/.checkpoint.partial/`
    (every process, so sharded saves work), then the main process renames it into place and rotates the old
    checkpoints. A killed save leaves only the staging folder, which the next save replaces."""

    _checkpoint_staging: str | None = None

    def _get_output_dir(self, trial):
        return self._checkpoint_staging or super()._get_output_dir(trial=trial)

    def _save_checkpoint(self, model, trial):
        run_dir = self._get_output_dir(trial=trial)
        staging = os.path.join(run_dir, STAGING_DIR)
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self._checkpoint_staging = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._checkpoint_staging = None
        self.accelerator.wait_for_everyone()
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        final = os.path.join(run_dir, name)
        # the Trainer took the staging folder for the run's: point the best checkpoint at its final place
        best = self.state.best_model_checkpoint
        if best is not None and os.path.dirname(os.path.normpath(best)) == os.path.normpath(staging):
            self.state.best_model_checkpoint = os.path.join(run_dir, os.path.basename(os.path.normpath(best)))
        elif self.state.best_global_step:
            candidate = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}")
            if os.path.isdir(candidate):
                self.state.best_model_checkpoint = candidate
        if self.args.should_save:
            state_file = os.path.join(staging, name, "trainer_state.json")
            if os.path.isfile(state_file):  # rewritten with the final paths, before the folder appears
                self.state.save_to_json(state_file)
            if os.path.isdir(final):  # the same step saved again (e.g. a resumed run): the old copy goes
                shutil.rmtree(final)
            os.replace(os.path.join(staging, name), final)
            shutil.rmtree(staging, ignore_errors=True)
            if rotate_checkpoints is not None:
                rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
            else:
                self._rotate_checkpoints(use_mtime=True, output_dir=run_dir)
        self.accelerator.wait_for_everyone()


def write_run_args(output_dir: str, args: dict) -> str:
    """Record a run's arguments (JSON-safe values) in `run_args.json`."""
    path = os.path.join(output_dir, RUN_ARGS_NAME)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(args, f, indent=2, sort_keys=True, default=str)
    return path


# The `TrainingArguments` that change what a run trains: resuming must keep them (recorded as "training.<name>").
TRAINING_KEYS = ("seed", "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps",
                 "num_train_epochs", "max_steps", "warmup_steps", "warmup_ratio", "weight_decay", "lr_scheduler_type",
                 "lr_scheduler_kwargs", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
                 "label_smoothing_factor", "bf16", "fp16", "optim", "optim_args", "data_seed", "group_by_length")


def training_record(training_args) -> dict:
    """The training arguments of `TRAINING_KEYS` as JSON-safe values, keyed "training.<name>"."""
    record = {}
    for key in TRAINING_KEYS:
        if not hasattr(training_args, key):
            continue
        value = getattr(training_args, key)
        record[f"training.{key}"] = getattr(value, "value", value)  # enums (optim, scheduler) by their value
    return json.loads(json.dumps(record, default=str))


def check_resume_args(output_dir: str, args: dict, keys: list[str]) -> None:
    """Raise a `ValueError` naming each key of `keys` whose value differs from the one the run in `output_dir` was
    started with. Training keys (`training.*`) a record made before they were recorded lacks are not compared."""
    path = os.path.join(output_dir, RUN_ARGS_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"Cannot resume in {output_dir}: it has no {RUN_ARGS_NAME}, so the arguments its checkpoints "
                         f"were made with are unknown.")
    with open(path, encoding="utf-8") as f:
        before = json.load(f)
    if isinstance(before.get("pretraining"), dict):  # run_pretraining.py's older record: {"pretraining": {..}, "seed"}
        before.update({f"pretraining.{k}": v for k, v in before.pop("pretraining").items()})
        before.setdefault("training.seed", before.get("seed"))
    now = json.loads(json.dumps(args, default=str))
    changed = [f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in keys
               if before.get(k) != now.get(k) and (k in before or not k.startswith("training."))]
    if changed:
        raise ValueError(f"Resuming {output_dir} with other arguments than its checkpoints were made with: "
                         f"{'; '.join(changed)}. Resume with the same arguments, or start a new run.")


__all__ = ["AtomicCheckpointMixin", "TRAINING_KEYS", "setup_run", "check_finite_weights", "check_resume_args",
           "check_training_length", "checkpoint_problem", "last_complete_checkpoint", "list_checkpoints",
           "prepare_output_dir", "resolve_resume", "run_finished", "run_started", "save_final_model", "save_into",
           "training_record", "write_run_args"]


# ---- the steps of a run script (run_glue_multi.py, run_multitask.py): seeds, run folders, train and save ------------
def run_arguments(model_args, data_args, training_args) -> dict:
    """What a run is, recorded in run_args.json (resuming must match the model and data parts)."""
    return {**{f"model.{k}": v for k, v in dataclasses.asdict(model_args).items()},
            **{f"data.{k}": v for k, v in dataclasses.asdict(data_args).items() if k not in ("seeds",)},
            **training_record(training_args), "training.fast_path": fast_path_choice(training_args)}


def resume_keys(run_args: dict) -> list[str]:
    """The keys of a run's arguments that resuming must keep: all but where and how often it saves and logs."""
    # the fast path's record is its reason in words: `training.bf16` and `training.optim` carry what it chose
    return [k for k in run_args if k.startswith(("model.", "data.", "training."))
            and k not in ("data.overwrite_output_dir", "training.fast_path")]


def seed_output_dir(base_output: str, seed: int, seeds: list[int]) -> str:
    return os.path.join(base_output, f"seed_{seed}") if len(seeds) > 1 else base_output


def prepare_runs(model_args, data_args, training_args) -> tuple[list[int], str, dict, bool]:
    """What a run script does before any work: its seeds, the run's arguments (run_args.json) and its checked output
    folder: an empty (or new) one, or, when resuming, one whose runs had the same model and data arguments. Returns
    (seeds, the base output folder, the run's arguments, whether the run resumes)."""
    seeds = data_args.seeds or [training_args.seed]
    if training_args.do_train:
        check_training_length(training_args)
    base_output = training_args.output_dir
    run_args = run_arguments(model_args, data_args, training_args)
    return seeds, base_output, run_args, prepare_run_folders(base_output, seeds, run_args, training_args,
                                                             data_args.overwrite_output_dir)


def prepare_run_folders(base_output: str, seeds: list[int], run_args: dict, training_args, overwrite: bool) -> bool:
    """Check the run folders before any work: an empty (or new) output folder, or, when resuming, the same model and
    data arguments as the run being resumed. Returns whether the run resumes."""
    resuming = training_args.do_train and training_args.resume_from_checkpoint not in (None, "", "false", "False")
    if resuming:
        started = [seed for seed in seeds if run_started(seed_output_dir(base_output, seed, seeds))]
        if not started and len(seeds) == 1:
            resolve_resume(base_output, training_args.resume_from_checkpoint)  # nothing to resume: say so now
        for seed in started:  # seeds not yet started start afresh (start_seed_run)
            check_resume_args(seed_output_dir(base_output, seed, seeds), {**run_args, "training.seed": seed},
                              resume_keys(run_args))
    # one process prepares the folder (under torchrun every process runs this script), the others wait for it
    with training_args.main_process_first(local=False, desc="preparing the output folder"):
        if training_args.process_index == 0:
            prepare_output_dir(base_output, overwrite=overwrite, resuming=resuming)
    return resuming


def start_seed_run(training_args, base_output: str, seed: int, seeds: list[int], run_args: dict, resuming: bool,
                   overwrite: bool) -> None:
    """Point `training_args` at one seed's folder (prepared by the main process, with its run_args.json, unless
    resuming)."""
    training_args.seed = seed
    training_args.output_dir = seed_output_dir(base_output, seed, seeds)
    fresh = not resuming or not run_started(training_args.output_dir)
    if resuming and fresh:
        logger.warning(f"Seed {seed} had not started (no checkpoint in {training_args.output_dir}): starting it.")
    with training_args.main_process_first(local=False, desc="preparing the run folder"):
        if fresh and training_args.process_index == 0:
            prepare_output_dir(training_args.output_dir, overwrite=overwrite)
            write_run_args(training_args.output_dir, {**run_args, "training.seed": seed})
    logger.info(f"=== seed {seed}: output in {training_args.output_dir}")


def train_and_save(trainer, training_args, before_save=None) -> dict:
    """Train (from scratch, or resuming as `--resume_from_checkpoint` says), run `before_save(trainer)` if given (e.g.
    merging LoRA adapters, so that what is saved is what a user deploys), refuse non-finite weights, then save the
    model, the train metrics and the trainer state, as run_glue.py does. Returns the train metrics."""
    output_dir = training_args.output_dir
    resume = training_args.resume_from_checkpoint
    if resume not in (None, "", "false", "False") and run_finished(output_dir):
        return load_finished_run(trainer, output_dir)
    if resume in ("true", "True", "last") and not list_checkpoints(output_dir):
        logger.warning(f"{output_dir} holds no checkpoint yet: training from the start.")
        resume = None  # e.g. a seed that had not started (start_seed_run)
    checkpoint = resolve_resume(output_dir, resume)
    if checkpoint is not None:
        logger.warning(f"Resuming from {checkpoint}")
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    if before_save is not None:
        before_save(trainer)
    check_finite_weights(trainer.model)
    save_final_model(trainer)  # whole or not at all; pushed once, at the end of the script
    metrics = dict(train_result.metrics, train_samples=len(trainer.train_dataset))
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    return metrics


def check_training_length(training_args) -> None:
    """Raise a `ValueError` naming the option when the training arguments ask for no training at all (an untrained
    model would be saved and scored as trained): `--num_train_epochs` 0 or negative without `--max_steps`, or
    `--gradient_accumulation_steps` below 1."""
    epochs, max_steps = training_args.num_train_epochs, training_args.max_steps
    if max_steps is None or max_steps <= 0:
        if not (epochs > 0 and math.isfinite(epochs)):
            raise ValueError(f"--num_train_epochs must be a positive number, got {epochs} (or give --max_steps): "
                             f"a run of no training would save and score an untrained model.")
    if training_args.gradient_accumulation_steps < 1:
        raise ValueError(f"--gradient_accumulation_steps must be at least 1, got "
                         f"{training_args.gradient_accumulation_steps}.")


def check_finite_weights(model, what: str = "the result") -> None:
    """Raise a `FloatingPointError` naming the first non-finite weights of `model`: a run never saves them as its
    result (every script and the adaptation and pretraining entry points call this before saving)."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise FloatingPointError(f"Training left non-finite weights ({bad[:3]}...); nothing was saved as {what}. "
                                 f"Lower --learning_rate (or check the inputs for NaN) and rerun.")


def load_finished_run(trainer, output_dir: str) -> dict:
    """Resuming a finished run: nothing is trained or saved; the Trainer gets the run's final weights and state (for
    the evaluations that follow) and the run's train metrics are returned."""
    from transformers import TrainerState

    state = TrainerState.load_from_json(os.path.join(output_dir, "trainer_state.json"))
    logger.warning(f"The run in {output_dir} is finished (step {state.global_step}): nothing to resume, nothing "
                   f"trained or saved again. Pass --overwrite_output_dir true to train it again.")
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):  # LoRA: the saved model is the merged one
        model = model.merge_and_unload()
        trainer.model = trainer.model_wrapped = model
    trainer._load_from_checkpoint(output_dir)
    trainer.state = state
    with open(os.path.join(output_dir, "train_results.json"), encoding="utf-8") as f:
        return json.load(f)


def run_script(script: str, argv: list[str]) -> None:
    """Run a run script (`run_glue_multi.py`, `run_multitask.py`, ...) in a fresh interpreter, as a user would: the
    protocol scripts build on the run scripts this way, never by importing them. Raises `RuntimeError` naming the
    script if it fails (its output went to this process's stdout and stderr)."""
    import subprocess

    proc = subprocess.run([sys.executable, script, *argv])
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} failed (exit status {proc.returncode}): {' '.join(argv)}")
