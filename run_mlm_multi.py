#!/usr/bin/env python
"""Continue the masked-LM pretraining of every member of a multi-encoder on unlabelled in-domain text (domain- or
task-adaptive pretraining, Gururangan et al. 2020), each with its own tokenizer and masked-LM head, with the stock
Trainer. Modelled on transformers' examples/pytorch/language-modeling/run_mlm.py.

    python run_mlm_multi.py --encoders sentence-transformers/all-MiniLM-L6-v2 sentence-transformers/all-mpnet-base-v2 \
        --encoder_names MiniLM MPNet --train_file questions.txt --num_train_epochs 8 --output_dir adapted/
    python run_glue_multi.py --encoders adapted/MiniLM adapted/MPNet --encoder_names MiniLM MPNet --train_file ...

Writes `output_dir/<member>/` (a standard checkpoint of each adapted member: weights, config, tokenizer) and
`adaptation_results.json` (held-out masked-LM loss and perplexity per member at the start, after the head warm-up
and at the end), and prints that table. `--model_name_or_path` adapts the members of a saved multi-encoder in place
(fusion and head kept) and saves the model to `output_dir`. The first argument may be a YAML/JSON config file.
Defaults are the seed's: batch 16, lr 1e-5, weight decay 0.01, linear warmup (6% of the steps), no checkpoints
(pass --save_strategy steps to keep some for --resume_from_checkpoint).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

from accelerate import PartialState
from transformers import HfArgumentParser, TrainingArguments

from hf_multiencoder.data.corpus import CorpusArguments
from hf_multiencoder.pretraining.adaptation import ADAPTATION_DEFAULTS, AdaptationArguments, adapt_members
from hf_multiencoder.training.arguments import config_file_argv
from hf_multiencoder.training.fast_path import apply_fast_path, fast_path_field
from hf_multiencoder.training.runs import setup_run

logger = logging.getLogger(__name__)


@dataclass
class MemberArguments:
    encoders: list[str] | None = field(
        default=None, metadata={"help": "Member checkpoints: Hub names or folders that AutoModel accepts."}
    )
    encoder_names: list[str] | None = field(
        default=None, metadata={"help": "Display names; they name the output folders (default: the checkpoints' "
                                        "last path part)."}
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A saved multi-encoder whose members are adapted in place instead."}
    )
    fast_path: str = fast_path_field()

    def __post_init__(self):
        if bool(self.encoders) == bool(self.model_name_or_path):
            raise ValueError("Give member checkpoints (--encoders) or a saved multi-encoder (--model_name_or_path).")


def parse_args(argv: list[str] | None = None):
    parser = HfArgumentParser((MemberArguments, CorpusArguments, AdaptationArguments, TrainingArguments))
    argv = config_file_argv(parser, list(sys.argv[1:] if argv is None else argv))
    defaults = [token for key, value in ADAPTATION_DEFAULTS.items() for token in (f"--{key}", str(value))]
    member_args, corpus_args, adaptation_args, training_args = parser.parse_args_into_dataclasses(args=defaults + argv)
    apply_fast_path(training_args, argv, member_args.fast_path)
    return member_args, corpus_args, adaptation_args, training_args


def main(argv: list[str] | None = None) -> dict:
    member_args, corpus_args, adaptation_args, training_args = parse_args(argv)
    setup_run(training_args, __name__)

    corpus = corpus_args.load(seed=training_args.seed)
    report = adapt_members(member_args.model_name_or_path or member_args.encoders, corpus, training_args,
                           adaptation_args, output_dir=training_args.output_dir,
                           encoder_names=member_args.encoder_names)
    print(report["table"])
    return report


if __name__ == "__main__":
    main()
    PartialState().destroy_process_group()  # under torchrun: gloo's threads joined before exit, not aborted
