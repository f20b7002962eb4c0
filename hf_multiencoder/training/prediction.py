"""Predicting from a saved model, with each member's fusion weight: what `run_glue_multi.py --do_predict` writes.

`load_model_for_prediction(folder)` loads a saved multi-encoder with the head its config names (sequence or token
classification), `predict_records(...)` runs the fusion-weights pipelines over texts (the same pipelines
`pipeline("multiencoder-classification" | "multiencoder-ner", ...)` gives) and `write_predictions(...)` writes them:
`predict_results.jsonl` (per input: the text, the label, its score and `{member: weight}`; for NER the entities with
their character offsets, scores and weights) and `predict_results.txt` (run_glue.py's `index<TAB>prediction`).
"""

from __future__ import annotations

import json
import os

import torch

from ..models.configuration_multiencoder import MultiEncoderConfig
from ..models.modeling_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderForTokenClassification
from ..models.pipeline_multiencoder import MultiEncoderClassificationPipeline, MultiEncoderNerPipeline

HEADS = {cls.__name__: cls for cls in (MultiEncoderForSequenceClassification, MultiEncoderForTokenClassification)}
RESULT_FILES = ("predict_results.jsonl", "predict_results.txt")


def load_model_for_prediction(folder: str, **kwargs):
    """The saved model in `folder` with the head its `config.architectures` names, in eval mode."""
    config, _ = MultiEncoderConfig.get_config_dict(folder, **kwargs)
    heads = [HEADS[a] for a in (config.get("architectures") or []) if a in HEADS]
    if config.get("model_type") != MultiEncoderConfig.model_type or not heads:
        raise ValueError(f"{folder} holds no multi-encoder classifier or tagger (its config.json names the model type "
                         f"{config.get('model_type')!r} and the architectures {config.get('architectures')}; "
                         f"predicting needs one of {sorted(HEADS)}). Train one with run_glue_multi.py first, or "
                         f"pass the folder it wrote.")
    return heads[0].from_pretrained(folder, **kwargs).eval()


def is_tagger(model) -> bool:
    return isinstance(model, MultiEncoderForTokenClassification)


def predict_records(model, tokenizer, texts: list[str], text_pairs: list[str] | None = None, batch_size: int = 32,
                    max_length: int | None = None, device=None) -> list[dict]:
    """One record per input: `{"index", "text", ["text_pair",] "label", "score", "fusion_weights"}` (regression:
    no `label`); for a tagger `{"index", "text", "entities": [...]}`, each entity as the `multiencoder-ner` pipeline
    gives it (`entity_group`, `score`, `word`, `start`, `end`, `fusion_weights`)."""
    if text_pairs is not None and len(text_pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(text_pairs)} text pairs: give one pair per text.")
    device = device if device is not None else next(model.parameters()).device
    kwargs = {"max_length": max_length} if max_length is not None else {}
    if is_tagger(model):
        if text_pairs is not None:
            raise ValueError("A tagger reads single sentences: give one text column, not a pair.")
        pipe = MultiEncoderNerPipeline(model=model, tokenizer=tokenizer, device=device)
        with torch.inference_mode():
            outputs = pipe(list(texts), batch_size=batch_size, **kwargs)
        return [{"index": i, "text": text, "entities": entities}
                for i, (text, entities) in enumerate(zip(texts, outputs))]
    pipe = MultiEncoderClassificationPipeline(model=model, tokenizer=tokenizer, device=device)
    inputs = list(texts) if text_pairs is None else [{"text": t, "text_pair": p} for t, p in zip(texts, text_pairs)]
    with torch.inference_mode():
        outputs = pipe(inputs, batch_size=batch_size, **kwargs)
    records = []
    for i, out in enumerate(outputs):
        record = {"index": i, "text": texts[i]}
        if text_pairs is not None:
            record["text_pair"] = text_pairs[i]
        records.append(record | out)
    return records


def _prediction(record: dict) -> str:
    if "entities" in record:
        return " ".join(f"{e['word']}/{e['entity_group']}" for e in record["entities"])
    return str(record["label"]) if "label" in record else f"{record['score']:.3f}"


def write_predictions(records: list[dict], output_dir: str) -> dict[str, str]:
    """`predict_results.jsonl` (every field) and `predict_results.txt` (`index<TAB>prediction`: the label, the
    score for regression, `word/TYPE` entities for NER) in `output_dir`. Returns the two paths."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {name: os.path.join(output_dir, name) for name in RESULT_FILES}
    with open(paths["predict_results.jsonl"], "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with open(paths["predict_results.txt"], "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for record in records:
            f.write(f"{record['index']}\t{_prediction(record)}\n")
    return paths
