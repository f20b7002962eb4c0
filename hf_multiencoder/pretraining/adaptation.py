"""Adapt every member to the user's domain before tuning them together: continued masked-LM pretraining on unlabelled
in-domain text (DAPT/TAPT, Gururangan et al. 2020; the adaptive step of adaptive + behavioural fine-tuning).

Each member is adapted on its own, with its own tokenizer and masked-LM head, by the stock `Trainer`::

    from hf_multiencoder.pretraining.adaptation import adapt_members
    from hf_multiencoder.data.corpus import load_corpus

    corpus = load_corpus("questions.txt")
    result = adapt_members(["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"],
                           corpus, output_dir="adapted", encoder_names=["MiniLM", "MPNet"], num_train_epochs=8)
    model = MultiEncoderForSequenceClassification.from_encoders(result["encoders"], encoder_names=["MiniLM", "MPNet"])

Per member: `AutoModelForMaskedLM` from the checkpoint. A checkpoint that ships no masked-LM head (every
sentence-transformers model) gets a new one, its decoder tied to the input embeddings. A random head's gradients
wreck the encoder (measured: MiniLM, lr 5e-5, MLM loss stuck near 6.5, the task score 6 points lower than without
adaptation), so by default a new head is first trained alone, the member frozen (`head_warmup_epochs` at
`head_warmup_learning_rate`), and only then is the member adapted, at a low rate (the seed's 1e-5). Masking is
`DataCollatorForLanguageModeling` (15%, whole-word masking as an option). The held-out loss is measured on one fixed
masking of the held-out text at the start, after the head warm-up and at the end.

Output: one folder per member, a standard checkpoint of the member's own architecture (encoder weights, config,
tokenizer; the head only on request, in `mlm/`), loadable by `AutoModel.from_pretrained`, `from_encoders` and
`run_glue_multi.py --encoders`; `adaptation_results.json` with each member's loss and perplexity. A saved
multi-encoder (or a live one) is adapted in place: its members' weights are replaced, fusion and head are kept.

The objective is pluggable (`OBJECTIVES`, `register_objective`): masked LM (`"mlm"`) and replaced-token detection
(`"rtd"`, ELECTRA; `rtd.py`) are built in; each registers itself into `objectives.py`.
Training side: not shipped with the weights.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from datasets import Dataset, DatasetDict
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    PreTrainedModel,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.data.data_collator import pad_without_fast_tokenizer_warning
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from ..data.corpus import tokenize_corpus
from ..models.modeling_multiencoder import multiencoder_base
from ..models.tokenization_multiencoder import pad_rows
from ..training.fast_path import auto_training_kwargs, pin_memory
from ..training.runs import (
    AtomicCheckpointMixin,
    check_finite_weights,
    check_training_length,
    last_complete_checkpoint,
    save_into,
)
from .objectives import OBJECTIVES, AdaptationObjective, register_objective

logger = logging.getLogger(__name__)

RESULTS_FILE = "adaptation_results.json"
HEAD_FOLDER = "mlm"
TRAINER_FOLDER = "trainer"
# The seed's adaptation settings (batch 16, lr 1e-5, weight decay 0.01, linear warmup); `default_training_arguments`
# and run_mlm_multi.py start from them.
ADAPTATION_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 16,
    "learning_rate": 1e-5,
    "weight_decay": 0.01,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0.06,
    "save_strategy": "no",
}


@dataclass
class AdaptationArguments:
    """How members are adapted (the objective's side; the `Trainer`'s options are its `TrainingArguments`)."""

    objective: str = field(
        default="mlm", metadata={"help": "The pretraining objective: mlm (masked LM) or rtd (replaced-token "
                                         "detection, ELECTRA: the member is the discriminator)."}
    )
    adapt_members: list[str] | None = field(
        default=None, metadata={"help": "Members to adapt, by index or name (default: all); the others are kept."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per example (or per packed block)."})
    line_by_line: bool = field(
        default=True, metadata={"help": "One example per text (truncated); false: texts packed into full blocks."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Share of tokens masked."})
    whole_word_mask: bool = field(
        default=False, metadata={"help": "Mask every subword of a chosen word (word boundaries from the offset "
                                         "mapping: members with a fast tokenizer; masked tokens all become the mask "
                                         "token)."}
    )
    head_warmup: str = field(
        default="auto", metadata={"help": "Train the masked-LM head alone, member frozen, before adapting the "
                                          "member: auto (when the head is new), always, never."}
    )
    head_warmup_epochs: float = field(default=1.0, metadata={"help": "Epochs of the head warm-up."})
    head_warmup_learning_rate: float = field(default=1e-3, metadata={"help": "Learning rate of the head warm-up."})
    save_mlm_head: bool = field(
        default=False, metadata={"help": "Also save each member with its head (AutoModelForMaskedLM) in <member>/mlm."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace members already adapted in the output folder."}
    )

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"Unknown objective {self.objective!r}; known: {', '.join(OBJECTIVES)}.")
        if self.head_warmup not in ("auto", "always", "never"):
            raise ValueError(f"`head_warmup` must be auto, always or never, got {self.head_warmup!r}.")
        check_masking(self.mlm_probability, self.max_seq_length)
        if self.head_warmup_epochs < 0:
            raise ValueError(f"`head_warmup_epochs` must be >= 0, got {self.head_warmup_epochs}.")


def check_masking(mlm_probability: float, max_seq_length: int) -> None:
    """Raise a `ValueError` for a share of masked tokens outside (0, 1) or examples shorter than 2 tokens."""
    if not 0 < mlm_probability < 1:
        raise ValueError(f"`mlm_probability` must be in (0, 1), got {mlm_probability}.")
    if max_seq_length < 2:
        raise ValueError(f"`max_seq_length` must be at least 2, got {max_seq_length}.")


def default_training_arguments(output_dir: str, **overrides) -> TrainingArguments:
    """`TrainingArguments` with the seed's adaptation settings (`ADAPTATION_DEFAULTS`) on the fast path (bf16 where
    the hardware computes it natively, the fused AdamW: `hf_multiencoder.fast_path`), `overrides` on top."""
    return TrainingArguments(output_dir=output_dir, **{**ADAPTATION_DEFAULTS, "report_to": "none",
                             "dataloader_pin_memory": pin_memory(), **auto_training_kwargs(overrides),
                             **overrides})


# ---- collator -------------------------------------------------------------------------------------------------------
@dataclass
class MaskedLMCollator(DataCollatorForLanguageModeling):
    """transformers' masked-LM collator, plus two things its `torch_call` lacks.

    - Examples that already carry `labels` (a held-out set masked once, so that every evaluation scores the same
      masks) are only padded: inputs by the tokenizer, labels with -100.
    - `offset_mapping` rows of different lengths are padded too, so that whole-word masking works with dynamic
      padding (the stock call hands them to `tokenizer.pad`, which cannot pad them).
    """

    def torch_call(self, examples: list[dict]) -> dict:
        if not isinstance(examples[0], dict) or not ({"labels", "offset_mapping"} & set(examples[0])):
            return super().torch_call(examples)
        examples = [dict(e) for e in examples]
        labels = [e.pop("labels") for e in examples] if "labels" in examples[0] else None
        offsets = [e.pop("offset_mapping") for e in examples] if "offset_mapping" in examples[0] else None
        batch = pad_without_fast_tokenizer_warning(self.tokenizer, examples, return_tensors="pt",
                                                   pad_to_multiple_of=self.pad_to_multiple_of)
        length = batch["input_ids"].shape[1]
        special_tokens_mask = batch.pop("special_tokens_mask", None)
        if labels is not None:
            batch["labels"] = pad_rows(labels, -100, length=length)
            return dict(batch)
        if self.seed is not None and self.generator is None:
            self.create_rng()
        offset_mapping = pad_rows(offsets, [0, 0], length=length) if self.whole_word_mask else None
        batch["input_ids"], batch["labels"] = self.torch_mask_tokens(
            batch["input_ids"], special_tokens_mask=special_tokens_mask, offset_mapping=offset_mapping)
        return dict(batch)


def mask_once(dataset: Dataset, collator: MaskedLMCollator, seed: int, batch_size: int = 256) -> Dataset:
    """Mask a tokenized held-out set once, with a seeded generator: the same masks for every evaluation, so the
    start and end losses compare the model, not the draw. Returns the masked `input_ids` and their `labels`."""
    masker = dataclasses.replace(collator, seed=seed)

    def mask(batch):
        features = [dict(zip(batch, values)) for values in zip(*batch.values())]
        lengths = [len(f["input_ids"]) for f in features]
        out = masker(features)
        return {key: [row[:n].tolist() for row, n in zip(out[key], lengths)] for key in out}

    masked = dataset.map(mask, batched=True, batch_size=batch_size, remove_columns=dataset.column_names,
                         desc="Masking the held-out text once")
    if "labels" in masked.column_names and not any(label != -100 for row in masked["labels"] for label in row):
        raise ValueError(f"The held-out text ({len(dataset)} example(s)) got no masked token at mlm_probability "
                         f"{collator.mlm_probability}: its loss and perplexity cannot be computed (they would be "
                         f"nan/inf). Give more held-out text (--validation_file or a larger "
                         f"--validation_split_percentage) or a higher --mlm_probability.")
    return masked


# ---- trainer --------------------------------------------------------------------------------------------------------
def _keep_positions(output, keep: torch.Tensor):
    """A member's output with only the `keep` positions of its token states, as one `(1, n_kept, hidden)` row."""
    hidden = output[0][keep].unsqueeze(0)  # (1, n_kept, hidden)
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    output["last_hidden_state"] = hidden
    return output


