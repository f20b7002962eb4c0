#!/usr/bin/env python
"""Distil a trained multi-encoder (the teacher, a folder run_glue_multi.py wrote) into one plain transformers model
(the student: any AutoModelForSequenceClassification checkpoint, e.g. one of the teacher's members), with the stock
Trainer: soft targets (the teacher's logits at a temperature, computed once and cached) plus the gold labels, on the
task's training texts and optionally unlabelled in-domain text.

    python run_distill.py --teacher out/cola-dme --student sentence-transformers/all-MiniLM-L6-v2 \
        --task_name cola --output_dir out/cola-student --num_train_epochs 3

The output folder is a standard transformers checkpoint (no remote code): it loads with
`AutoModelForSequenceClassification` and `pipeline("text-classification", model=folder)` anywhere; its card names the
teacher and its members. Sequence tasks (classification, pairs, regression). The first argument may be a YAML/JSON
config file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field

from accelerate import PartialState
from transformers import HfArgumentParser, TrainingArguments, set_seed

from hf_multiencoder.data.corpus import read_text_file
from hf_multiencoder.data.loading import load_task
from hf_multiencoder.training.arguments import check_max_seq_length, config_file_argv
from hf_multiencoder.training.distill import distill
from hf_multiencoder.training.runs import prepare_output_dir, setup_run

logger = logging.getLogger(__name__)


@dataclass
class DistillArguments:
    teacher: str = field(default=None, metadata={"help": "Folder (or Hub id) of a trained multi-encoder classifier."})
    student: str = field(default=None, metadata={"help": "Checkpoint of the plain student model (e.g. a member)."})
    task_name: str | None = field(default=None, metadata={"help": "A registered task (cola, stsb, mrpc, ...)."})
    data_dir: str | None = field(default=None, metadata={"help": "Folder of the local data (default ../shared/data)."})
    train_file: str | None = field(default=None, metadata={"help": "Your own CSV/TSV/JSON training file."})
    validation_file: str | None = field(default=None, metadata={"help": "Your own validation file."})
    unlabelled_file: str | None = field(
        default=None, metadata={"help": "Unlabelled in-domain text, one per line: learnt from the teacher alone."})
    temperature: float = field(default=2.0, metadata={"help": "Softmax temperature of the soft targets."})
    alpha: float = field(default=0.5, metadata={"help": "Weight of the soft targets (1 - alpha: the gold labels)."})
    max_seq_length: int = field(default=128, metadata={"help": "Maximum subword length (teacher members, student)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Truncate the training set."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Truncate the validation set(s)."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Start afresh in a used --output_dir."})

    def __post_init__(self):
        if not self.teacher or not self.student:
            raise ValueError("Give --teacher (a trained multi-encoder folder) and --student (a plain checkpoint).")
        if self.task_name is None and self.train_file is None:
            raise ValueError("Give --task_name or your own --train_file (and --validation_file).")
        if self.task_name is not None and (self.train_file or self.validation_file):
            raise ValueError("--train_file/--validation_file describe your own files, but --task_name reads the "
                             "registered task's: give one or the other.")
        check_max_seq_length(self.max_seq_length)
        if not self.temperature > 0:
            raise ValueError(f"--temperature must be positive, got {self.temperature}.")
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"--alpha (the soft targets' share of the loss) must be in [0, 1], got {self.alpha}.")


def main(argv: list[str] | None = None) -> dict:
    parser = HfArgumentParser((DistillArguments, TrainingArguments), description=__doc__)
    argv = config_file_argv(parser, list(sys.argv[1:] if argv is None else argv))
    args, training_args = parser.parse_args_into_dataclasses(args=argv)
    setup_run(training_args, logger.name)
    prepare_output_dir(training_args.output_dir, overwrite=args.overwrite_output_dir)
    set_seed(training_args.seed)
    raw, spec = load_task(args.task_name, data_dir=args.data_dir, train_file=args.train_file,
                          validation_file=args.validation_file)
    for split in list(raw):
        limit = args.max_train_samples if split == "train" else args.max_eval_samples
        if limit is not None:
            raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
    unlabelled = read_text_file(args.unlabelled_file) if args.unlabelled_file else None
    _, metrics = distill(args.teacher, args.student, raw, spec, training_args, unlabelled_texts=unlabelled,
                         temperature=args.temperature, alpha=args.alpha, max_length=args.max_seq_length)
    with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    for split, values in metrics.items():
        print(f"{split}: " + ", ".join(f"{k}={v:.4f}" for k, v in values.items() if isinstance(v, float)), flush=True)
    return metrics


if __name__ == "__main__":
    main()
    PartialState().destroy_process_group()  # under torchrun: gloo's threads joined before exit, not aborted
