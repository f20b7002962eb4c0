"""Distil a trained multi-encoder (the teacher) into one plain transformers model (the student).

The student is any `AutoModelForSequenceClassification` checkpoint (typically one of the teacher's members) with its
own tokenizer. It learns from soft targets, the teacher's logits at a temperature `T` (KL divergence, scaled by `T**2`
as Hinton et al. do), mixed with the gold labels: `loss = alpha * soft + (1 - alpha) * hard`; for regression the soft
target is the teacher's prediction (MSE). Texts without a gold label (unlabelled in-domain text) learn from the
teacher alone. The teacher's logits are computed once per set of texts and cached (`teacher_logits_<hash>.npy`), so a
rerun, another seed or another student reuses them. The result is a standard transformers folder: no remote code, it
loads with the Auto classes and `pipeline` anywhere.

Sequence tasks (classification, pairs, regression); token classification is not distilled yet (the student's words
would have to be aligned with the teacher's).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Trainer

from ..models.modeling_multiencoder import MultiEncoderForSequenceClassification

logger = logging.getLogger(__name__)

TEACHER_COLUMN = "teacher_logits"
WEIGHTS_FILE = "teacher_fusion_weights"


def texts_fingerprint(texts: list[str], text_pairs: list[str] | None, teacher_id: str, max_length: int | None) -> str:
    """A short hash of what the teacher's logits depend on: the teacher (its folder's weights file, or a name), the
    texts and the truncation."""
    h = hashlib.sha256(json.dumps([teacher_id, max_length]).encode())
    for i, text in enumerate(texts):
        h.update(text.encode("utf-8") + b"\0" + (text_pairs[i].encode("utf-8") if text_pairs else b"") + b"\1")
    return h.hexdigest()[:16]


def _teacher_id(teacher) -> str:
    folder = getattr(teacher, "name_or_path", "") or ""
    weights = os.path.join(folder, "model.safetensors")
    if os.path.isfile(weights):  # a saved teacher: its weights file identifies it
        stat = os.stat(weights)
        return f"{os.path.abspath(folder)}:{stat.st_size}:{stat.st_mtime_ns}"
    return f"{type(teacher).__name__}:{id(teacher)}"  # an in-memory teacher: cached for this process only


@torch.inference_mode()
def teacher_logits(teacher: MultiEncoderForSequenceClassification, tokenizer, texts: list[str],
                   text_pairs: list[str] | None = None, batch_size: int = 64, max_length: int | None = 128,
                   cache_dir: str | None = None, return_fusion_weights: bool = False):
    """The teacher's logits `(len(texts), num_labels)`, from `cache_dir` when they were computed before for the same
    teacher, texts and `max_length`. With `return_fusion_weights`, `(logits, weights)`: each text's fusion weights
    `(len(texts), num_members)` from the same pass (None for a fusion without weights), cached beside the logits."""
    if not isinstance(teacher, MultiEncoderForSequenceClassification):
        raise ValueError(f"The teacher must be a trained MultiEncoderForSequenceClassification, got "
                         f"{type(teacher).__name__} (token-classification teachers are not distilled yet).")
    paths = None
    if cache_dir is not None:
        key = texts_fingerprint(texts, text_pairs, _teacher_id(teacher), max_length)
        paths = {name: os.path.join(cache_dir, f"{name}_{key}.npy") for name in (TEACHER_COLUMN, WEIGHTS_FILE)}
        cached = {name: np.load(path) for name, path in paths.items() if os.path.isfile(path)}
        if TEACHER_COLUMN in cached and cached[TEACHER_COLUMN].shape[0] == len(texts) and (
                not return_fusion_weights or WEIGHTS_FILE in cached or not teacher.base_model.fusion.has_weights):
            logger.info(f"Teacher logits from {paths[TEACHER_COLUMN]}")
            logits = cached[TEACHER_COLUMN]
            return (logits, cached.get(WEIGHTS_FILE)) if return_fusion_weights else logits
    was_training = teacher.training
    teacher.eval()
    device = next(teacher.parameters()).device
    lengths = teacher.base_model.member_max_lengths(max_length)
    order = np.argsort([-len(t) - (len(text_pairs[i]) if text_pairs else 0) for i, t in enumerate(texts)])
    out = np.zeros((len(texts), teacher.config.num_labels), dtype=np.float32)
    weights = None
    for start in range(0, len(texts), batch_size):
        rows = order[start:start + batch_size]  # similar lengths together: less padding
        enc = tokenizer([texts[i] for i in rows], text_pair=[text_pairs[i] for i in rows] if text_pairs else None,
                        padding=True, truncation=True, max_length=lengths, return_tensors="pt").to(device)
        result = teacher(**enc)
        out[rows] = result.logits.float().cpu().numpy()
        if result.fusion_weights is not None:
            if weights is None:
                weights = np.zeros((len(texts), result.fusion_weights.shape[-1]), dtype=np.float32)
            weights[rows] = result.fusion_weights.float().cpu().numpy()
    teacher.train(was_training)
    if paths is not None:
        os.makedirs(cache_dir, exist_ok=True)
        for name, array in ((WEIGHTS_FILE, weights), (TEACHER_COLUMN, out)):  # the logits last: they mark it done
            if array is not None:
                tmp = paths[name] + ".partial.npy"
                np.save(tmp, array)
                os.replace(tmp, paths[name])  # a killed run never leaves a half-written cache
    return (out, weights) if return_fusion_weights else out


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor | None,
                      temperature: float = 2.0, alpha: float = 0.5, regression: bool = False) -> torch.Tensor:
    """`alpha * soft + (1 - alpha) * hard`. Classification: soft = KL(teacher || student) at `temperature`, times
    `temperature**2`; hard = cross-entropy on the examples with a label (label < 0: none). Regression: soft = MSE to
    the teacher's prediction, hard = MSE to the label (NaN: none). Examples without a label count in the soft part
    only."""
    if regression:
        student, teacher = student_logits.view(-1).float(), teacher_logits.view(-1).float()
        soft = F.mse_loss(student, teacher)
        has_label = None if labels is None else ~torch.isnan(labels.view(-1).float())
        hard = F.mse_loss(student[has_label], labels.view(-1).float()[has_label]) \
            if has_label is not None and has_label.any() else None
    else:
        t = temperature
        soft = F.kl_div(F.log_softmax(student_logits.float() / t, -1), F.log_softmax(teacher_logits.float() / t, -1),
                        reduction="batchmean", log_target=True) * t * t
        has_label = None if labels is None else labels >= 0
        hard = F.cross_entropy(student_logits.float()[has_label], labels[has_label]) \
            if has_label is not None and has_label.any() else None
    return soft if hard is None else alpha * soft + (1 - alpha) * hard


class DistillationTrainer(Trainer):
    """`Trainer` whose training loss is [`distillation_loss`] against a `teacher_logits` column of the training set
    (evaluation sets without that column are scored on their labels as usual)."""

    def __init__(self, *args, temperature: float = 2.0, alpha: float = 0.5, **kwargs):
        super().__init__(*args, **kwargs)
        if temperature <= 0:
            raise ValueError(f"`temperature` must be positive, got {temperature}.")
        if not 0 <= alpha <= 1:
            raise ValueError(f"`alpha` (the soft targets' share of the loss) must be in [0, 1], got {alpha}.")
        self.temperature, self.alpha = temperature, alpha

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if TEACHER_COLUMN not in self._signature_columns:  # keep the column that `remove_unused_columns` would drop
            self._signature_columns = [*self._signature_columns, TEACHER_COLUMN]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        targets = inputs.pop(TEACHER_COLUMN, None)
        if targets is None:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        labels = inputs.pop("labels", None)
        outputs = model(**inputs)
        config = self.accelerator.unwrap_model(model).config
        regression = config.problem_type == "regression" or config.num_labels == 1
        loss = distillation_loss(outputs.logits, targets.to(outputs.logits.device), labels,
                                 temperature=self.temperature, alpha=self.alpha, regression=regression)
        return (loss, outputs) if return_outputs else loss


def _task_texts(dataset, spec) -> tuple[list[str], list[str] | None]:
    return dataset["sentence1"], (dataset["sentence2"] if spec.is_pair else None)


def load_teacher(teacher, teacher_tokenizer=None):
    """`(teacher model, its MultiEncoderTokenizer)` from a trained multi-encoder classifier's folder (or Hub id), or
    from a model object and its tokenizer."""
    from ..models.tokenization_multiencoder import MultiEncoderTokenizer

    if isinstance(teacher, str):
        teacher_tokenizer = teacher_tokenizer or MultiEncoderTokenizer.from_pretrained(teacher)
        teacher = MultiEncoderForSequenceClassification.from_pretrained(teacher)
    if teacher_tokenizer is None:
        raise ValueError("Give the teacher's MultiEncoderTokenizer (`teacher_tokenizer`) with a teacher model object.")
    return teacher, teacher_tokenizer


def distillation_trainer(teacher, student: str, raw, spec, training_args, teacher_tokenizer=None,
                         unlabelled_texts=None, temperature: float = 2.0, alpha: float = 0.5,
                         max_length: int | None = 128, cache_dir: str | None = None, teacher_batch_size: int = 64):
    """The [`DistillationTrainer`] of [`distill`], built but not trained, and the splits tokenized for the student
    (`{"train": ..., validation split: ...}`): for a study that adds its own callbacks before `trainer.train()`."""
    import datasets
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    from ..data.loading import tokenize_task
    from .metrics import build_compute_metrics

    if spec.kind == "token":
        raise ValueError(f"{spec.name} is a token-classification task: distillation covers sequence tasks "
                         f"(classification, pairs, regression) for now.")
    teacher, teacher_tokenizer = load_teacher(teacher, teacher_tokenizer)
    regression = spec.is_regression
    if (teacher.config.num_labels == 1) != regression or (not regression and spec.num_labels
                                                           != teacher.config.num_labels):
        raise ValueError(f"The teacher predicts {teacher.config.num_labels} label(s) but the task {spec.name} has "
                         f"{spec.num_labels}: distil on the task the teacher was trained for.")
    teacher.to(training_args.device)
    train = raw["train"]
    texts, pairs = _task_texts(train, spec)
    cache_dir = cache_dir or os.path.join(training_args.output_dir, "teacher_cache")
    soft = teacher_logits(teacher, teacher_tokenizer, texts, pairs, batch_size=teacher_batch_size,
                          max_length=max_length, cache_dir=cache_dir)
    train = train.add_column(TEACHER_COLUMN, [row.tolist() for row in soft])
    if unlabelled_texts:
        if spec.is_pair:
            raise ValueError("Unlabelled text for a sentence-pair task would need pairs: leave it out.")
        extra = teacher_logits(teacher, teacher_tokenizer, list(unlabelled_texts), None, batch_size=teacher_batch_size,
                               max_length=max_length, cache_dir=cache_dir)
        unlabelled = datasets.Dataset.from_dict(
            {"sentence1": list(unlabelled_texts), "label": [float("nan") if regression else -1] * len(extra),
             TEACHER_COLUMN: [row.tolist() for row in extra]}, features=train.features)
        train = datasets.concatenate_datasets([train, unlabelled])
    teacher.to("cpu")  # the student trains alone on the device

    tokenizer = AutoTokenizer.from_pretrained(student)
    label_kwargs = {"num_labels": teacher.config.num_labels,
                    "problem_type": "regression" if regression else "single_label_classification"}
    if not regression:
        label_kwargs |= {"id2label": dict(teacher.config.id2label), "label2id": dict(teacher.config.label2id)}
    model = AutoModelForSequenceClassification.from_pretrained(student, dtype=torch.float32, **label_kwargs)
    splits = {"train": train, **{s: raw[s] for s in spec.validation_splits if s in raw}}
    tokenized = {s: tokenize_task(ds, spec, tokenizer, max_length=max_length, add_length=False)
                 for s, ds in splits.items()}
    tokenized["train"] = tokenized["train"].add_column(TEACHER_COLUMN, train[TEACHER_COLUMN])  # map removed it
    eval_splits = [s for s in spec.validation_splits if s in tokenized]
    trainer = DistillationTrainer(
        model=model, args=training_args, train_dataset=tokenized["train"],
        eval_dataset=tokenized[eval_splits[0]] if eval_splits else None,
        data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer,
        compute_metrics=build_compute_metrics(spec), temperature=temperature, alpha=alpha)
    return trainer, tokenized


def distill(teacher, student: str, raw, spec, training_args, teacher_tokenizer=None, unlabelled_texts=None,
            temperature: float = 2.0, alpha: float = 0.5, max_length: int | None = 128, cache_dir: str | None = None,
            teacher_batch_size: int = 64):
    """Train the plain model `student` (a checkpoint name or folder) on the task's training split against the
    teacher's soft targets and the gold labels, plus `unlabelled_texts` (teacher only), evaluate it on the
    validation split(s) and save it (with its tokenizer and a card naming the teacher) in `training_args.output_dir`.

    `teacher` is a trained `MultiEncoderForSequenceClassification` (or the folder of one), `raw` the task's
    `DatasetDict` and `spec` its `TaskSpec` (`load_task` / `load_files`). The student gets the teacher's labels
    (`id2label`). Returns the trainer and the evaluation metrics per validation split.
    """
    teacher, teacher_tokenizer = load_teacher(teacher, teacher_tokenizer)
    trainer, tokenized = distillation_trainer(
        teacher, student, raw, spec, training_args, teacher_tokenizer=teacher_tokenizer,
        unlabelled_texts=unlabelled_texts, temperature=temperature, alpha=alpha, max_length=max_length,
        cache_dir=cache_dir, teacher_batch_size=teacher_batch_size)
    trainer.train()
    trainer.save_model()
    metrics = {}
    for split in (s for s in spec.validation_splits if s in tokenized):
        metrics[split] = trainer.evaluate(eval_dataset=tokenized[split], metric_key_prefix=f"eval_{split}")
    save_student_card(training_args.output_dir, student, teacher, spec, metrics, temperature=temperature, alpha=alpha,
                      unlabelled=len(unlabelled_texts or []))
    return trainer, metrics


def save_student_card(output_dir: str, student: str, teacher, spec, metrics: dict, temperature: float, alpha: float,
                      unlabelled: int = 0) -> str:
    """The student's `README.md`: a plain transformers model card whose `base_model` is the student checkpoint,
    naming the teacher (its folder or Hub id) and the teacher's members."""
    from huggingface_hub import ModelCard, ModelCardData

    from .model_card import is_hub_model_id

    teacher_id = getattr(teacher, "name_or_path", "") or "a multi-encoder teacher"
    members = teacher.config.encoder_names
    data = ModelCardData(
        base_model=student if is_hub_model_id(student) else None, library_name="transformers",
        pipeline_tag="text-classification", tags=["distillation", "hf_multiencoder", "text-classification"])
    lines = [f"# {os.path.basename(os.path.normpath(output_dir))}", "",
             f"A plain `{type(teacher).__name__.replace('MultiEncoder', 'AutoModel')}` checkpoint: `{student}` "
             f"distilled from the multi-encoder `{teacher_id}` (members: {', '.join(members)}; fusion "
             f"`{teacher.config.fusion}`) on {spec.display_name or spec.name}. It needs no remote code:",
             "", "```python", "from transformers import pipeline", "",
             f'classifier = pipeline("text-classification", model="{output_dir}")', "```", "",
             f"Training: soft targets (the teacher's logits at temperature {temperature}, weight {alpha}) and the "
             f"gold labels (weight {1 - alpha:g}) on the task's training texts"
             + (f", plus {unlabelled} unlabelled texts (teacher only)" if unlabelled else "") + ".", ""]
    if metrics:
        lines += ["| split | metric | value |", "|---|---|---|"]
        for split, values in metrics.items():
            for key, value in sorted(values.items()):
                if isinstance(value, float) and not key.endswith(("runtime", "per_second", "_loss", "epoch")):
                    lines.append(f"| {split} | {key.removeprefix(f'eval_{split}_')} | {value:.4f} |")
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines) + "\n")
    path = os.path.join(output_dir, "README.md")
    card.save(path)
    return path