class AdaptationTrainer(AtomicCheckpointMixin, Trainer):
    """The stock `Trainer`, whose masked-LM loss runs the vocabulary head only where a token is masked.

    Masked-LM classes project every position onto the vocabulary although only the masked ones (15%) are scored;
    for a small member that projection costs as much as the encoder itself. With `encoder` set (the member inside the
    model), a forward hook hands the head the masked positions alone; the loss is the same cross-entropy (summed and
    divided by `num_items_in_batch` when the Trainer gives it, as the models do, else the batch mean).
    """

    def __init__(self, *args, encoder: nn.Module | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.encoder = encoder

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.encoder is None or "labels" not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        keep = labels != -100  # (batch, seq)
        handle = self.encoder.register_forward_hook(lambda module, args, output: _keep_positions(output, keep))
        try:
            outputs = model(**inputs)
        finally:
            handle.remove()
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]  # (1, n_masked, vocab)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels[keep],
                                           reduction="sum")
        divisor = num_items_in_batch if num_items_in_batch is not None else keep.sum().clamp(min=1)
        loss = loss / divisor.to(loss.device) if isinstance(divisor, torch.Tensor) else loss / divisor
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        return (loss, outputs) if return_outputs else loss


# ---- objectives -----------------------------------------------------------------------------------------------------
class MaskedLMObjective(AdaptationObjective):
    """Masked language modelling with the member's own `AutoModelForMaskedLM` class."""

    name = "mlm"
    sparse_head = True
    reports_perplexity = True

    def check_member(self, config, name: str) -> None:
        if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
            raise ValueError(f"Member {name!r} is a {type(config).__name__} ({config.model_type!r}), an architecture "
                             f"with no masked-LM class in transformers (AutoModelForMaskedLM): it cannot be adapted "
                             f"with masked-LM pretraining. Leave it out with --adapt_members.")

    def from_checkpoint(self, checkpoint: str, **kwargs) -> tuple[PreTrainedModel, list[str]]:
        model, info = AutoModelForMaskedLM.from_pretrained(checkpoint, output_loading_info=True, **kwargs)
        return model, sorted(k for k in info["missing_keys"] if not k.startswith(f"{model.base_model_prefix}."))

    def from_member(self, member: PreTrainedModel) -> tuple[PreTrainedModel, list[str]]:
        model = AutoModelForMaskedLM.from_config(member.config)
        result = self.encoder(model).load_state_dict(member.state_dict(), strict=False)
        unexpected = [k for k in result.unexpected_keys if not k.startswith("pooler.")]  # heads take no pooler
        if unexpected or result.missing_keys:
            raise ValueError(f"The member's weights do not fit {type(model).__name__}: missing {result.missing_keys}, "
                             f"unexpected {unexpected}.")
        model.tie_weights()
        return model, self.head_parameters(model)

    def data_collator(self, tokenizer, args: AdaptationArguments, seed: int | None = None) -> MaskedLMCollator:
        # whole words: every masked token becomes the mask token (transformers' collator supports nothing else)
        replace = {"mask_replace_prob": 1.0, "random_replace_prob": 0.0} if args.whole_word_mask else {}
        return MaskedLMCollator(tokenizer, mlm_probability=args.mlm_probability, whole_word_mask=args.whole_word_mask,
                                seed=seed, **replace)

    def needs_offsets(self, args: AdaptationArguments) -> bool:
        return args.whole_word_mask


