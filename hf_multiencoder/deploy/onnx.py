"""ONNX export of a trained multi-encoder, and inference with onnxruntime.

[`export_onnx`] writes one ONNX graph for the whole model (every member, the fusion and the head) into a folder that
also holds the model's config and its [`MultiEncoderTokenizer`], so that the folder is all a server needs;
[`OnnxMultiEncoder`] loads such a folder, tokenizes for every member and runs the graph.

The graph takes one input set per member, named by the member's index in the model:

- ``input_ids_<i>``, ``attention_mask_<i>``: ``(batch, seq_i)`` int64, each member padded to its own longest;
- ``token_type_ids_<i>``: only for members whose model and tokenizer use them (BERT, ELECTRA; not RoBERTa, MPNet,
  DistilBERT);
- token classification: ``word_ids_<i>`` ``(batch, seq_i)`` (the word of each subword, -1 for special tokens and
  padding) and ``word_mask`` ``(batch, num_words)``.

Batch size, every member's sequence length and the number of words are dynamic. Outputs, named as the PyTorch
model's fields: ``logits`` and ``fusion_weights`` (``(batch, [words,] n_members)``, columns in
``config.encoder_names`` order; absent for ``concat`` and ``mean`` fusions) for the task heads, and for token
classification ``output_word_mask`` (the model's ``word_mask``, 0 for words no member saw; a graph's input and output
cannot share a name; [`OnnxMultiEncoder`] returns it as ``word_mask``); ``sentence_embedding`` (what ``model.encode``
returns) and ``fusion_weights`` for the base [`MultiEncoderModel`].

The exporter is torch's TorchScript-based one (``torch.onnx.export(..., dynamo=False)``) by default, although torch
deprecates it: with torch 2.13 it exports the three tiny test members in 3 to 5 seconds on one CPU core, and the
graph matches PyTorch to 1e-7 at other batch sizes, per-member lengths and word counts than the example's. The
``torch.export``-based exporter (``dynamo=True``, the one PyTorch maintains) gives the same outputs but took 140
seconds for the same tiny token-classification model (most of it in decompositions), and needs each member's length
declared as its own unbounded dimension (a named ``Dim`` meets the model's length checks and fails). ``dynamo=True``
is kept for when the TorchScript exporter is gone. Tracing freezes python-side branches at export time: the model's
input checks (batch sizes, shapes, token ids within each member's vocabulary) are left out of the export, and
[`OnnxMultiEncoder.run`] makes them before every run; transformers keeps the attention mask when it is traced.
"""

from __future__ import annotations

import json
import logging
import os
import warnings

import numpy as np
import torch
from torch import nn

from ..models.configuration_multiencoder import MultiEncoderConfig
from ..models.embedding_multiencoder import normalized_concat
from ..models.modeling_multiencoder import (
    FusionPredictions,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    fusion_weights_per_example,
    tags_to_spans,
    word_tags,
)
from ..models.tokenization_multiencoder import MultiEncoderTokenizer

ONNX_FILE = "model.onnx"
ONNX_INT8_FILE = "model_int8.onnx"
ONNX_CONFIG_FILE = "onnx_config.json"
DEFAULT_OPSET = 18  # ScatterElements with reduction="min" (the first-subword word pooling) is opset 18
TASKS = {  # model class -> the task its graph answers
    "MultiEncoderForSequenceClassification": "sequence-classification",
    "MultiEncoderForTokenClassification": "token-classification",
    "MultiEncoderModel": "feature-extraction",
}
_MODEL_CLASSES = {cls.__name__: cls for cls in (MultiEncoderForSequenceClassification,
                                                 MultiEncoderForTokenClassification, MultiEncoderModel)}
_INSTALL_HINT = 'pip install "hf_multiencoder[onnx]"'
_EXAMPLE_TEXTS = ["the cat sat on the mat , somebody just left", "he went"]  # padded: every mask has zeros


