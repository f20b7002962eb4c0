"""Every bad input to the Python APIs ends in a clear error naming the problem and what to do (or a correct result),
never in an error from deep inside torch, transformers or datasets, nor in a silently wrong answer.

The run scripts' table is tests/test_bad_inputs.py; this is its counterpart for the public Python APIs (assembly,
config, tokenizer, forward, `encode`/`similarity`, the predict helpers, the pipelines), for saved folders (a model's,
a tokenizer's, a SentenceTransformer's) and for `load_task`/`load_files`. Each row: what is called -> the exception
type and a phrase of its message that names the fix. Rows whose input is valid (a generator of texts) check that it
works. Tiny random members; the models are built once per module.
"""

import os
import shutil

import pytest
import torch
from transformers import AutoConfig, pipeline

from hf_multiencoder import (
    MultiEncoderConfig,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderTokenizer,
)
from hf_multiencoder.data.loading import load_files, load_task

NAMES = ["bert", "roberta"]


class Env:
    """The module's models, tokenizers, pipelines and saved folders, built once and shared by every row."""

    def __init__(self, paths, root):
        torch.manual_seed(0)
        self.paths, self.root = paths, root
        self.cls = MultiEncoderForSequenceClassification.from_encoders(paths[:2], encoder_names=NAMES,
                                                                       num_labels=2).eval()
        self.ner = MultiEncoderForTokenClassification.from_encoders(
            paths[:2], encoder_names=NAMES, num_labels=3, id2label={0: "O", 1: "B-x", 2: "I-x"}).eval()
        self.tok = MultiEncoderTokenizer.from_encoders(paths[:2], encoder_names=NAMES)
        self.tok3 = MultiEncoderTokenizer.from_encoders(paths, encoder_names=NAMES + ["distil"])
        self.batch = self.tok(["a cat", "the dog sat"], padding=True, return_tensors="pt")
        self.words = self.tok([["a", "cat"], ["the", "dog"]], is_split_into_words=True, padding=True,
                              return_tensors="pt")
        self.member_configs = [AutoConfig.from_pretrained(p) for p in paths[:2]]
        self.saved = os.path.join(root, "classifier")
        self.cls.save_pretrained(self.saved)
        self.tok.save_pretrained(self.saved)
        self._pipelines = {}
        self._st = None

    def pipeline(self, task):
        if task not in self._pipelines:
            model = self.cls if task == "multiencoder-classification" else self.ner
            self._pipelines[task] = pipeline(task, model=model, tokenizer=self.tok)
        return self._pipelines[task]

    def folder(self, name: str, source: str | None = None) -> str:
        """A fresh copy of a saved folder (the classifier's by default) to damage."""
        target = os.path.join(self.root, name)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source or self.saved, target)
        return target

    def sentence_transformer_folder(self) -> str:
        if self._st is None:
            from hf_multiencoder.training.sentence_embeddings import save_sentence_transformer

            self._st = os.path.join(self.root, "st")
            model = MultiEncoderModel.from_encoders(self.paths[:2], encoder_names=NAMES, fusion="concat")
            save_sentence_transformer(model, self._st, self.tok)
        return self._st

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.root, "files", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


@pytest.fixture(scope="module")
def env(tiny_paths, tmp_path_factory):
    return Env(tiny_paths, str(tmp_path_factory.mktemp("bad_inputs_api")))


# ---- helpers that build one row's call ------------------------------------------------------------------------------
def assemble(**kwargs):
    return lambda e: lambda: MultiEncoderForSequenceClassification.from_encoders(
        e.paths[:2], **{"encoder_names": NAMES, **kwargs})


def config(**kwargs):
    return lambda e: lambda: MultiEncoderConfig(encoders=e.member_configs, **kwargs)