register_objective(MaskedLMObjective())


# ---- checks ---------------------------------------------------------------------------------------------------------
def max_positions(model: nn.Module) -> int | None:
    """How many tokens a member can take: its absolute position table, less the offset of architectures that count
    positions from the padding index (RoBERTa, MPNet); None for members without one (relative positions)."""
    for name, module in model.named_modules():
        if name.endswith("position_embeddings") and isinstance(module, nn.Embedding):
            offset = module.padding_idx + 1 if module.padding_idx is not None else 0
            return module.num_embeddings - offset
    return None


def check_max_seq_length(config, max_seq_length: int, name: str) -> None:
    """Raise a `ValueError` if `max_seq_length` is beyond the member's positions (read from a meta-device copy)."""
    with torch.device("meta"):
        limit = max_positions(AutoModel.from_config(config))
    if limit is not None and max_seq_length > limit:
        raise ValueError(f"--max_seq_length {max_seq_length} is beyond member {name!r}'s {limit} positions; use at "
                         f"most {limit}.")


def _member_indices(selection: list | None, names: list[str]) -> list[int]:
    if not selection:
        return list(range(len(names)))
    indices = []
    for key in selection:
        key = str(key)
        if key.isdigit() and int(key) < len(names):
            indices.append(int(key))
        elif key in names:
            indices.append(names.index(key))
        else:
            raise ValueError(f"No member {key!r} to adapt; members are {names} (give an index or a name).")
    return sorted(set(indices))


