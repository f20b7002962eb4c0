"""Sentence embeddings of multi-encoders in sentence-transformers, and their evaluation on STS data.

- [`to_sentence_transformer`] wraps a multi-encoder and its tokenizer in a ``SentenceTransformer``;
  [`save_sentence_transformer`] saves that as a folder that ``SentenceTransformer(folder, trust_remote_code=True)``
  loads, also where ``hf_multiencoder`` is not installed (the module's code is saved with it).
- [`sts_spearman`] scores an embedding on a sentence-pair similarity task of the registry (STS-B, SICK-R): the
  Spearman correlation of the cosine of the two sentences' embeddings with the gold scores.

Needs ``sentence-transformers`` for the first two (``pip install hf_multiencoder[sentence-transformers]``); the
rest of the package works without it. Training side: not shipped with the weights.
"""

from __future__ import annotations

import importlib.util
import json
import os

import torch

from ..data.tasks import TaskSpec, get_task
from .metrics import compute_task_metrics

_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")  # the shipped code
MODULE_FILE = "sentence_transformers_multiencoder"
MODULE_CLASS = "MultiEncoderTransformer"


def require_sentence_transformers() -> None:
    """Raise an ``ImportError`` saying how to install the extra when sentence-transformers is missing."""
    if importlib.util.find_spec("sentence_transformers") is None:
        raise ImportError("This needs sentence-transformers: pip install 'hf_multiencoder[sentence-transformers]'.")


def sentence_transformer_module_class():
    """The input module class, loaded the way sentence-transformers loads a folder's remote code (from this package's
    own file, through ``transformers.dynamic_module_utils``): a model built with it saves ``modules.json`` with the
    class as ``sentence_transformers_multiencoder.MultiEncoderTransformer`` and copies the code into the folder, so
    every save (``model.save``, trainer checkpoints, ``push_to_hub``) loads where this package is absent."""
    require_sentence_transformers()
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    return get_class_from_dynamic_module(f"{MODULE_FILE}.{MODULE_CLASS}", _PACKAGE_DIR)


def to_sentence_transformer(model, tokenizer, max_seq_length: int | None = None, **kwargs):
    """A ``SentenceTransformer`` that embeds with ``model`` (its members and fusion; a head is left out) and
    ``tokenizer``; its ``encode`` gives the vectors of ``model.encode``. ``kwargs`` go to ``SentenceTransformer``
    (``device``, ``prompts``, ``model_card_data``, ...; ``similarity_fn_name`` defaults to cosine)."""
    module_class = sentence_transformer_module_class()
    from sentence_transformers import SentenceTransformer

    kwargs.setdefault("similarity_fn_name", "cosine")
    kwargs.setdefault("device", str(model.device))
    return SentenceTransformer(modules=[module_class(model, tokenizer, max_seq_length=max_seq_length)], **kwargs)


def save_sentence_transformer(model, save_directory, tokenizer, max_seq_length: int | None = None,
                              **kwargs) -> str:
    """Save ``model`` and ``tokenizer`` as a SentenceTransformer folder; returns it. Load it with
    ``SentenceTransformer(save_directory, trust_remote_code=True)`` (pin ``revision=`` when it comes from the Hub).
    ``kwargs`` go to ``SentenceTransformer.save`` (``model_name``, ``create_model_card``, ...)."""
    if os.path.isfile(save_directory):
        raise ValueError(f"{save_directory} is a file, not a directory.")
    st = to_sentence_transformer(model, tokenizer, max_seq_length=max_seq_length)
    st.save(str(save_directory), **kwargs)
    with open(os.path.join(save_directory, "modules.json"), encoding="utf-8") as f:
        types = [m["type"] for m in json.load(f)]
    if types[0] != f"{MODULE_FILE}.{MODULE_CLASS}":  # the remote-code contract of the folder
        raise RuntimeError(f"sentence-transformers saved the input module as {types[0]!r}; the folder would not load "
                           f"without hf_multiencoder.")
    return str(save_directory)


def sts_pairs(task: str | TaskSpec, split: str, data_dir: str | None = None) -> tuple[list, list, list]:
    """The ``(sentences1, sentences2, scores)`` of a sentence-pair regression task's split (``stsb`` validation,
    ``sick_relatedness`` test, ...)."""
    from ..data.loading import load_task

    spec = get_task(task)
    if not (spec.is_regression and spec.is_pair):
        raise ValueError(f"Task {spec.name!r} is not a sentence-pair similarity task (a pair task with a float "
                         f"score): {spec.describe()}")
    dataset, _ = load_task(spec, data_dir=data_dir)
    if split not in dataset:
        raise ValueError(f"Task {spec.name!r} has no split {split!r}; it has {list(dataset)}.")
    rows = dataset[split]
    return list(rows["sentence1"]), list(rows["sentence2"]), [float(s) for s in rows["label"]]


def sts_spearman(embed, task: str | TaskSpec, sentences1, sentences2, scores) -> float:
    """Spearman correlation of the cosine of the embeddings of each pair with the gold ``scores``, as
    sentence-transformers' ``EmbeddingSimilarityEvaluator`` computes it (through the task's metric).

    ``embed``: a function from a list of sentences to their embeddings ``(n, dim)``, e.g.
    ``functools.partial(model.encode, tokenizer=tokenizer)`` or a SentenceTransformer's ``encode``. Every distinct
    sentence is embedded once.
    """
    unique = list(dict.fromkeys([*sentences1, *sentences2]))
    index = {s: i for i, s in enumerate(unique)}
    embeddings = torch.as_tensor(embed(unique)).float()
    a = embeddings[[index[s] for s in sentences1]]
    b = embeddings[[index[s] for s in sentences2]]
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    return compute_task_metrics(task, cosine.numpy(), list(scores))["spearmanr"]


__all__ = [
    "require_sentence_transformers",
    "save_sentence_transformer",
    "sentence_transformer_module_class",
    "sts_pairs",
    "sts_spearman",
    "to_sentence_transformer",
]
