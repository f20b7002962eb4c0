"""Pipelines that return, with each prediction, how much of each member it used.

``pipeline("multiencoder-classification", model=folder, trust_remote_code=True)`` (sentences or sentence pairs):
per input ``{"label", "score", "fusion_weights": {member: weight}}`` (``top_k`` for several labels; regression
models give ``{"score", "fusion_weights"}``). ``pipeline("multiencoder-ner", ...)``: per input the entities, as the
stock token-classification pipeline gives them (``aggregation_strategy="simple"``: ``entity_group``, ``score``,
``word``, ``start``, ``end``; ``"none"``: one entry per tagged word with ``entity`` and ``index``), each with its
``fusion_weights`` (the mean over the entity's words). Words come from the first member's pre-tokenizer (punctuation
split off, character offsets kept). ``fusion_weights`` is None for a fusion without weights (``concat``).

Both batch (``batch_size``), truncate to what every member takes (``max_length``) and run on the pipeline's device.
Saved models list their task in ``config.custom_pipelines``, so ``pipeline(model=folder, trust_remote_code=True)``
finds it with no task named. Shipped next to the weights: imports only ``torch``, ``transformers`` and relative
modules.
"""

from __future__ import annotations

import collections.abc

import torch
from transformers import Pipeline
from transformers.pipelines.pt_utils import PipelineDataset, PipelineIterator

CLASSIFICATION_TASK = "multiencoder-classification"
NER_TASK = "multiencoder-ner"
# `config.custom_pipelines` entries (the model's head decides which one a saved folder lists)
CUSTOM_PIPELINES = {
    CLASSIFICATION_TASK: {"impl": "pipeline_multiencoder.MultiEncoderClassificationPipeline",
                          "pt": ["AutoModelForSequenceClassification"], "tf": [], "type": "text"},
    NER_TASK: {"impl": "pipeline_multiencoder.MultiEncoderNerPipeline",
               "pt": ["AutoModelForTokenClassification"], "tf": [], "type": "text"},
}


def _weights(weights, names) -> dict[str, float] | None:
    return None if weights is None else {n: float(w) for n, w in zip(names, weights.tolist())}


class _MultiEncoderPipeline(Pipeline):
    """Tokenizes each batch for every member in `_forward` (a multi-tokenizer pads per member, which the stock
    collate function cannot), so `preprocess` passes raw inputs and the batches are lists."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def get_iterator(self, inputs, num_workers: int, batch_size: int, preprocess_params, forward_params,
                     postprocess_params):
        if isinstance(inputs, collections.abc.Sized):
            dataset = PipelineDataset(inputs, self.preprocess, preprocess_params)
        else:  # a generator
            dataset, num_workers = PipelineIterator(inputs, self.preprocess, preprocess_params), min(num_workers, 1)
        loader = torch.utils.data.DataLoader(dataset, num_workers=num_workers, batch_size=batch_size,
                                             collate_fn=_collate)
        model_iterator = PipelineIterator(loader, self.forward, forward_params, loader_batch_size=batch_size)
        return PipelineIterator(model_iterator, self.postprocess, postprocess_params)

    def _sanitize_parameters(self, max_length=None, **kwargs):
        unknown = sorted(kwargs)
        if unknown:
            raise ValueError(f"{type(self).__name__} does not take {unknown}.")
        return {}, ({"max_length": max_length} if max_length is not None else {}), {}

    def _encode(self, batch: dict, max_length=None, **kwargs):
        lengths = self.model.base_model.member_max_lengths(max_length)
        encoded = self.tokenizer(batch["text"], text_pair=batch.get("text_pair"), padding=True, truncation=True,
                                 max_length=lengths, return_tensors="pt", **kwargs)
        return self._ensure_tensor_on_device(dict(encoded), self.device)


def _collate(items: list[dict]) -> dict:
    """A batch of raw inputs: `{"text": [...], "text_pair": [...] or None, ...}` (the other keys as lists)."""
    batch = {key: [item[key] for item in items] for key in items[0]}
    if "text_pair" in batch and all(p is None for p in batch["text_pair"]):
        batch["text_pair"] = None
    return batch


class MultiEncoderClassificationPipeline(_MultiEncoderPipeline):
    """Sentence (pair) classification or regression with each member's fusion weight (module docstring)."""

    def _sanitize_parameters(self, max_length=None, top_k=None, **kwargs):
        preprocess, forward, _ = super()._sanitize_parameters(max_length=max_length, **kwargs)
        if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
            raise ValueError(f"`top_k` must be a positive integer (or None for the best label), got {top_k!r}.")
        return preprocess, forward, {"top_k": top_k}

    def preprocess(self, inputs):
        if isinstance(inputs, dict):
            unknown = set(inputs) - {"text", "text_pair"}
            if "text" not in inputs or unknown:
                raise ValueError(f"A dict input takes `text` and optionally `text_pair`, got keys {sorted(inputs)}.")
            text, pair = inputs["text"], inputs.get("text_pair")
        elif isinstance(inputs, (list, tuple)) and len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
            text, pair = inputs  # a sentence pair
        else:
            text, pair = inputs, None
        if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
            bad, value = ("text", text) if not isinstance(text, str) else ("text_pair", pair)
            raise ValueError(f"Each input is a string, a (text, text_pair) pair of strings or a dict "
                             f"{{'text': ..., 'text_pair': ...}}; got {type(inputs).__name__} whose `{bad}` is "
                             f"{type(value).__name__}.")
        return {"text": text, "text_pair": pair}

    def _forward(self, batch, max_length=None):
        pairs = batch.get("text_pair")
        if isinstance(batch["text"], str) or pairs is None or all(p is not None for p in pairs):
            out = self.model(**self._encode(batch, max_length))
            return {"logits": out.logits, "fusion_weights": out.fusion_weights}
        # a batch mixing single sentences and pairs: each kind in one call, the outputs back in input order
        parts = {}
        for is_pair in (False, True):
            rows = [i for i, p in enumerate(pairs) if (p is not None) == is_pair]
            sub = {"text": [batch["text"][i] for i in rows],
                   "text_pair": [pairs[i] for i in rows] if is_pair else None}
            parts[is_pair] = (rows, self.model(**self._encode(sub, max_length)))
        first = parts[False][1]
        logits = first.logits.new_empty((len(pairs), first.logits.size(-1)))
        weights = None if first.fusion_weights is None else first.fusion_weights.new_empty(
            (len(pairs), first.fusion_weights.size(-1)))
        for rows, out in parts.values():
            logits[rows] = out.logits
            if weights is not None:
                weights[rows] = out.fusion_weights
        return {"logits": logits, "fusion_weights": weights}

    def postprocess(self, outputs, top_k=None):
        logits = outputs["logits"][0].float()
        fusion = _weights(None if outputs["fusion_weights"] is None else outputs["fusion_weights"][0],
                          self.model.config.encoder_names)
        if self.model.config.problem_type == "regression" or self.model.config.num_labels == 1:
            return {"score": float(logits.squeeze(-1)), "fusion_weights": fusion}
        probs = logits.softmax(-1)
        id2label = self.model.config.id2label
        order = probs.argsort(descending=True).tolist()
        ranked = [{"label": id2label[i], "score": float(probs[i]), "fusion_weights": fusion}
                  for i in order[: top_k or 1]]
        return ranked if top_k is not None else ranked[0]


