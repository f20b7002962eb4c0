"""A multi-encoder serving several tasks: shared members, a fusion per level (sentence / word), one head per task.

``model(**batch, task="trec")`` runs the members, fuses their sentence vectors (or, for a token task, their word
vectors) and applies that task's head; it returns the same outputs as the single-task heads
([`MultiEncoderSequenceClassifierOutput`] or [`MultiEncoderTokenClassifierOutput`]). Every batch holds one task
(MT-DNN style); `hf_multiencoder.multitask` builds such batches for the `Trainer`.

Shipped next to the weights (``trust_remote_code``): imports only ``torch``, ``transformers`` and relative modules.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers.utils import logging

from .configuration_multiencoder_multitask import MultiEncoderMultiTaskConfig, check_task_labels, normalize_tasks
from .modeling_multiencoder import (
    MultiEncoderModel,
    MultiEncoderPreTrainedModel,
    MultiEncoderSequenceClassifierOutput,
    MultiEncoderTokenClassifierOutput,
    predict_sentences,
    predict_words,
    sequence_loss,
    word_loss,
)

logger = logging.get_logger(__name__)

_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")


def task_changes(saved: dict, requested: dict) -> tuple[str, ...]:
    """The weight-name prefixes a model with the `requested` tasks may lack or not use when it loads weights saved
    with the `saved` tasks: the heads of new and dropped tasks, and the word-level fusion when token tasks come or
    go next to sentence tasks. Raises a `ValueError` for a task whose labels or type differ from its saved head, and
    for sentence tasks added to or all dropped from a model with token tasks (its first fusion would change level)."""
    check_task_labels(saved, requested)
    saved, requested = normalize_tasks(saved), normalize_tasks(requested)
    if not saved:
        return ()

    def levels(tasks):
        return any(t["type"] != "token" for t in tasks.values()), any(t["type"] == "token" for t in tasks.values())

    (had_sentences, had_tokens), (has_sentences, has_tokens) = levels(saved), levels(requested)
    if had_sentences != has_sentences and (had_tokens or has_tokens):
        raise ValueError(f"The saved model's tasks ({', '.join(saved)}) and the requested ones "
                         f"({', '.join(requested)}) fuse at another first level: sentence tasks cannot be added to, "
                         f"or all dropped from, a model with token tasks. Build that model with from_encoders.")
    added = [t for t in requested if t not in saved]
    dropped = [t for t in saved if t not in requested]
    if added or dropped:
        logger.warning(f"Tasks changed from the saved model: new heads for {added or 'none'}, heads dropped for "
                       f"{dropped or 'none'}.")
    prefixes = [f"heads.{t}." for t in added + dropped]
    if has_sentences and had_tokens != has_tokens:
        prefixes.append("multiencoder.word_fusion")
    return tuple(prefixes)


class MultiEncoderMultiTaskModel(MultiEncoderModel):
    """Members + one fusion per level the tasks need: sentence vectors for sentence tasks, word vectors for token
    tasks (``word_fusion``). The members run once per batch; the level is chosen by the presence of ``word_ids``."""

    config_class = MultiEncoderMultiTaskConfig

    def __init__(self, config: MultiEncoderMultiTaskConfig, encoders: list | None = None):
        config.tasks = normalize_tasks(config.tasks)
        token_tasks = [t for t in config.tasks if config.is_token_task(t)]
        has_sentence_tasks = len(token_tasks) < len(config.tasks) or not config.tasks
        # The first level's fusion is `fusion` (as in the single-task models); a second level gets `word_fusion`.
        super().__init__(config, word_level=not has_sentence_tasks, encoders=encoders)
        self.word_fusion = self.word_fusion_norm = None
        if has_sentence_tasks and token_tasks:
            self.word_fusion, self.word_fusion_norm = self.build_fusion_layers(word_level=True)

    def fusion_layers(self, word_level: bool) -> tuple[nn.Module, nn.Module]:
        if word_level == self.word_level:
            return self.fusion, self.fusion_norm
        if word_level and self.word_fusion is not None:
            return self.word_fusion, self.word_fusion_norm
        level = "token" if word_level else "sentence"
        raise ValueError(f"This model has no {level} task (its tasks: {', '.join(self.config.tasks)}), so no "
                         f"{level}-level fusion.")

    def level_output_size(self, word_level: bool) -> int:
        """Width of the fused vectors of a level (the input of that level's heads)."""
        return self.fusion_layers(word_level)[0].output_size


class MultiEncoderForMultiTask(MultiEncoderPreTrainedModel):
    """Shared members and fusions with a linear head per task (``config.tasks``); ``forward(..., task=name)``.

    Sentence tasks (``sequence``, ``regression``, ``multilabel``) read the fused sentence vector, token tasks the fused
    word vectors (as [`MultiEncoderForTokenClassification`]). Losses follow each task's type (cross-entropy, MSE,
    BCE with logits, cross-entropy per word ignoring -100).
    """

    config_class = MultiEncoderMultiTaskConfig

    def __init__(self, config: MultiEncoderMultiTaskConfig, encoders: list | None = None):
        super().__init__(config)
        config.tasks = normalize_tasks(config.tasks)  # a `tasks=` override set on a loaded config is still raw
        if not config.tasks:
            raise ValueError("MultiEncoderForMultiTask needs at least one task: pass tasks={name: {'type': ..., "
                             "'id2label': [...]}}.")
        self.multiencoder = MultiEncoderMultiTaskModel(config, encoders=encoders)
        self.dropout = nn.Dropout(config.classifier_dropout or 0.0)
        self.heads = nn.ModuleDict({
            name: nn.Linear(self.multiencoder.level_output_size(config.is_token_task(name)), task["num_labels"])
            for name, task in config.tasks.items()
        })
        self.post_init()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """The strict `MultiEncoderPreTrainedModel.from_pretrained`, with the tasks of a `tasks=` (or `config=`) that
        differ from the saved ones: a task whose labels or type differ from its saved head is refused; a new task
        gets a new head, a task left out drops its head (both logged). A new word-level task on a model saved
        without one gets a new word-level fusion; a sentence task on a model saved with token tasks only is refused
        (build it with `from_encoders`)."""
        config = kwargs.get("config")
        requested = config.tasks if isinstance(config, PreTrainedConfig) else kwargs.get("tasks")
        expected = ()
        if requested is not None and pretrained_model_name_or_path is not None:
            hub_kwargs = {k: kwargs[k] for k in _HUB_KWARGS if kwargs.get(k) is not None}
            saved, _ = cls.config_class.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            expected = task_changes(saved.get("tasks") or {}, requested)
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, expected_differences=expected,
                                       **kwargs)

    def resolve_task(self, task) -> str:
        """The task of a batch: a name, or the list of names a collator gathered (all equal). Raises a `ValueError`
        for an unknown task or a batch that mixes tasks."""
        names = self.config.task_names
        if task is None:
            if len(names) == 1:
                return names[0]
            raise ValueError(f"Pass `task=` to say which head to use; this model's tasks are: {', '.join(names)}.")
        if isinstance(task, (list, tuple)):
            distinct = list(dict.fromkeys(task))
            if len(distinct) != 1:
                raise ValueError(f"The batch mixes the tasks {distinct}: every batch must hold examples of one task "
                                 f"(hf_multiencoder.multitask.MultiTaskBatchSampler builds such batches).")
            task = distinct[0]
        self.config.get_task(task)  # unknown names raise, listing the model's tasks
        return task

    def forward(
        self,
        input_ids: list[torch.Tensor] | None = None,
        attention_mask: list[torch.Tensor] | None = None,
        token_type_ids: list[torch.Tensor | None] | None = None,
        word_ids: list[torch.Tensor] | None = None,
        word_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        task: str | list[str] | None = None,
        encoder_features: list[torch.Tensor | None] | None = None,
        **kwargs,
    ) -> MultiEncoderSequenceClassifierOutput | MultiEncoderTokenClassifierOutput:
        r"""
        task (`str`):
            The task of this batch (a key of `config.tasks`); may be left out when the model has one task.
        word_ids (`list[torch.LongTensor]`, one `(batch_size, seq_i)` per member), word_mask:
            Token tasks only: the word of each subword (-1 for special tokens and padding) and the real words
            `(batch_size, num_words)`.
        labels (`torch.Tensor`, *optional*):
            Sentence tasks: class ids `(batch_size,)`, scores (regression) or multi-hot floats `(batch_size,
            num_labels)` (multilabel). Token tasks: a label per word `(batch_size, num_words)`, -100 ignored.
        """
        task = self.resolve_task(task)
        is_token = self.config.is_token_task(task)
        if is_token and word_ids is None:
            raise ValueError(f"Task {task!r} tags words: pass `word_ids` and `word_mask` (tokenize pre-split words "
                             f"with MultiEncoderTokenizer(..., is_split_into_words=True)).")
        if not is_token and word_ids is not None:
            raise ValueError(f"Task {task!r} labels sentences, but the batch has `word_ids` (a token task's inputs).")
        out = self.multiencoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                word_ids=word_ids, word_mask=word_mask, encoder_features=encoder_features)
        head = self.heads[task]
        if is_token:
            logits = head(self.dropout(out.last_hidden_state))  # (batch, num_words, num_labels)
            loss = None if labels is None else word_loss(logits, labels, out.word_mask)
            return MultiEncoderTokenClassifierOutput(loss=loss, logits=logits, fusion_weights=out.fusion_weights,
                                                     word_mask=out.word_mask)
        logits = head(self.dropout(out.pooler_output))  # (batch, num_labels)
        loss = None if labels is None else sequence_loss(logits, labels, self.config.task_problem_type(task))
        return MultiEncoderSequenceClassifierOutput(loss=loss, logits=logits, fusion_weights=out.fusion_weights,
                                                    pooler_output=out.pooler_output)

    def predict(self, task: str, tokenizer, inputs, text_pairs=None, batch_size: int = 32, max_length: int = 128):
        """Predict ``inputs`` with one task's head, with each input's fusion weights.

        Sentence tasks return ``{"Sentences", "Predictions", "fusion_weights"}`` as
        [`MultiEncoderForSequenceClassification.predict_with_fusion_weights`] (scores for regression, lists of
        probabilities for multilabel); token tasks return one ``{"words", "tags", "entities", "fusion_weights"}`` per
        sentence as [`MultiEncoderForTokenClassification.predict_tags`].
        """
        task = self.resolve_task(task)
        if self.config.is_token_task(task):
            if text_pairs is not None:
                raise ValueError(f"Task {task!r} tags words; it takes no `text_pairs`.")
            return predict_words(self, tokenizer, inputs, batch_size=batch_size, max_length=max_length,
                                 id2label=self.config.task_id2label(task), task=task)
        problem_type = self.config.task_problem_type(task)
        result = predict_sentences(self, tokenizer, inputs, text_pairs, batch_size=batch_size, max_length=max_length,
                                   id2label=self.config.task_id2label(task) if problem_type ==
                                   "single_label_classification" else None, task=task)
        if problem_type == "multi_label_classification":  # the squeezed logits: one probability per label
            result["Predictions"] = [torch.sigmoid(torch.as_tensor(p)).reshape(-1).tolist()
                                     for p in result["Predictions"]]
        return result


__all__ = ["MultiEncoderForMultiTask", "MultiEncoderMultiTaskModel", "task_changes"]