def require(module: str):
    """Import an optional dependency of the ONNX export (``onnx``, ``onnxruntime``), or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"The ONNX export and its runner need `{module}`, which is not installed: "
                          f"{_INSTALL_HINT}") from e


# ---- the graph's inputs and outputs ------------------------------------------------------------------------------
def onnx_input_names(model, tokenizer: MultiEncoderTokenizer | None = None) -> list[tuple[str, str, int | None]]:
    """The graph's inputs in order, as ``(name, key, member index)``: ``("input_ids_0", "input_ids", 0)``, ...,
    ``("word_mask", "word_mask", None)``. A member gets ``token_type_ids_<i>`` when its model takes them and its
    tokenizer (if given) returns them; without them the member uses its default (all zeros), as in PyTorch."""
    base = model.base_model
    returns_types = tokenizer.returns_token_type_ids if tokenizer is not None else [True] * base.config.num_encoders
    keys = ["input_ids", "attention_mask", "token_type_ids"] + (["word_ids"] if base.word_level else [])
    names = []
    for i in range(base.config.num_encoders):
        for key in keys:
            if key == "token_type_ids" and not (base._takes_token_type_ids[i] and returns_types[i]):
                continue
            names.append((f"{key}_{i}", key, i))
    if base.word_level:
        names.append(("word_mask", "word_mask", None))
    return names


class _FlatInputs(nn.Module):
    """The model behind the graph's flat inputs, regrouped into the per-member lists the model takes; returns the
    graph's outputs as a tuple."""

    def __init__(self, model, inputs, outputs: list[str], embedding_fusion: str | None = None):
        super().__init__()
        self.model = model
        self.inputs = [(key, i) for _, key, i in inputs]
        self.outputs = outputs
        self.embedding_fusion = embedding_fusion

    def forward(self, *tensors):
        n = self.model.config.num_encoders
        kwargs = {key: [None] * n for key in ("input_ids", "attention_mask", "token_type_ids")}
        for (key, i), tensor in zip(self.inputs, tensors):
            if i is None:
                kwargs[key] = tensor
            else:
                kwargs.setdefault(key, [None] * n)[i] = tensor
        out = self.model(**kwargs)
        fields = dict(out)
        if self.embedding_fusion is not None:  # the base model: its `encode` vector
            fields["sentence_embedding"] = out.pooler_output if self.embedding_fusion == "fused" else \
                normalized_concat(list(out.member_embeddings), self.model.config.embedding_weights)
        return tuple(fields[name.removeprefix("output_")] for name in self.outputs)


def _load_model(model_or_folder):
    """A model given, or the one saved in a folder (its class read from the config's ``architectures``)."""
    if isinstance(model_or_folder, nn.Module):
        return model_or_folder
    config = MultiEncoderConfig.from_pretrained(model_or_folder)
    name = (getattr(config, "architectures", None) or ["MultiEncoderModel"])[0]
    if name not in _MODEL_CLASSES:
        raise ValueError(f"{model_or_folder} holds a {name}; the ONNX export takes {', '.join(_MODEL_CLASSES)}.")
    return _MODEL_CLASSES[name].from_pretrained(model_or_folder)


def _example_inputs(model, tokenizer, inputs) -> tuple[torch.Tensor, ...]:
    """A padded batch of two examples, in the graph's input order, on the model's device."""
    base = model.base_model
    if base.word_level:
        batch = tokenizer([t.split() for t in _EXAMPLE_TEXTS], is_split_into_words=True, padding=True,
                          truncation=True, max_length=base.member_max_lengths(), return_tensors="pt")
    else:
        batch = tokenizer(_EXAMPLE_TEXTS, padding=True, truncation=True, max_length=base.member_max_lengths(),
                          return_tensors="pt")
    return tuple((batch[key] if i is None else batch[key][i]).to(model.device) for _, key, i in inputs)