class MultiEncoderNerPipeline(_MultiEncoderPipeline):
    """Named entities with each member's fusion weights (module docstring)."""

    def _sanitize_parameters(self, max_length=None, aggregation_strategy="simple", **kwargs):
        preprocess, forward, _ = super()._sanitize_parameters(max_length=max_length, **kwargs)
        if aggregation_strategy not in ("simple", "none"):
            raise ValueError(f"`aggregation_strategy` must be 'simple' or 'none', got {aggregation_strategy!r}.")
        return preprocess, forward, {"aggregation_strategy": aggregation_strategy}

    def preprocess(self, text):
        if not isinstance(text, str):
            raise ValueError(f"Each input is a string, got {type(text).__name__}.")
        words = self.tokenizer.pre_tokenize(text)
        if not words:
            raise ValueError("An input has no words (empty or only spaces): there is nothing to tag.")
        return {"text": [w for w, _ in words], "offsets": [o for _, o in words], "sentence": text}

    def _forward(self, batch, max_length=None):
        encoded = self._encode({"text": batch["text"]}, max_length, is_split_into_words=True)
        out = self.model(**encoded)
        return {"logits": out.logits, "fusion_weights": out.fusion_weights, "word_mask": out.word_mask,
                "offsets": batch["offsets"], "sentence": batch["sentence"]}

    def postprocess(self, outputs, aggregation_strategy="simple"):
        offsets, sentence = outputs["offsets"], outputs["sentence"]
        offsets, sentence = (offsets[0], sentence[0]) if isinstance(sentence, list) else (offsets, sentence)
        n = len(offsets)
        probs = outputs["logits"][0, :n].float().softmax(-1)
        seen = outputs["word_mask"][0, :n] != 0
        weights = outputs["fusion_weights"]
        weights = None if weights is None else weights[0, :n].float()
        id2label, names = self.model.config.id2label, self.model.config.encoder_names
        words = []
        for j, (start, end) in enumerate(offsets):
            tag = id2label[int(probs[j].argmax())] if seen[j] else "O"
            words.append({"entity": tag, "score": float(probs[j].max()), "index": j, "word": sentence[start:end],
                          "start": start, "end": end, "fusion_weights": _weights(None if weights is None else
                                                                                  weights[j], names)})
        if aggregation_strategy == "none":
            return [w for w in words if w["entity"] != "O"]
        return self._group(words, weights, names, sentence)

    @staticmethod
    def _group(words, weights, names, sentence):
        """B-X I-X ... spans (an I-X after O or another type starts a span too) as entities, as `"simple"` does."""
        groups, current = [], None
        for w in words:
            prefix, _, kind = w["entity"].partition("-")
            if w["entity"] == "O" or not kind:
                current = None
                continue
            if current is None or prefix == "B" or kind != current["type"]:
                current = {"type": kind, "words": []}
                groups.append(current)
            current["words"].append(w)
        entities = []
        for g in groups:
            idx = [w["index"] for w in g["words"]]
            start, end = g["words"][0]["start"], g["words"][-1]["end"]
            entities.append({"entity_group": g["type"], "score": sum(w["score"] for w in g["words"]) / len(idx),
                             "word": sentence[start:end], "start": start, "end": end,
                             "fusion_weights": None if weights is None else _weights(weights[idx].mean(0), names)})
        return entities


def register_pipelines() -> None:
    """Register both tasks with transformers' pipeline registry (where this package is installed; saved folders
    list theirs in `config.custom_pipelines` for `trust_remote_code=True`)."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification
    from transformers.pipelines import PIPELINE_REGISTRY

    PIPELINE_REGISTRY.register_pipeline(CLASSIFICATION_TASK, pipeline_class=MultiEncoderClassificationPipeline,
                                        pt_model=AutoModelForSequenceClassification, type="text")
    PIPELINE_REGISTRY.register_pipeline(NER_TASK, pipeline_class=MultiEncoderNerPipeline,
                                        pt_model=AutoModelForTokenClassification, type="text")