def _folder_names(encoders: list[str], encoder_names: list[str] | None) -> list[str]:
    names = [str(n) for n in encoder_names] if encoder_names else [
        os.path.basename(os.path.normpath(str(e))) for e in encoders]
    if len(names) != len(encoders):
        raise ValueError(f"{len(names)} encoder names for {len(encoders)} members.")
    if len(set(names)) != len(names):
        raise ValueError(f"Member names must be unique (they name the output folders), got {names}; pass "
                         f"encoder_names (--encoder_names).")
    bad = [n for n in names if not n or os.sep in n or n in (".", "..", TRAINER_FOLDER)]
    if bad:
        raise ValueError(f"Member names {bad} cannot name an output folder; pass encoder_names (--encoder_names).")
    return names


def _read_results(output_dir: str) -> dict | None:
    path = os.path.join(output_dir, RESULTS_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def check_output_dir(output_dir: str, names: list[str], overwrite: bool, resume: bool) -> dict | None:
    """Refuse an output folder that holds other members, or these members already adapted (unless `overwrite`, or
    `resume`, which keeps the finished ones). Returns the finished run's results to resume from, if any."""
    if not os.path.isdir(output_dir):
        return None
    entries = [e for e in os.listdir(output_dir) if os.path.isdir(os.path.join(output_dir, e))]
    members = [e for e in entries if os.path.isfile(os.path.join(output_dir, e, "config.json"))
               and not e.endswith(".partial")]
    others = sorted(set(members) - set(names))
    if others:
        raise ValueError(f"Output folder {output_dir} holds other members ({', '.join(others)}); these are "
                         f"{names}. Use another output folder.")
    previous = _read_results(output_dir)
    done = [n for n in names if n in members]
    if done and not (overwrite or resume):
        raise ValueError(f"Output folder {output_dir} already holds adapted {', '.join(done)}: pass "
                         f"overwrite_output_dir (--overwrite_output_dir true) to replace them, or "
                         f"resume_from_checkpoint to keep the finished members and continue.")
    return previous if resume else None


# ---- adaptation of one member ---------------------------------------------------------------------------------------
_TIMING_METRICS = ("loss", "runtime", "samples_per_second", "steps_per_second", "model_preparation_time")


def _loss_entry(metrics: dict, objective: AdaptationObjective) -> dict:
    """The held-out loss, its perplexity (masked-LM objectives) and the objective's own metrics (RTD: the
    replaced-token ones)."""
    loss = float(metrics["eval_loss"])
    entry = {"loss": loss}
    if objective.reports_perplexity:
        entry["perplexity"] = math.exp(loss) if loss < 700 else float("inf")
    entry.update({k.removeprefix("eval_"): v for k, v in metrics.items()
                  if k.startswith("eval_") and k.removeprefix("eval_") not in _TIMING_METRICS})
    return entry


def _phase_arguments(args: TrainingArguments, output_dir: str, **changes) -> TrainingArguments:
    """A copy of the user's `TrainingArguments` for one member's phase."""
    phase = copy.deepcopy(args)
    phase.output_dir = output_dir
    phase.remove_unused_columns = False  # the collator needs `special_tokens_mask` / `offset_mapping`
    phase.prediction_loss_only = True  # evaluation reports the held-out loss; no logits are gathered
    for key, value in changes.items():
        setattr(phase, key, value)
    return phase


def adapt_one(
    model: PreTrainedModel,
    new_head: list[str],
    tokenizer,
    corpus: DatasetDict,
    training_args: TrainingArguments,
    adaptation_args: AdaptationArguments,
    trainer_dir: str,
    name: str = "member",
) -> dict:
    """Adapt one member (`model`: the member with its objective's head) on a text corpus; returns its report."""
    objective = OBJECTIVES[adaptation_args.objective]
    if adaptation_args.whole_word_mask and not tokenizer.is_fast:  # word boundaries come from the offset mapping
        logger.warning(f"{name}: {type(tokenizer).__name__} is not a fast tokenizer (no offset mapping): masking "
                       f"single tokens instead of whole words.")
        adaptation_args = dataclasses.replace(adaptation_args, whole_word_mask=False)
    tokenized = tokenize_corpus(corpus, tokenizer, max_seq_length=adaptation_args.max_seq_length,
                                line_by_line=adaptation_args.line_by_line,
                                return_offsets_mapping=objective.needs_offsets(adaptation_args))
    collator = objective.data_collator(tokenizer, adaptation_args)
    eval_dataset = mask_once(tokenized["validation"], collator, seed=training_args.seed)
    report: dict[str, Any] = {"train_examples": len(tokenized["train"]), "eval_examples": len(eval_dataset),
                              "new_head": bool(new_head), "whole_word_mask": adaptation_args.whole_word_mask}

    # resume: this member's newest complete checkpoint (its own Trainer folder), if it got that far
    checkpoint = last_complete_checkpoint(trainer_dir) if training_args.resume_from_checkpoint else None

    def trainer_for(args):
        common = {"model": model, "args": args, "train_dataset": tokenized["train"], "eval_dataset": eval_dataset,
                  "data_collator": collator, "processing_class": tokenizer}
        if objective.trainer_class is not None:
            return objective.trainer_class(**common)
        return AdaptationTrainer(**common, encoder=objective.encoder(model) if objective.sparse_head else None)

    evaluator = trainer_for(_phase_arguments(training_args, trainer_dir))
    report["start"] = _loss_entry(evaluator.evaluate(), objective)
    start = time.time()
    warm_up = adaptation_args.head_warmup == "always" or (adaptation_args.head_warmup == "auto" and new_head)
    if warm_up and adaptation_args.head_warmup_epochs > 0 and checkpoint is None:
        head = set(objective.head_parameters(model))
        logger.info(f"{name}: training the new {adaptation_args.objective} head alone first ({len(head)} tensors, "
                    f"{adaptation_args.head_warmup_epochs} epoch(s) at lr {adaptation_args.head_warmup_learning_rate}"
                    f", the member frozen).")
        trainable = {n: p.requires_grad for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            p.requires_grad_(n in head)
        warmup_args = _phase_arguments(training_args, os.path.join(trainer_dir, "head_warmup"),
                                       learning_rate=adaptation_args.head_warmup_learning_rate,
                                       num_train_epochs=adaptation_args.head_warmup_epochs, max_steps=-1,
                                       save_strategy="no", eval_strategy="no", resume_from_checkpoint=None)
        trainer_for(warmup_args).train()
        for n, p in model.named_parameters():
            p.requires_grad_(trainable[n])
        report["after_head_warmup"] = _loss_entry(evaluator.evaluate(), objective)
    trainer = trainer_for(_phase_arguments(training_args, trainer_dir))
    trainer.train(resume_from_checkpoint=checkpoint)
    report["train_seconds"] = round(time.time() - start, 1)
    report["end"] = _loss_entry(trainer.evaluate(), objective)
    return report


# ---- entry point ----------------------------------------------------------------------------------------------------
def _adaptation_arguments(adaptation_args: AdaptationArguments | None, overrides: dict) -> AdaptationArguments:
    names = {f.name for f in dataclasses.fields(AdaptationArguments)}
    mine = {k: overrides.pop(k) for k in list(overrides) if k in names}
    if adaptation_args is None:
        return AdaptationArguments(**mine)
    return dataclasses.replace(adaptation_args, **mine) if mine else adaptation_args


def _save_member(target: PreTrainedModel, tokenizer, model_with_head: PreTrainedModel | None, folder: str) -> None:
    """Write a member folder whole or not at all: into a sibling temporary folder, then renamed."""
    tmp = folder + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    target.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if model_with_head is not None:
        model_with_head.save_pretrained(os.path.join(tmp, HEAD_FOLDER))
        tokenizer.save_pretrained(os.path.join(tmp, HEAD_FOLDER))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _copy_encoder_weights(source: nn.Module, target: nn.Module) -> None:
    """Adapted member weights into the member model (which may hold more, e.g. a pooler the head model lacks)."""
    result = target.load_state_dict(source.state_dict(), strict=False)
    if result.unexpected_keys or any("pooler" not in k for k in result.missing_keys):
        raise RuntimeError(f"Adapted weights do not fit the member: missing {result.missing_keys}, unexpected "
                           f"{result.unexpected_keys}.")


def format_table(members: list[dict]) -> str:
    """The per-member adaptation table (Markdown): examples, held-out loss and perplexity at the start, after the head
    warm-up and at the end, seconds."""

    def cell(entry, key):
        return f"{entry[key]:.3f}" if entry and key in entry else "-"

    lines = ["| member | adapted | new head | train / eval examples | loss start | after head warm-up | loss end | "
             "perplexity start | after head warm-up | perplexity end | seconds |", "|---" * 11 + "|"]
    for m in members:
        if not m.get("adapted"):
            lines.append(f"| {m['name']} | no | - | - | - | - | - | - | - | - | - |")
            continue
        start, warm, end = m["start"], m.get("after_head_warmup"), m["end"]
        lines.append(f"| {m['name']} | yes | {'yes' if m['new_head'] else 'no'} | {m['train_examples']} / "
                     f"{m['eval_examples']} | {cell(start, 'loss')} | {cell(warm, 'loss')} | {cell(end, 'loss')} | "
                     f"{cell(start, 'perplexity')} | {cell(warm, 'perplexity')} | {cell(end, 'perplexity')} | "
                     f"{m['train_seconds']:.0f} |")
    return "\n".join(lines)


def adapt_members(
    encoders: list[str] | str | PreTrainedModel,
    corpus: DatasetDict,
    training_args: TrainingArguments | None = None,
    adaptation_args: AdaptationArguments | None = None,
    *,
    output_dir: str | None = None,
    encoder_names: list[str] | None = None,
    tokenizer=None,
    **overrides,
) -> dict:
    """Continue each member's pretraining on `corpus` (a `load_corpus` result: `train`/`validation` with `text`).

    Args:
        encoders: Member checkpoints (names or folders `AutoModel` accepts): each adapted member is saved to
            `output_dir/<name>/`. Or a saved multi-encoder (a folder or Hub id) or a live one: its members are
            adapted in place, fusion and head kept; the whole model is saved to `output_dir` (a live model only
            if `output_dir` is given).
        corpus: The unlabelled text.
        training_args: The `Trainer`'s options for the member phase (default: `default_training_arguments`, the
            seed's batch 16, lr 1e-5, weight decay 0.01, linear warmup). Its `output_dir` is the default output.
        adaptation_args: The objective's options (`AdaptationArguments`); its fields can also be given as keywords.
        encoder_names: Display names; they name the member folders (default: the checkpoints' last path part).
        tokenizer: The `MultiEncoderTokenizer` of a live multi-encoder.
        overrides: `AdaptationArguments` fields, and `TrainingArguments` fields when `training_args` is None.

    Returns:
        A report: `members` (per member: `name`, `source`, `adapted`, `path`, `new_head`, eval `loss`/`perplexity`
        at `start`, `after_head_warmup` and `end`, examples, seconds), `encoders` (the folders to tune from, in
        member order: adapted ones and the untouched others), `settings`. Also written to
        `output_dir/adaptation_results.json`; the table is logged and returned as `table`.
    """
    adaptation_args = _adaptation_arguments(adaptation_args, overrides)
    objective = OBJECTIVES[adaptation_args.objective]
    if training_args is None:
        training_args = default_training_arguments(output_dir or "adapted", **overrides)
    elif overrides:
        raise ValueError(f"Unknown option(s) {sorted(overrides)}: set them on training_args.")
    output_dir = output_dir or training_args.output_dir
    check_training_length(training_args)
    for split in ("train", "validation"):
        if split not in corpus or len(corpus[split]) == 0:
            raise ValueError(f"The corpus has no {split!r} text: build it with load_corpus.")

    live = isinstance(encoders, PreTrainedModel)
    multi = live
    if isinstance(encoders, str):
        if getattr(AutoConfig.from_pretrained(encoders), "model_type", None) != "multiencoder":
            raise ValueError(f"{encoders} is not a saved multi-encoder; pass member checkpoints as a list.")
        multi = True
    if multi:
        return _adapt_multiencoder(encoders, corpus, training_args, adaptation_args, output_dir, tokenizer, live)
    if not encoders:
        raise ValueError("`encoders` must be a non-empty list of member checkpoints.")
    encoders = [str(e) for e in encoders]
    names = _folder_names(encoders, encoder_names)
    chosen = _member_indices(adaptation_args.adapt_members, names)
    configs = [AutoConfig.from_pretrained(e) for e in encoders]
    for i in chosen:  # every check before any training
        objective.check_member(configs[i], names[i])
        check_max_seq_length(configs[i], adaptation_args.max_seq_length, names[i])
    previous = check_output_dir(output_dir, [names[i] for i in chosen], adaptation_args.overwrite_output_dir,
                                bool(training_args.resume_from_checkpoint))
    settings = _settings(training_args, adaptation_args, corpus)
    finished = {m["name"]: m for m in (previous or {}).get("members", []) if m.get("adapted") and m.get("end")}
    before, now = _comparable(previous.get("settings") if previous else None), _comparable(settings)
    changed = [f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(before) | set(now))
               if before.get(k) != now.get(k)]
    if previous and changed:  # finished members, or checkpoints of the member in progress, of other settings
        raise ValueError(f"Output folder {output_dir} holds {', '.join(finished) or 'a run'} adapted with other "
                         f"settings ({'; '.join(changed)}); resume with the same ones, pass overwrite_output_dir "
                         f"(--overwrite_output_dir true) to adapt them again, or use another output folder.")
    os.makedirs(output_dir, exist_ok=True)
    report: dict[str, Any] = {"objective": adaptation_args.objective, "settings": settings, "members": []}
    if previous is None:  # the settings recorded before any training: a resumed member is checked against them
        _write_json(os.path.join(output_dir, RESULTS_FILE), report)
    for i, (checkpoint, name) in enumerate(zip(encoders, names)):
        entry: dict[str, Any] = {"name": name, "source": checkpoint, "adapted": i in chosen}
        folder = os.path.join(output_dir, name)
        if i not in chosen:
            entry["path"] = checkpoint
        elif name in finished and os.path.isfile(os.path.join(folder, "config.json")):
            logger.info(f"{name}: already adapted in {folder}; kept.")
            entry = finished[name]
        else:
            set_seed(training_args.seed)
            model, new_head = objective.from_checkpoint(checkpoint)
            if new_head:
                logger.warning(f"{name} ({checkpoint}) ships no {objective.name} head: the head is new "
                               f"({len(new_head)} weights), its decoder tied to the input embeddings.")
            tokenizer_i = AutoTokenizer.from_pretrained(checkpoint)
            entry.update(adapt_one(model, new_head, tokenizer_i, corpus, training_args, adaptation_args,
                                   os.path.join(output_dir, TRAINER_FOLDER, name), name=name))
            check_finite_weights(model, f"the adapted {name}")
            target = AutoModel.from_pretrained(checkpoint)
            _copy_encoder_weights(objective.encoder(model), target)
            _save_member(target, tokenizer_i, model if adaptation_args.save_mlm_head else None, folder)
            entry["path"] = folder
            del model, target
        report["members"].append(entry)
        _write_json(os.path.join(output_dir, RESULTS_FILE), report)
    return _finish(report, output_dir)


def _settings(training_args: TrainingArguments, adaptation_args: AdaptationArguments, corpus: DatasetDict) -> dict:
    return {
        **dataclasses.asdict(adaptation_args),
        "num_train_epochs": training_args.num_train_epochs,
        "max_steps": training_args.max_steps,
        "learning_rate": training_args.learning_rate,
        "per_device_train_batch_size": training_args.per_device_train_batch_size,
        "gradient_accumulation_steps": training_args.gradient_accumulation_steps,
        "weight_decay": training_args.weight_decay,
        "warmup_steps": training_args.warmup_steps,
        "seed": training_args.seed,
        "train_texts": len(corpus["train"]),
        "validation_texts": len(corpus["validation"]),
    }


def _comparable(settings: dict | None) -> dict:
    """Settings as stored in JSON, without the options that do not change the result."""
    settings = json.loads(json.dumps(settings or {}))
    settings.pop("overwrite_output_dir", None)
    return settings


def _finish(report: dict, output_dir: str | None) -> dict:
    if all("path" in m for m in report["members"]):
        report["encoders"] = [m["path"] for m in report["members"]]
    report["table"] = format_table(report["members"])
    if output_dir:
        _write_json(os.path.join(output_dir, RESULTS_FILE), report)
    logger.info(f"Adaptation ({report['objective']}), held-out loss and perplexity per member:\n{report['table']}")
    return report


def _adapt_multiencoder(model, corpus, training_args, adaptation_args, output_dir, tokenizer, live) -> dict:
    """Adapt the members of a multi-encoder in place (fusion and head untouched) and save the whole model."""
    from ..models.modeling_multiencoder import MultiEncoderPreTrainedModel
    from ..models.tokenization_multiencoder import MultiEncoderTokenizer

    source = getattr(model, "name_or_path", "") if live else str(model)
    if not live:
        import hf_multiencoder

        config = AutoConfig.from_pretrained(model)
        architecture = (config.architectures or ["MultiEncoderModel"])[0]
        model_cls = getattr(hf_multiencoder, architecture, None)
        if model_cls is None or not issubclass(model_cls, MultiEncoderPreTrainedModel):
            raise ValueError(f"{model}: unknown multi-encoder architecture {architecture!r}.")
        tokenizer = MultiEncoderTokenizer.from_pretrained(model)
        model = model_cls.from_pretrained(model)
    if tokenizer is None:
        raise ValueError("Adapting a live multi-encoder needs its MultiEncoderTokenizer (tokenizer=...).")
    tokenizer.check_model(model)
    objective = OBJECTIVES[adaptation_args.objective]
    base = multiencoder_base(model)
    names = list(base.config.encoder_names)
    chosen = _member_indices(adaptation_args.adapt_members, names)
    for i in chosen:
        objective.check_member(base.encoders[i].config, names[i])
        limit = max_positions(base.encoders[i])
        if limit is not None and adaptation_args.max_seq_length > limit:
            raise ValueError(f"--max_seq_length {adaptation_args.max_seq_length} is beyond member {names[i]!r}'s "
                             f"{limit} positions; use at most {limit}.")
    if output_dir and not live and os.path.isdir(output_dir) and os.listdir(output_dir) and not (
            adaptation_args.overwrite_output_dir):
        raise ValueError(f"Output folder {output_dir} is not empty: pass overwrite_output_dir "
                         f"(--overwrite_output_dir true) or another folder.")
    report: dict[str, Any] = {"objective": adaptation_args.objective, "source": source,
                              "settings": _settings(training_args, adaptation_args, corpus), "members": []}
    trainer_root = output_dir or training_args.output_dir
    for i, name in enumerate(names):
        entry: dict[str, Any] = {"name": name, "source": source, "adapted": i in chosen}
        if i in chosen:
            set_seed(training_args.seed)
            member = base.encoders[i]
            mlm_model, new_head = objective.from_member(member)
            logger.warning(f"{name}: the {objective.name} head is new ({len(new_head)} weights), its decoder tied to "
                           f"the input embeddings.")
            mlm_model.to(member.device)
            entry.update(adapt_one(mlm_model, new_head, tokenizer.tokenizers[i], corpus, training_args,
                                   adaptation_args, os.path.join(trainer_root, TRAINER_FOLDER, name), name=name))
            check_finite_weights(mlm_model, f"the adapted {name}")
            _copy_encoder_weights(objective.encoder(mlm_model), member)
            del mlm_model
        report["members"].append(entry)
    if output_dir:
        save_into(output_dir, lambda folder: (model.save_pretrained(folder), tokenizer.save_pretrained(folder)),
                  partial=".model.partial")
    result = _finish(report, output_dir)
    result["model"] = model
    return result


__all__ = [
    "ADAPTATION_DEFAULTS",
    "OBJECTIVES",
    "AdaptationArguments",
    "AdaptationObjective",
    "AdaptationTrainer",
    "MaskedLMCollator",
    "MaskedLMObjective",
    "adapt_members",
    "adapt_one",
    "check_masking",
    "check_max_seq_length",
    "default_training_arguments",
    "format_table",
    "mask_once",
    "max_positions",
    "register_objective",
]
