#!/usr/bin/env python
"""Pretrain a member by replaced-token detection (ELECTRA, Clark et al. 2020; ALECTRA with --architecture albert), or
continue pretraining a checkpoint that way, or pretrain it by masked LM as the baseline in the same setup, with the
stock Trainer. Modelled on transformers' examples/pytorch/language-modeling/run_mlm.py.

    python run_pretraining.py --objective rtd --discriminator electra-small \
        --tokenizer sentence-transformers/all-MiniLM-L6-v2 --train_file corpus/*.txt \
        --max_seq_length 128 --per_device_train_batch_size 128 --learning_rate 5e-4 --max_steps 20000 \
        --output_dir electra-small-mine
    python run_pretraining.py --objective rtd --architecture albert ...             # ALECTRA
    python run_pretraining.py --objective mlm ...                                   # the baseline, same setup
    python run_pretraining.py --objective rtd --discriminator adapted/MiniLM ...    # continue a checkpoint
    python run_glue_multi.py --encoders electra-small-mine sentence-transformers/all-mpnet-base-v2 ...

Writes to --output_dir the discriminator and its tokenizer (`AutoModel` loads the encoder; `AutoModelForPreTraining`
ELECTRA's encoder with its replaced-token head), the generator in `generator/` with --save_generator true, and
`pretraining_results.json` (settings, held-out generator accuracy, discriminator accuracy, precision/recall on
replaced tokens, fraction replaced, the training log). Defaults are ELECTRA-Small's: batch 128, lr 5e-4, Adam epsilon
1e-6, weight decay 0.01, 10k warmup steps, linear decay. The first argument may be a YAML/JSON config file.
"""

from __future__ import annotations

import logging
import sys

from accelerate import PartialState
from transformers import HfArgumentParser, TrainingArguments

from hf_multiencoder.data.corpus import CorpusArguments
from hf_multiencoder.pretraining.rtd import PRETRAINING_DEFAULTS, PretrainingArguments, pretrain
from hf_multiencoder.training.arguments import config_file_argv
from hf_multiencoder.training.fast_path import apply_fast_path
from hf_multiencoder.training.runs import setup_run

logger = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None):
    parser = HfArgumentParser((PretrainingArguments, CorpusArguments, TrainingArguments))
    argv = config_file_argv(parser, list(sys.argv[1:] if argv is None else argv))
    defaults = [token for key, value in PRETRAINING_DEFAULTS.items() for token in (f"--{key}", str(value))]
    pretraining_args, corpus_args, training_args = parser.parse_args_into_dataclasses(args=defaults + argv)
    apply_fast_path(training_args, argv, pretraining_args.fast_path)
    return pretraining_args, corpus_args, training_args


def main(argv: list[str] | None = None) -> dict:
    pretraining_args, corpus_args, training_args = parse_args(argv)
    setup_run(training_args, __name__)

    corpus = corpus_args.load(seed=training_args.seed)
    report = pretrain(pretraining_args, corpus, training_args)
    print({"objective": report["objective"], "train_seconds": report["train_seconds"], **report["eval"]})
    return report


if __name__ == "__main__":
    main()
    PartialState().destroy_process_group()  # under torchrun: gloo's threads joined before exit, not aborted