def export_onnx(model_or_folder, output_dir, tokenizer: MultiEncoderTokenizer | None = None, opset: int | None = None,
                quantize: bool = False, embedding_fusion: str | None = None, dynamo: bool = False,
                verify: bool = True) -> str:
    """Export a multi-encoder to ONNX, in a folder onnxruntime serves from.

    Args:
        model_or_folder: A [`MultiEncoderForSequenceClassification`], [`MultiEncoderForTokenClassification`] or
            [`MultiEncoderModel`] (float32, any device), or the folder it was saved in.
        output_dir: Where to write ``model.onnx``, ``onnx_config.json`` (the inputs, outputs and members), the
            model's ``config.json`` and the tokenizer (``tokenizer_config.json``, ``tokenizer_<i>/``).
        tokenizer ([`MultiEncoderTokenizer`], *optional*): The model's multi-tokenizer; default: the one saved in
            ``model_or_folder``.
        opset (`int`, *optional*): The ONNX opset (default 18).
        quantize (`bool`): Also write ``model_int8.onnx``: int8 weights, activations quantized at run time
            (``onnxruntime.quantization.quantize_dynamic``).
        embedding_fusion (`str`, *optional*): Base model only: ``"fused"`` or ``"normalized_concat"``, the vector
            the ``sentence_embedding`` output holds (default: what ``model.encode`` uses).
        dynamo (`bool`): Export with ``torch.export`` (needs ``onnxscript``) instead of the TorchScript exporter (see
            the module's docs for why the latter is the default).
        verify (`bool`): Run the exported graph with onnxruntime on an example batch and compare it with PyTorch;
            the largest difference is recorded in ``onnx_config.json`` and one above 1e-3 is an error.

    Returns:
        The path of ``model.onnx``.
    """
    onnx = require("onnx")
    model = _load_model(model_or_folder)
    if tokenizer is None:
        if isinstance(model_or_folder, nn.Module):
            raise ValueError("Pass the model's MultiEncoderTokenizer (`tokenizer=`): the exported folder ships it.")
        tokenizer = MultiEncoderTokenizer.from_pretrained(model_or_folder)
    architecture = type(model).__name__
    if architecture not in TASKS:
        raise ValueError(f"The ONNX export takes {', '.join(TASKS)}, not a {architecture}.")
    if model.dtype != torch.float32:
        raise ValueError(f"Export a float32 model (this one is {model.dtype}): `model.float()`. onnxruntime's CPU "
                         f"kernels are float32 and int8 (`quantize=True`).")
    tokenizer.check_model(model)
    base = model.base_model
    task = TASKS[architecture]
    fusion = None
    if task == "feature-extraction":
        if base.word_level:
            raise ValueError("A word-level base model has no sentence vector to export; export the tagger.")
        fusion = model._embedding_fusion(embedding_fusion)
    elif embedding_fusion is not None:
        raise ValueError("`embedding_fusion` is for the base MultiEncoderModel (its `sentence_embedding` output).")
    opset = opset or DEFAULT_OPSET

    inputs = onnx_input_names(model, tokenizer)
    outputs = ["sentence_embedding"] if task == "feature-extraction" else ["logits"]
    if base.fusion.has_weights:
        outputs.append("fusion_weights")
    if task == "token-classification":
        outputs.append("output_word_mask")  # a graph's input and output cannot share the name `word_mask`
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, ONNX_FILE)
    flat = _FlatInputs(model, inputs, outputs, fusion)
    example = _example_inputs(model, tokenizer, inputs)
    was_training = model.training
    model.eval()
    # the model skips its python input checks while traced or exported; `OnnxMultiEncoder.run` makes them instead
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # tracing warns on python-side branches on sizes (see the module's docs); the TorchScript exporter warns
            # that it is deprecated
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            # transformers' attention masks index with aranges, never negative
            warnings.filterwarnings("ignore", message="Exporting aten::index operator")
            # cdme's BiLSTMs start from zeros of the run's batch size (tests/test_onnx.py runs other sizes)
            warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size other than 1")
            expected = [t.float().cpu().numpy() for t in flat(*example)]
            _export(flat, example, path, inputs, outputs, opset, dynamo, task)
    finally:
        model.train(was_training)
    graph = onnx.load(path, load_external_data=False)  # weights beyond 2 GB stay in their files
    _drop_intermediate_shapes(graph.graph)
    onnx.save(graph, path)

    max_diff = _verify(path, inputs, example, expected) if verify else None
    if max_diff is not None and max_diff > 1e-3:
        raise RuntimeError(f"The exported graph's outputs differ from PyTorch's by {max_diff:.2e} on an example "
                           f"batch: the export is wrong; please report it with the model's config.")
    quantized = None
    if quantize:
        quantized = quantize_onnx(path, os.path.join(output_dir, ONNX_INT8_FILE))
    model.config.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    onnx_config = {
        "task": task,
        "architecture": architecture,
        "encoder_names": list(model.config.encoder_names),
        "inputs": [name for name, _, _ in inputs],
        "outputs": outputs,
        "members": [{"name": name, "inputs": [n for n, _, j in inputs if j == i],
                     "max_positions": base.max_positions[i], "vocab_size": model.config.encoders[i].get("vocab_size")}
                    for i, name in enumerate(model.config.encoder_names)],
        "embedding_fusion": fusion,
        "opset": opset,
        "exporter": "dynamo" if dynamo else "torchscript",
        "torch_version": torch.__version__,
        "max_abs_diff_vs_pytorch": max_diff,
        "int8_file": os.path.basename(quantized) if quantized else None,
    }
    with open(os.path.join(output_dir, ONNX_CONFIG_FILE), "w", encoding="utf-8") as f:
        f.write(json.dumps(onnx_config, indent=2) + "\n")
    return path