def damaged(remove=(), overwrite=None, load=None):
    """Copy the saved classifier, remove files (or folders) and overwrite one, then load it."""
    def make(e):
        def run():
            folder = e.folder("damaged")
            for name in remove:
                path = os.path.join(folder, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            if overwrite:
                name, text = overwrite
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            return (load or MultiEncoderForSequenceClassification.from_pretrained)(folder)
        return run
    return make


def damaged_sentence_transformer(remove=(), overwrite=None):
    def make(e):
        def run():
            from sentence_transformers import SentenceTransformer

            folder = e.folder("damaged_st", e.sentence_transformer_folder())
            for name in remove:
                path = os.path.join(folder, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            if overwrite:
                with open(os.path.join(folder, overwrite[0]), "w") as f:
                    f.write(overwrite[1])
            return SentenceTransformer(folder, trust_remote_code=True, device="cpu")
        return run
    return make


def files(*contents, **kwargs):
    """`load_files` of files written from (name, text) pairs: train, validation, test."""
    def make(e):
        def run():
            paths = [e.write(name, text) for name, text in contents]
            return load_files(*paths, cache_dir=os.path.join(e.root, "cache"), **kwargs)
        return run
    return make


def texts():
    return (t for t in ["a cat", "the dog sat"])  # a generator: valid wherever a list of texts is


def _ner_folder(e):
    folder = os.path.join(e.root, "tagger")
    if not os.path.isdir(folder):
        e.ner.save_pretrained(folder)
    return folder


def _sentence_transformer(e, **kwargs):
    from hf_multiencoder.training.sentence_embeddings import to_sentence_transformer

    return lambda: to_sentence_transformer(e.cls, **kwargs)


FIX_PAIR = "give one `text_pair` per text"
NOT_EMBEDDINGS = r"not embeddings: pass the vectors `encode` returned"
BATCH_SIZE = r"`batch_size` must be a positive integer, got"
NOT_TEXTS = r"`sentences` is NoneType: give a string, or a list \(any iterable\) of strings"

# name -> (make(env) -> call, expected exception type or None (the call works), message phrase or a check of the
# result)
CASES = {
    # ---- assembly and config: from_encoders / MultiEncoderConfig ----
    "from_encoders: unknown fusion": (assemble(fusion="sum"), ValueError,
                                      "Unknown fusion 'sum'; allowed values are: concat, dme, cdme, mean"),
    "from_encoders: unknown pooling": (assemble(pooling="max"), ValueError,
                                       "Unknown pooling 'max'; allowed values are: cls, mean, last4"),
    "from_encoders: pooling list of the wrong length": (
        assemble(pooling=["cls", "mean", "mean"]), ValueError,
        "`pooling` has 3 values but the model has 2 member encoders; give one value per member or a single value"),
    "from_encoders: encoder_names of the wrong length": (
        assemble(encoder_names=["bert"]), ValueError,
        "`encoder_names` has 1 names for 2 member encoders: give one name per member"),
    "from_encoders: encoder_names repeated": (
        assemble(encoder_names=["m", "m"]), ValueError,
        r"must be unique.*pass encoder_names=\[...\] with a distinct name per member"),
    "from_encoders: the same checkpoint twice without names": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_encoders([e.paths[0], e.paths[0]]), ValueError,
        r"the same checkpoint twice needs names\): pass encoder_names"),
    "from_encoders: encoder_dropout 1": (assemble(encoder_dropout=1.0), ValueError,
                                         r"`encoder_dropout` must be a probability in \[0, 1\), got 1.0"),
    "from_encoders: encoder_dropout negative": (assemble(encoder_dropout=[0.1, -0.1]), ValueError,
                                                r"`encoder_dropout` must be a probability in \[0, 1\), got -0.1"),
    "from_encoders: encoder_dropout as a string": (assemble(encoder_dropout="0.1"), ValueError,
                                                   r"must be a probability in \[0, 1\), got '0.1'"),
    "from_encoders: encoder_dropout of the wrong length": (
        assemble(encoder_dropout=[0.1, 0.1, 0.1]), ValueError,
        "`encoder_dropout` has 3 values but the model has 2 member encoders; give one value per member"),
    "from_encoders: fusion_dim 0": (assemble(fusion_dim=0), ValueError,
                                    "`fusion_dim` must be a positive whole number, got 0"),
    "from_encoders: num_labels 0": (assemble(num_labels=0), ValueError,
                                    r"`num_labels` is 0: a head needs at least 1.*pass num_labels="),
    "from_encoders: a member folder that does not exist": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_encoders([e.paths[0], "./no_such_member"]),
        FileNotFoundError, r"Member './no_such_member': no such folder .*Give the folder of a saved model"),
    "from_encoders: a member given as a file": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_encoders(
            [e.paths[0], os.path.join(e.paths[1], "config.json")]), ValueError,
        "is a file: give the folder of a saved model"),
    "MultiEncoderConfig: encoder_names as one string": (config(encoder_names="bert"), ValueError,
                                                        r"must be a list with one name per member encoder \(2\)"),
    "MultiEncoderConfig: fusion_dim True": (config(fusion_dim=True), ValueError, "positive whole number, got True"),
    "MultiEncoderConfig: unknown fusion_gating": (
        config(fusion_gating="relu"), ValueError, "Unknown fusion_gating 'relu'; allowed values are: softmax"),
    # ---- the tokenizer ----
    "tokenizer: max_length with a value per member too many": (
        lambda e: lambda: e.tok(["a cat"], max_length=[8, 8, 8]), ValueError,
        r"`max_length` has 3 values for 2 member encoders: give one value for all, or one per member"),
    "tokenizer: max_length 0": (lambda e: lambda: e.tok(["a cat"], truncation=True, max_length=0), ValueError,
                                r"`max_length` must be a positive integer \(or None"),
    "tokenizer: a number among the texts": (lambda e: lambda: e.tok(["a cat", 3]), ValueError,
                                            r"`text\[1\]` is 3 \(int\); every text must be a string"),
    "tokenizer: a number as the text": (lambda e: lambda: e.tok(5), ValueError,
                                        "`text` is 5 .*give a string or a list of strings"),
    "tokenizer: an empty list": (lambda e: lambda: e.tok([]), ValueError, "No texts to encode: the batch is empty"),
    "tokenizer: text_pair of another length": (lambda e: lambda: e.tok(["a", "b"], text_pair=["c"]), ValueError,
                                               "2 texts but 1 text pairs: " + FIX_PAIR),
    "tokenizer: is_split_into_words with sentences": (
        lambda e: lambda: e.tok(["a cat", "the dog"], is_split_into_words=True), ValueError,
        r"'a cat' holds spaces: pass sentences without is_split_into_words, or split each one"),
    "tokenizer: is_split_into_words with one string": (
        lambda e: lambda: e.tok("a cat", is_split_into_words=True), ValueError,
        r"every text must be a list of words \(strings\)"),
    "tokenizer: from_encoders with names of the wrong length": (
        lambda e: lambda: MultiEncoderTokenizer.from_encoders(e.paths[:2], encoder_names=["bert"]), ValueError,
        "1 names for 2 member tokenizers: give one name per member"),
    "tokenizer: from_encoders with the same checkpoint twice": (
        lambda e: lambda: MultiEncoderTokenizer.from_encoders([e.paths[0], e.paths[0]]), ValueError,
        "pass encoder_names=.* with a distinct name per member"),
    "tokenizer: check_model with another model's tokenizer": (
        lambda e: lambda: e.tok3.check_model(e.cls), ValueError,
        "3 member tokenizers .* but the model has 2 members .*use the tokenizer saved with the model"),
    "tokenizer: return_tensors='tf'": (lambda e: lambda: e.tok(["a"], return_tensors="tf"), ValueError,
                                       "return_tensors='tf' is not supported; use 'pt' or None"),
    # ---- the forward pass ----
    "forward: inputs for one member of two": (
        lambda e: lambda: e.cls(input_ids=e.batch["input_ids"][:1], attention_mask=e.batch["attention_mask"][:1]),
        ValueError, "inputs for 1 member encoders but the model has 2: every member needs its own inputs"),
    "forward: one tensor instead of a list": (
        lambda e: lambda: e.cls(input_ids=e.batch["input_ids"][0]), ValueError,
        "must be a list with one tensor per member encoder .*Build batches with MultiEncoderTokenizer"),
    "forward: members with different batch sizes": (
        lambda e: lambda: e.cls(input_ids=[e.batch["input_ids"][0], e.batch["input_ids"][1][:1]],
                                attention_mask=[e.batch["attention_mask"][0], e.batch["attention_mask"][1][:1]]),
        ValueError, r"Member 1 \(roberta\) got a batch of 1 examples but member 0 \(bert\) of 2: every member needs "
                    r"the same examples"),
    "forward: 1-D input_ids": (
        lambda e: lambda: e.cls(input_ids=[e.batch["input_ids"][0][0], e.batch["input_ids"][1][0]]), ValueError,
        r"must be a \(batch, seq\) tensor, got shape \(\d+,\): tokenize with return_tensors='pt'"),
    "forward: a label out of range": (lambda e: lambda: e.cls(**e.batch, labels=torch.tensor([0, 7])), ValueError,
                                      "Label 7 is out of range for a model with 2 labels .*build the model with more"),
    "forward: more labels than examples": (
        lambda e: lambda: e.cls(**e.batch, labels=torch.tensor([0, 1, 1])), ValueError,
        r"3 label\(s\) for a batch of 2 examples: give one label per example"),
    "forward: a word label out of range": (
        lambda e: lambda: e.ner(**e.words, labels=torch.tensor([[0, 9], [0, 1]])), ValueError,
        "Label 9 is out of range for a model with 3 labels"),
    "forward: word_ids without word_mask": (
        lambda e: lambda: e.ner(input_ids=e.words["input_ids"], attention_mask=e.words["attention_mask"],
                                word_ids=e.words["word_ids"]), ValueError,
        "Word mode needs `word_mask`.*tokenize the words with is_split_into_words=True"),
    "forward: a tagger without word_ids": (
        lambda e: lambda: e.ner(input_ids=e.words["input_ids"], attention_mask=e.words["attention_mask"]),
        ValueError, r"needs `word_ids` and `word_mask`: tokenize pre-split words"),
    # ---- encode / similarity ----
    "encode: batch_size 0": (lambda e: lambda: e.cls.encode(["a"], tokenizer=e.tok, batch_size=0), ValueError,
                             BATCH_SIZE + " 0"),
    "encode: batch_size negative": (lambda e: lambda: e.cls.encode(["a"], tokenizer=e.tok, batch_size=-2),
                                    ValueError, BATCH_SIZE + " -2"),
    "encode: batch_size True": (lambda e: lambda: e.cls.encode(["a"], tokenizer=e.tok, batch_size=True),
                                ValueError, BATCH_SIZE + " True"),
    "encode: batch_size None": (lambda e: lambda: e.cls.encode(["a"], tokenizer=e.tok, batch_size=None),
                                ValueError, BATCH_SIZE + " None"),
    "encode: None": (lambda e: lambda: e.cls.encode(None, tokenizer=e.tok), ValueError, NOT_TEXTS),
    "encode: bytes": (lambda e: lambda: e.cls.encode(b"a cat", tokenizer=e.tok), ValueError,
                      r"decode bytes first"),
    "encode: None among the sentences": (lambda e: lambda: e.cls.encode(["a", None], tokenizer=e.tok), ValueError,
                                         "`sentences` must be strings; item 1 is a NoneType"),
    "encode: without the tokenizer": (lambda e: lambda: e.cls.encode(["a"]), ValueError,
                                      r"needs the model's MultiEncoderTokenizer: pass tokenizer="),
    "encode: a generator works": (lambda e: lambda: e.cls.encode(texts(), tokenizer=e.tok), None,
                                  lambda out: out.shape == (2, 40)),
    "encode: an empty string is embedded, as sentence-transformers does": (
        lambda e: lambda: e.cls.encode([""], tokenizer=e.tok), None, lambda out: out.shape == (1, 40)),
    "similarity: None": (lambda e: lambda: e.cls.similarity(None, torch.zeros(2, 3)), ValueError, NOT_EMBEDDINGS),
    "similarity: texts instead of embeddings": (lambda e: lambda: e.cls.similarity(["a"], ["b"]), ValueError,
                                                NOT_EMBEDDINGS),
    "similarity: embeddings of different widths": (
        lambda e: lambda: e.cls.similarity(torch.zeros(2, 4), torch.zeros(2, 3)), ValueError,
        "different widths .*made with the same model and embedding_fusion"),
    # ---- predict helpers ----
    "predict_with_fusion_weights: batch_size 0": (
        lambda e: lambda: e.cls.predict_with_fusion_weights(e.tok, ["a"], batch_size=0), ValueError,
        BATCH_SIZE + " 0"),
    "predict_with_fusion_weights: batch_size True": (
        lambda e: lambda: e.cls.predict_with_fusion_weights(e.tok, ["a"], batch_size=True), ValueError,
        BATCH_SIZE + " True"),
    "predict_with_fusion_weights: None": (lambda e: lambda: e.cls.predict_with_fusion_weights(e.tok, None),
                                          ValueError, NOT_TEXTS),
    "predict_with_fusion_weights: pairs of another length": (
        lambda e: lambda: e.cls.predict_with_fusion_weights(e.tok, ["a", "b"], text_pairs=["c"]), ValueError,
        FIX_PAIR),
    "predict_with_fusion_weights: a generator works": (
        lambda e: lambda: e.cls.predict_with_fusion_weights(e.tok, texts()), None,
        lambda out: out["Sentences"] == ["a cat", "the dog sat"] and len(out["Predictions"]) == 2),
    "predict_tags: batch_size negative": (lambda e: lambda: e.ner.predict_tags(e.tok, ["a cat"], batch_size=-1),
                                          ValueError, BATCH_SIZE + " -1"),
    "predict_tags: None": (lambda e: lambda: e.ner.predict_tags(e.tok, None), ValueError, NOT_TEXTS),
    "predict_tags: an empty string": (lambda e: lambda: e.ner.predict_tags(e.tok, ["a cat", " "]), ValueError,
                                      r"Sentence\(s\) \[1\] have no words .*leave them out"),
    "predict_tags: a number among the sentences": (
        lambda e: lambda: e.ner.predict_tags(e.tok, ["a cat", 3]), ValueError,
        "Sentence 1 is 3 .*give each sentence as a string or a list of words"),
    "predict_tags: a generator works": (
        lambda e: lambda: e.ner.predict_tags(e.tok, texts()), None,
        lambda out: [r["words"] for r in out] == [["a", "cat"], ["the", "dog", "sat"]]),
    # ---- pipelines on model objects ----
    "classification pipeline: top_k 0": (lambda e: lambda: e.pipeline("multiencoder-classification")(
        "a cat", top_k=0), ValueError, r"`top_k` must be a positive integer \(or None for the best label\)"),
    "classification pipeline: top_k True": (lambda e: lambda: e.pipeline("multiencoder-classification")(
        "a cat", top_k=True), ValueError, "`top_k` must be a positive integer"),
    "classification pipeline: a number": (lambda e: lambda: e.pipeline("multiencoder-classification")(3),
                                          ValueError, r"Each input is a string, a \(text, text_pair\) pair"),
    "classification pipeline: a dict with other keys": (
        lambda e: lambda: e.pipeline("multiencoder-classification")({"sentence": "a"}), ValueError,
        r"A dict input takes `text` and optionally `text_pair`, got keys \['sentence'\]"),
    "classification pipeline: a dict whose text_pair is a number": (
        lambda e: lambda: e.pipeline("multiencoder-classification")({"text": "a", "text_pair": 3}), ValueError,
        "whose `text_pair` is int"),
    "classification pipeline: an unknown option": (
        lambda e: lambda: e.pipeline("multiencoder-classification")("a", temperature=2), ValueError,
        r"does not take \['temperature'\]"),
    "ner pipeline: aggregation_strategy 'max'": (
        lambda e: lambda: e.pipeline("multiencoder-ner")("a cat", aggregation_strategy="max"), ValueError,
        "`aggregation_strategy` must be 'simple' or 'none', got 'max'"),
    "ner pipeline: a number": (lambda e: lambda: e.pipeline("multiencoder-ner")(3), ValueError,
                               "Each input is a string, got int"),
    "ner pipeline: a dict": (lambda e: lambda: e.pipeline("multiencoder-ner")({"text": "a cat"}), ValueError,
                             "Each input is a string, got dict"),
    "ner pipeline: only spaces": (lambda e: lambda: e.pipeline("multiencoder-ner")("   "), ValueError,
                                  "has no words .*nothing to tag"),
    # ---- saved folders ----
    "from_pretrained: an empty folder": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(_empty(e)),
        FileNotFoundError, "holds no config.json: it is not a saved model. Give the folder `save_pretrained` wrote"),
    "from_pretrained: a folder that does not exist": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(os.path.join(e.root, "no", "where")),
        FileNotFoundError, "no such folder .*Give the folder of a saved model"),
    "from_pretrained: a file": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(os.path.join(e.saved, "config.json")),
        ValueError, "is a file: give the folder the model was saved in"),
    "from_pretrained: a plain BERT folder": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(e.paths[0]), ValueError,
        r"holds a 'bert' model, not a multi-encoder: load it with AutoModel.from_pretrained, or make it a member"),
    "from_pretrained: a tagger's folder as a classifier": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(_ner_folder(e)), ValueError,
        "saved as a MultiEncoderForTokenClassification, not a MultiEncoderForSequenceClassification.*Load it with "
        "MultiEncoderForTokenClassification.from_pretrained"),
    "from_pretrained: a classifier's folder as a tagger": (
        lambda e: lambda: MultiEncoderForTokenClassification.from_pretrained(e.saved), ValueError,
        "saved as a MultiEncoderForSequenceClassification, not a MultiEncoderForTokenClassification"),
    "from_pretrained: no weights file": (damaged(remove=["model.safetensors"]), FileNotFoundError,
                                         r"has config.json but no weights .*Save the model again"),
    "from_pretrained: a damaged config.json": (damaged(overwrite=("config.json", "{")), OSError,
                                               r"config.json is damaged \(not JSON.*save the model again"),
    "from_pretrained: a cut-off model.safetensors": (
        lambda e: lambda: MultiEncoderForSequenceClassification.from_pretrained(_cut_weights(e)), OSError,
        "a weights file is damaged .*cut off or overwritten. Save the model again"),
    "tokenizer from_pretrained: a missing tokenizer_1/": (
        damaged(remove=["tokenizer_1"], load=MultiEncoderTokenizer.from_pretrained), OSError,
        "member 1's tokenizer folder tokenizer_1/ is missing .*save the MultiEncoderTokenizer again"),
    "tokenizer from_pretrained: a model folder without a tokenizer": (
        damaged(remove=["tokenizer_config.json", "tokenizer_0", "tokenizer_1"],
                load=MultiEncoderTokenizer.from_pretrained), FileNotFoundError,
        r"holds no tokenizer_config.json: no tokenizer was saved there. Save the MultiEncoderTokenizer into it"),
    "tokenizer from_pretrained: a damaged tokenizer_config.json": (
        damaged(overwrite=("tokenizer_config.json", "{"), load=MultiEncoderTokenizer.from_pretrained), OSError,
        r"tokenizer_config.json is damaged \(not JSON.*save the MultiEncoderTokenizer again"),
    "tokenizer from_pretrained: a plain BERT folder": (
        lambda e: lambda: MultiEncoderTokenizer.from_pretrained(e.paths[0]), ValueError,
        "holds no MultiEncoderTokenizer"),
    # ---- sentence-transformers ----
    "to_sentence_transformer: another model's tokenizer": (
        lambda e: _sentence_transformer(e, tokenizer=e.tok3), ValueError,
        "use the tokenizer saved with the model"),
    "to_sentence_transformer: no tokenizer": (lambda e: _sentence_transformer(e, tokenizer=None), ValueError,
                                              "needs the model's MultiEncoderTokenizer, got NoneType: pass"),
    "to_sentence_transformer: max_seq_length 0": (
        lambda e: _sentence_transformer(e, tokenizer=e.tok, max_seq_length=0), ValueError,
        "`max_seq_length` must be a positive integer or None, got 0"),
    "save_sentence_transformer: into a file": (
        lambda e: lambda: __import__("hf_multiencoder").save_sentence_transformer(
            e.cls, os.path.join(e.saved, "config.json"), e.tok), ValueError, "is a file, not a directory"),
    "SentenceTransformer folder: no sentence_multiencoder_config.json": (
        damaged_sentence_transformer(remove=["sentence_multiencoder_config.json"]), FileNotFoundError,
        r"sentence_multiencoder_config.json is missing.*Copy it from the saved folder, or save"),
    "SentenceTransformer folder: a damaged sentence_multiencoder_config.json": (
        damaged_sentence_transformer(overwrite=("sentence_multiencoder_config.json", "{")), OSError,
        r"sentence_multiencoder_config.json is damaged \(not JSON.*save the SentenceTransformer again"),
    "SentenceTransformer folder: no config.json": (
        damaged_sentence_transformer(remove=["config.json"]), FileNotFoundError,
        "holds no config.json: it is not a saved model"),
    "SentenceTransformer folder: a damaged config.json": (
        damaged_sentence_transformer(overwrite=("config.json", '{"model_type": ')), OSError,
        r"config.json is damaged \(not JSON"),
    "SentenceTransformer folder: no weights": (damaged_sentence_transformer(remove=["model.safetensors"]),
                                               FileNotFoundError, "has config.json but no weights"),
    "SentenceTransformer folder: a missing tokenizer_0/": (
        damaged_sentence_transformer(remove=["tokenizer_0"]), OSError,
        "tokenizer folder tokenizer_0/ is missing .*save the MultiEncoderTokenizer again"),
    # ---- data: load_task / load_files (more rows in tests/test_bad_inputs.py and tests/test_data.py) ----
    "load_task: a name close to a task's": (lambda e: lambda: load_task("sst"), ValueError,
                                            r"Unknown task 'sst'. Did you mean 'sst2'\?"),
    "load_task: another close name": (lambda e: lambda: load_task("conll2002"), ValueError,
                                      r"Did you mean 'conll2003'\?"),
    "load_task: an unknown task_type": (lambda e: lambda: load_task(task_type="tokens", train_file="x.csv"),
                                        ValueError, "`task_type` must be 'sequence' or 'token', got 'tokens'"),
    "load_files: CSV and TSV together": (
        files(("a.csv", "sentence,label\na,1\n"), ("b.tsv", "sentence\tlabel\nb\t1\n")), ValueError,
        r"All data files must have the same format \(csv, tsv or json\)"),
    "load_files: another label column in the dev file": (
        files(("c.csv", "sentence,label\na,1\nb,0\n"), ("d.csv", "sentence,target\nc,1\n")), ValueError,
        r"d.csv has the columns \['sentence', 'target'\] but .*c.csv has \['sentence', 'label'\].*Rename the columns"),
    "load_files: a label column of another name": (
        files(("e.csv", "sentence,label\na,1\nb,0\n"), label_column="lbl"), ValueError,
        "no label column 'lbl'.*Pass label_column"),
    "load_files: an empty JSON file": (files(("f.json", "")), ValueError, r"Data file .*f.json is empty"),
    "load_files: a label cell left empty": (files(("g.csv", "sentence,label\na,1\nb,\n")), ValueError,
                                            "row 3 has no value in the label column 'label'"),
    "load_files: a folder as the training file": (
        lambda e: lambda: load_files(e.root), ValueError, "is a folder: give a CSV/TSV/JSON.* file inside it"),
    "load_files: an unsupported extension": (files(("h.txt", "a\t1\n")), ValueError,
                                             r"unsupported extension '.txt'; use one of .csv"),
    "load_files: text_columns as one string works": (
        files(("i.csv", "id,body,label\n1,a cat,x\n2,a dog,y\n"), text_columns="body"), None,
        lambda out: out[0]["train"]["sentence1"] == ["a cat", "a dog"]),
}


def _empty(e):
    folder = os.path.join(e.root, "empty")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def _cut_weights(e):
    folder = e.folder("cut")
    with open(os.path.join(folder, "model.safetensors"), "r+b") as f:
        f.truncate(1000)
    return folder


@pytest.mark.parametrize("case", list(CASES))
def test_bad_python_input_says_what_to_fix(case, env):
    make, error, expected = CASES[case]
    if "entence_transformer" in case or "SentenceTransformer" in case:
        pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    call = make(env)
    if error is None:
        assert expected(call()), case
        return
    with pytest.raises(error, match=expected):
        call()
