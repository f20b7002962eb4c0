"""Run folders: no silent reuse of an old run, resuming only from complete checkpoints, and a record of what a run was.

- [`prepare_output_dir`]: a run writes into an empty (or new) folder, unless asked to overwrite it or to resume.
- [`last_complete_checkpoint`]: the newest `checkpoint-N/` that a save finished (a `kill -9` in the middle of a save
  leaves weights without `trainer_state.json`, or a truncated one; such a folder is skipped, with a warning).
- [`write_run_args`] / [`check_resume_args`]: `run_args.json` records the model and data arguments of a run, so that
  resuming with other ones is an error instead of a silently different model.

Training-side code: not shipped with the weights.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

logger = logging.getLogger(__name__)

RUN_ARGS_NAME = "run_args.json"
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors")


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
    return None


def list_checkpoints(output_dir: str) -> list[str]:
    """`checkpoint-N` folders of a run, newest (highest N) first."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := _CHECKPOINT.match(name))]
    return [os.path.join(output_dir, name) for _, name in sorted(found, reverse=True)
            if os.path.isdir(os.path.join(output_dir, name))]


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
    given (which must be complete). Raises a `ValueError` naming what is missing."""
    if resume_from_checkpoint in (None, "", "false", "False"):
        return None
    if resume_from_checkpoint in ("true", "True", "last"):
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint {resume_from_checkpoint}: {output_dir} holds no complete "
                             f"checkpoint to resume from.")
        return checkpoint
    problem = checkpoint_problem(resume_from_checkpoint)
    if problem is not None:
        raise ValueError(f"Cannot resume from {resume_from_checkpoint}: {problem}.")
    return resume_from_checkpoint


def prepare_output_dir(output_dir: str, overwrite: bool = False, resuming: bool = False) -> None:
    """Refuse to run into a folder that holds anything, unless resuming or asked to overwrite. Overwriting removes
    the old run's checkpoints (they would otherwise be mistaken for this run's)."""
    entries = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    if entries and not (overwrite or resuming):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ValueError(
            f"The output folder {output_dir} is not empty ({shown}). Choose another --output_dir, pass "
            f"--overwrite_output_dir true to start this run afresh there (its old checkpoints are deleted), or "
            f"--resume_from_checkpoint true (or a checkpoint folder) to continue the run it holds."
        )
    if entries and overwrite and not resuming:
        for folder in list_checkpoints(output_dir):
            shutil.rmtree(folder)
    os.makedirs(output_dir, exist_ok=True)


def write_run_args(output_dir: str, args: dict) -> str:
    """Record a run's arguments (JSON-safe values) in `run_args.json`."""
    path = os.path.join(output_dir, RUN_ARGS_NAME)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(args, f, indent=2, sort_keys=True, default=str)
    return path


def check_resume_args(output_dir: str, args: dict, keys: list[str]) -> None:
    """Raise a `ValueError` if resuming with other values for `keys` than the run in `output_dir` was started with."""
    path = os.path.join(output_dir, RUN_ARGS_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"Cannot resume in {output_dir}: it has no {RUN_ARGS_NAME}, so the arguments its checkpoints "
                         f"were made with are unknown.")
    with open(path, encoding="utf-8") as f:
        before = json.load(f)
    now = json.loads(json.dumps(args, default=str))
    changed = [f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in keys if before.get(k) != now.get(k)]
    if changed:
        raise ValueError(f"Resuming {output_dir} with other arguments than its checkpoints were made with: "
                         f"{'; '.join(changed)}. Resume with the same arguments, or start a new run.")


__all__ = ["check_resume_args", "checkpoint_problem", "last_complete_checkpoint", "list_checkpoints",
           "prepare_output_dir", "resolve_resume", "write_run_args"]