def _export(flat, example, path, inputs, outputs, opset, dynamo, task) -> None:
    words = task == "token-classification"
    if dynamo:
        require("onnxscript")
        from torch.export import Dim

        batch = Dim("batch")
        shapes = [{0: batch, 1: Dim.DYNAMIC} for _ in inputs]  # one length per member, the words' own
        torch.onnx.export(flat, example, path, input_names=[n for n, _, _ in inputs], output_names=outputs,
                          opset_version=opset, dynamo=True, dynamic_shapes={"tensors": tuple(shapes)},
                          external_data=False, verbose=False)
        return
    axes = {name: {0: "batch", 1: "num_words" if key == "word_mask" else f"sequence_{i}"} for name, key, i in inputs}
    for name in outputs:
        axes[name] = {0: "batch", 1: "num_words"} if words and name != "sentence_embedding" else {0: "batch"}
    torch.onnx.export(flat, example, path, input_names=[n for n, _, _ in inputs], output_names=outputs,
                      dynamic_axes=axes, opset_version=opset, dynamo=False)


def _drop_intermediate_shapes(graph) -> None:
    """Drop the exporter's shapes of intermediate values, in subgraphs too: they are hints, some of them wrong for
    other shapes than the example's (the first-subword pooling's ``If`` declares 1-D outputs that are 2-D), and
    onnxruntime would warn at every run. onnxruntime infers shapes itself."""
    del graph.value_info[:]
    for node in graph.node:
        for attribute in node.attribute:
            for sub in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                for output in sub.output:
                    output.type.tensor_type.ClearField("shape")
                _drop_intermediate_shapes(sub)


def _verify(path, inputs, example, expected) -> float:
    ort = require("onnxruntime")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {name: t.cpu().numpy() for (name, _, _), t in zip(inputs, example)})
    return max(float(np.abs(g.astype(np.float32) - e).max()) for g, e in zip(got, expected))


