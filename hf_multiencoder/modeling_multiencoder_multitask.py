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

_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")


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
        """`PreTrainedModel.from_pretrained`, refusing a `tasks=` (or `config=`) whose task labels differ from the
        heads saved for those tasks. New tasks get new heads; tasks left out drop theirs (both logged)."""
        config = kwargs.get("config")
        requested = config.tasks if isinstance(config, PreTrainedConfig) else kwargs.get("tasks")
        if requested is not None and pretrained_model_name_or_path is not None:
            hub_kwargs = {k: kwargs[k] for k in _HUB_KWARGS if kwargs.get(k) is not None}
            saved, _ = cls.config_class.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            check_task_labels(saved.get("tasks") or {}, requested)
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

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

        Sentence tasks return ``{"Sentences", "Predictions", "DME scores"}`` as
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


__all__ = ["MultiEncoderForMultiTask", "MultiEncoderMultiTaskModel"]