def quantize_onnx(path, output_path, per_channel: bool = True, reduce_range: bool = True) -> str:
    """Dynamic int8 quantization of an exported graph (int8 weights, activations quantized per batch at run time):
    ``onnxruntime.quantization.quantize_dynamic``. Returns ``output_path``.

    The defaults are what kept accuracy on SST-2 with MiniLM + MPNet on an AVX2 CPU (``benchmarks/bench_onnx.py``):
    per-tensor weights lost 5.6 accuracy points there, per-tensor with 7-bit ranges 12.9, per-channel weights with
    7-bit ranges (``reduce_range``, which avoids the overflow of AVX2's u8 x s8 products) 2.4."""
    require("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    advice = _DropMessage("pre-processing before quantization")
    root.addFilter(advice)  # its pre-processing (symbolic shape inference) fails on these graphs: not an option
    try:
        quantize_dynamic(str(path), str(output_path), weight_type=QuantType.QInt8, per_channel=per_channel,
                         reduce_range=reduce_range)
    finally:
        root.removeFilter(advice)
    return str(output_path)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record) -> bool:
        return self.text not in record.getMessage()


# ---- inference -----------------------------------------------------------------------------------------------------
class OnnxMultiEncoder:
    """A multi-encoder exported by [`export_onnx`], run with onnxruntime.

    Args:
        folder: The export's folder.
        quantized (`bool`): Run ``model_int8.onnx`` (exported with ``quantize=True``).
        num_threads (`int`, *optional*): onnxruntime's intra-op threads (default: its own choice, every core).
        providers (`list`, *optional*): onnxruntime execution providers (default: the CPU).
        session_options (`onnxruntime.SessionOptions`, *optional*): Used as given (``num_threads`` is then set on
            them).

    Calling it on texts returns the graph's outputs as numpy arrays, named as the PyTorch model's fields
    (``logits``, ``fusion_weights``, ``word_mask``, or ``sentence_embedding``); [`predict`] returns what the PyTorch
    model's predict helpers return (labels or tags with each member's fusion weight by name, or embeddings).
    """

    def __init__(self, folder, quantized: bool = False, num_threads: int | None = None, providers=None,
                 session_options=None):
        ort = require("onnxruntime")
        folder = str(folder)
        config_path = os.path.join(folder, ONNX_CONFIG_FILE)
        if not os.path.isfile(config_path):
            raise FileNotFoundError(f"{folder} holds no ONNX export (no {ONNX_CONFIG_FILE}): write one with "
                                    f"hf_multiencoder.deploy.onnx.export_onnx(model, folder, tokenizer=...).")
        with open(config_path, encoding="utf-8") as f:
            self.onnx_config = json.load(f)
        file = ONNX_INT8_FILE if quantized else ONNX_FILE
        path = os.path.join(folder, file)
        if not os.path.isfile(path):
            hint = "export it with export_onnx(..., quantize=True)" if quantized else "export it again"
            raise FileNotFoundError(f"{path} is missing: {hint}.")
        self.folder = folder
        self.quantized = quantized
        self.config = MultiEncoderConfig.from_pretrained(folder)
        self.tokenizer = MultiEncoderTokenizer.from_pretrained(folder)
        if list(self.tokenizer.encoder_names) != list(self.onnx_config["encoder_names"]):
            raise ValueError(f"{folder}: the tokenizer's members {self.tokenizer.encoder_names} are not the graph's "
                             f"{self.onnx_config['encoder_names']}.")
        options = session_options or ort.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, sess_options=options,
                                            providers=providers or ["CPUExecutionProvider"])
        self._input_keys = {}  # graph input -> (tokenizer key, member index)
        for i, member in enumerate(self.onnx_config["members"]):
            for name in member["inputs"]:
                self._input_keys[name] = (name[: -len(f"_{i}")], i)
        if "word_mask" in self.onnx_config["inputs"]:
            self._input_keys["word_mask"] = ("word_mask", None)

    @classmethod
    def from_pretrained(cls, folder, **kwargs) -> OnnxMultiEncoder:
        """Load an export's folder (the constructor's arguments), as transformers' classes load theirs."""
        return cls(folder, **kwargs)

    # ---- what it is ------------------------------------------------------------------------------------------
    @property
    def task(self) -> str:
        """``"sequence-classification"``, ``"token-classification"`` or ``"feature-extraction"``."""
        return self.onnx_config["task"]

    @property
    def encoder_names(self) -> list[str]:
        return list(self.onnx_config["encoder_names"])

    @property
    def input_names(self) -> list[str]:
        return list(self.onnx_config["inputs"])

    @property
    def output_names(self) -> list[str]:
        return list(self.onnx_config["outputs"])

    def member_max_lengths(self, max_length: int | None = None) -> list[int]:
        """Per member, ``max_length`` (default 512) capped at what the member takes."""
        return [min(max_length or 512, m["max_positions"]) for m in self.onnx_config["members"]]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.task}, members={self.encoder_names}, "
                f"file={ONNX_INT8_FILE if self.quantized else ONNX_FILE})")

    # ---- running -------------------------------------------------------------------------------------------
    def tokenize(self, texts, text_pairs=None, max_length: int | None = None) -> dict[str, np.ndarray]:
        """The graph's inputs for ``texts`` (and ``text_pairs``), each member tokenized by its own tokenizer and
        truncated to ``max_length`` tokens (default 512), never beyond what the member takes. Token classification:
        each text is a list of words, or a string split on whitespace."""
        words = self.task == "token-classification"
        if words:
            if text_pairs is not None:
                raise ValueError("Token classification tags single sentences: `text_pairs` is not taken.")
            texts = [t.split() if isinstance(t, str) else list(t) for t in ([texts] if isinstance(texts, str)
                                                                             else texts)]
            empty = [i for i, t in enumerate(texts) if not t]
            if empty:
                raise ValueError(f"Sentence(s) {empty[:5]} have no words (empty or only spaces): there is nothing "
                                 f"to tag; leave them out.")
        batch = self.tokenizer(texts, text_pair=text_pairs, is_split_into_words=words, padding=True,
                               truncation=True, max_length=self.member_max_lengths(max_length), return_tensors="pt")
        return {name: (batch[key] if i is None else batch[key][i]).numpy() for name, (key, i)
                in self._input_keys.items()}

    def run(self, inputs: dict) -> dict[str, np.ndarray]:
        """Run the graph on ready inputs (``tokenize``'s, or arrays of the same names), checked first: every input
        present, int64, the members' shapes consistent and their token ids within their vocabularies."""
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self._input_keys]
        if missing or unknown:
            raise ValueError(f"The graph takes {self.input_names}; "
                             + "; ".join(f"{what}: {names}" for what, names in (("missing", missing),
                                                                               ("not taken", unknown)) if names)
                             + ". Build the inputs with `tokenize`.")
        feed = {name: np.asarray(inputs[name], dtype=np.int64) for name in self.input_names}
        batch = {v.shape[0] if v.ndim == 2 else None for v in feed.values()}
        if len(batch) != 1 or None in batch:
            raise ValueError(f"Every input must be (batch, length) with one batch size; got shapes "
                             f"{ {n: v.shape for n, v in feed.items()} }.")
        for i, member in enumerate(self.onnx_config["members"]):
            ids = feed[f"input_ids_{i}"]
            for name in member["inputs"]:
                if feed[name].shape != ids.shape:
                    raise ValueError(f"Member {i} ({member['name']}): `{name}` has shape {feed[name].shape} but "
                                     f"`input_ids_{i}` {ids.shape}.")
            if ids.shape[1] > member["max_positions"]:
                raise ValueError(f"Member {i} ({member['name']}) takes at most {member['max_positions']} tokens, got "
                                 f"{ids.shape[1]}: truncate (`tokenize` does).")
            vocab = member.get("vocab_size")
            if ids.size and (int(ids.max()) >= (vocab or 2**62) or int(ids.min()) < 0):
                raise ValueError(f"Member {i} ({member['name']}) got token ids outside its vocabulary of {vocab}: "
                                 f"the inputs are in another order than the members {self.encoder_names}, or come "
                                 f"from another tokenizer.")
        values = self.session.run(self.output_names, feed)
        out = {name.removeprefix("output_"): value for name, value in zip(self.output_names, values)}
        out.setdefault("fusion_weights", None)
        return out

    def __call__(self, texts, text_pairs=None, max_length: int | None = None) -> dict[str, np.ndarray]:
        """Tokenize ``texts`` (and ``text_pairs``) for every member and run the graph: a dict of numpy arrays named
        as the graph's outputs (``fusion_weights`` is None for fusions without weights)."""
        return self.run(self.tokenize(texts, text_pairs, max_length=max_length))

    def predict(self, texts, text_pairs=None, batch_size: int = 32, max_length: int | None = None):
        """Predict, in batches of ``batch_size``, as the PyTorch model's helpers do.

        - sequence classification: ``{"Sentences", "Predictions", "fusion_weights"}``, as
          ``predict_with_fusion_weights`` (each sentence's ``{member: weight}``; None without weights);
        - token classification: per sentence ``{"words", "tags", "entities", "fusion_weights"}``, as
          ``predict_tags``;
        - feature extraction: the sentence embeddings, ``(len(texts), dim)`` float32, as ``encode``.
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if text_pairs is not None:
            text_pairs = [text_pairs] if isinstance(text_pairs, str) else list(text_pairs)
        if self.task == "token-classification":
            return self._predict_words(texts, batch_size, max_length)
        chunks = [range(s, min(s + batch_size, len(texts))) for s in range(0, len(texts), batch_size)]
        outs = [self(texts[c.start:c.stop], None if text_pairs is None else text_pairs[c.start:c.stop],
                     max_length=max_length) for c in chunks]
        if self.task == "feature-extraction":
            width = self.session.get_outputs()[0].shape[-1]
            vectors = np.concatenate([o["sentence_embedding"] for o in outs]) if outs else np.zeros((0, width))
            return vectors[0] if single else vectors.astype(np.float32)
        id2label = self.config.id2label
        regression = self.config.problem_type == "regression" or self.config.num_labels == 1
        preds, scores = [], []
        for c, out in zip(chunks, outs):
            logits = out["logits"]
            preds.extend(logits[:, 0].tolist() if regression else [id2label[int(i)] for i in logits.argmax(-1)])
            weights = out["fusion_weights"]
            scores.extend([None] * len(c) if weights is None else fusion_weights_per_example(weights,
                                                                                             self.encoder_names))
        return FusionPredictions(Sentences=texts, Predictions=preds, fusion_weights=scores)

    def _predict_words(self, texts, batch_size, max_length) -> list[dict]:
        words_list = [t.split() if isinstance(t, str) else list(t) for t in texts]
        results = []
        for start in range(0, len(words_list), batch_size):
            chunk = words_list[start:start + batch_size]
            out = self(chunk, max_length=max_length)
            lengths = [len(words) for words in chunk]
            keep = np.arange(out["logits"].shape[1])[None, :] < np.array(lengths)[:, None]
            tags = word_tags(out["logits"], out["word_mask"], keep, self.config.id2label)
            weights = None if out["fusion_weights"] is None else fusion_weights_per_example(
                out["fusion_weights"], self.encoder_names, lengths=lengths)
            for b, words in enumerate(chunk):
                results.append({"words": words, "tags": tags[b], "entities": tags_to_spans(words, tags[b]),
                                "fusion_weights": None if weights is None else weights[b]})
        return results


__all__ = ["OnnxMultiEncoder", "export_onnx", "onnx_input_names", "quantize_onnx", "require"]
