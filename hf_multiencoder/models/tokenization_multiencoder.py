"""MultiEncoderTokenizer: one tokenizer per member, behind the usual tokenizer interface.

Each member encodes the text (or the pair, or the pre-split words) in its own format. Without ``return_tensors``
a batch comes back example-major (``input_ids[b] == [ids of member 0, ids of member 1, ...]``) so that
``datasets.map`` stores it as columns; with ``return_tensors="pt"`` (and from [`MultiEncoderTokenizer.pad`]) it comes
back member-major, as the model takes it: ``input_ids[i]`` is a ``(batch, seq_i)`` tensor padded to member ``i``'s own
longest sequence.

Saved layout: ``tokenizer_config.json`` (names, ``auto_map``) and one sub-folder per member (``tokenizer_0/``, ...).

Shipped next to the weights (``trust_remote_code``): imports only ``torch``, ``transformers`` and relative modules.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch
from transformers import AutoTokenizer, BatchEncoding

try:  # transformers 5.x
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4.x: the shipped files load there too
    from transformers import PretrainedConfig as PreTrainedConfig
from transformers.dynamic_module_utils import custom_object_save
from transformers.utils import PushToHubMixin, cached_file

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
_HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")


def member_folder(i: int) -> str:
    return f"tokenizer_{i}"


def check_local_source(name, what: str = "Member") -> None:
    """Refuse a local path that does not exist, naming it: `from_pretrained` would read it as a Hub id and answer
    with a Hub error ("Repo id must use alphanumeric chars..."). ``what`` says what the path was meant to be."""
    text = os.fspath(name) if isinstance(name, (str, os.PathLike)) else None
    if text is None or os.path.exists(text):
        return
    looks_local = (isinstance(name, os.PathLike) or os.path.isabs(text) or text.startswith((".", "~"))
                   or text.endswith(("/", os.sep)) or text.count("/") > 1)
    if looks_local:
        raise FileNotFoundError(f"{what} {text!r}: no such folder (from {os.getcwd()}). Give the folder of a saved "
                                f"model (config.json and the weights inside) or a Hub id such as 'org/name'.")


def check_member_source(name) -> None:
    """Refuse a member named by a local path that does not exist (see `check_local_source`)."""
    if isinstance(name, (str, os.PathLike)) and os.path.isfile(name):
        raise ValueError(f"Member {os.fspath(name)!r} is a file: give the folder of a saved model (config.json and "
                         f"the weights inside) or a Hub id such as 'org/name'.")
    check_local_source(name, "Member")


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of a tokenizer's vocabulary and special tokens: two tokenizers with the same fingerprint tokenize
    alike (slow and fast classes of one tokenizer share it)."""
    content = {"vocab": sorted(tokenizer.get_vocab().items()), "special": tokenizer.all_special_tokens,
               "class": type(tokenizer).__name__.removesuffix("Fast")}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprints(recorded: list[str] | None, fingerprints: list[str], names: list[str]) -> None:
    """Raise a ``ValueError`` naming the members whose tokenizer is not the one ``recorded`` (a model's
    ``config.tokenizer_fingerprints``) was made from."""
    if recorded is None:
        return
    changed = [i for i, (a, b) in enumerate(zip(recorded, fingerprints)) if a is not None and a != b]
    if changed:
        raise ValueError(
            f"The tokenizer of member(s) {[names[i] for i in changed]} is not the one this model was trained "
            f"with (its vocabulary or special tokens differ; was a tokenizer_<i>/ folder replaced?). Use the "
            f"tokenizer saved with the model.")


def pad_rows(rows, value: int, length: int | None = None, multiple_of: int | None = None, as_tensor: bool = True,
             dtype: torch.dtype = torch.long):
    """Right-pad rows (lists or 1-D tensors) to one length: at least ``length``, else the longest row, rounded up to
    a multiple of ``multiple_of``. Returns a ``(rows, length)`` tensor, or lists with ``as_tensor=False``.

    The one padding routine of the package: per-member token ids, masks and word ids, word masks and word labels,
    cached-feature batches and the pipeline's example-major inputs all go through it.
    """
    rows = [r.reshape(-1) if isinstance(r, torch.Tensor) else r for r in rows]  # a (1, seq) row counts its tokens
    target = max([len(r) for r in rows] + [length or 0])
    if multiple_of:
        target = -(-target // multiple_of) * multiple_of
    if as_tensor and rows and isinstance(rows[0], torch.Tensor):
        out = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=value)
        return torch.nn.functional.pad(out, (0, target - out.size(1)), value=value)
    padded = [list(r) + [value] * (target - len(r)) for r in rows]
    return torch.tensor(padded, dtype=dtype) if as_tensor else padded


class MemberTensors(list):
    """One tensor per member. A list (the model, ``Trainer._prepare_input`` and ``accelerate`` keep its type) that
    also answers ``numel()`` (tokens over all members) and ``to()``, as code written for one tensor expects."""

    def numel(self) -> int:
        return sum(int(t.numel()) for t in self if t is not None)

    def to(self, *args, **kwargs) -> MemberTensors:
        return MemberTensors(t.to(*args, **kwargs) if t is not None else None for t in self)


class MultiEncoderBatch(BatchEncoding):
    """A [`BatchEncoding`] whose values may be lists of per-member tensors; ``.to()`` moves those too."""

    def to(self, device, non_blocking: bool = False) -> MultiEncoderBatch:
        def move(v):
            if isinstance(v, torch.Tensor):
                return v.to(device, non_blocking=non_blocking)
            if isinstance(v, (list, tuple)):
                return type(v)(move(x) for x in v) if isinstance(v, MemberTensors) else [move(x) for x in v]
            return v

        self.data = {k: move(v) for k, v in self.data.items()}
        return self


class MultiEncoderTokenizer(PushToHubMixin):
    """Tokenizes text for every member of a multi-encoder.

    Args:
        tokenizers (`list[PreTrainedTokenizerBase]`): one (fast) tokenizer per member, in the model's member order.
        encoder_names (`list[str]`, *optional*): the members' display names (checked against the model's).
    """

    model_input_names = ["input_ids", "attention_mask", "token_type_ids", "word_ids", "word_mask"]
    padding_side = "right"
    # not one fast tokenizer: no single offset mapping (pipelines read this to decide what they may ask for)
    is_fast = False
    _auto_class = None

    def __init__(self, tokenizers: list, encoder_names: list[str] | None = None, **kwargs):
        if not tokenizers:
            raise ValueError("MultiEncoderTokenizer needs at least one member tokenizer.")
        self.tokenizers = list(tokenizers)
        self.encoder_names = [str(n) for n in (encoder_names or [t.name_or_path for t in self.tokenizers])]
        if len(self.encoder_names) != len(self.tokenizers):
            raise ValueError(f"{len(self.encoder_names)} names for {len(self.tokenizers)} member tokenizers: give one "
                             f"name per member, the model's `encoder_names` in the same order.")
        # checked here too, without importing the configuration (a saved tokenizer ships only this file)
        repeated = sorted({n for n in self.encoder_names if self.encoder_names.count(n) > 1})
        if repeated:
            raise ValueError(f"Member names must be unique, got {self.encoder_names} ({repeated} more than once; the "
                             f"same checkpoint twice needs names): pass encoder_names=[...] with a distinct name per "
                             f"member.")
        self.init_kwargs = kwargs
        self.name_or_path = kwargs.get("name_or_path", "")

    # ---- construction, save, load ------------------------------------------------------------------------------
    @classmethod
    def from_encoders(cls, encoders: list[str], encoder_names: list[str] | None = None, **kwargs):
        """One tokenizer per member checkpoint (any name or folder ``AutoTokenizer`` accepts)."""
        if isinstance(encoders, str) or not encoders:
            raise ValueError("`encoders` must be a non-empty list of checkpoint names or folders.")
        for e in encoders:
            check_member_source(e)
        return cls([AutoTokenizer.from_pretrained(e, **kwargs) for e in encoders],
                   encoder_names=encoder_names or [str(e) for e in encoders])

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        hub_kwargs = {k: kwargs[k] for k in _HUB_KWARGS if kwargs.get(k) is not None}
        check_local_source(pretrained_model_name_or_path, "Tokenizer folder")
        local_config = os.path.join(str(pretrained_model_name_or_path), hub_kwargs.get("subfolder", ""),
                                    TOKENIZER_CONFIG_FILE)
        if os.path.isdir(str(pretrained_model_name_or_path)) and not os.path.isfile(local_config):
            raise FileNotFoundError(
                f"{pretrained_model_name_or_path} holds no {TOKENIZER_CONFIG_FILE}: no tokenizer was saved there. "
                f"Save the MultiEncoderTokenizer into it (tokenizer.save_pretrained(folder)), or build one from the "
                f"members with MultiEncoderTokenizer.from_encoders([...]).")
        config_file = cached_file(pretrained_model_name_or_path, TOKENIZER_CONFIG_FILE, **hub_kwargs)
        try:
            with open(config_file, encoding="utf-8") as f:
                tok_config = json.load(f)
        except (ValueError, UnicodeDecodeError) as err:
            raise OSError(f"{config_file} is damaged (not JSON: {err}): save the MultiEncoderTokenizer again, or "
                          f"restore the file from a copy.") from None
        if "member_tokenizers" not in tok_config:
            raise ValueError(f"{pretrained_model_name_or_path} holds no MultiEncoderTokenizer (no `member_tokenizers` "
                             f"in its {TOKENIZER_CONFIG_FILE}).")
        parent = hub_kwargs.pop("subfolder", None)
        for i, sub in enumerate(tok_config["member_tokenizers"]):
            folder = os.path.join(str(pretrained_model_name_or_path), parent or "", sub)
            local = os.path.isdir(str(pretrained_model_name_or_path))
            if local and not os.path.isfile(os.path.join(folder, TOKENIZER_CONFIG_FILE)):
                raise OSError(f"{pretrained_model_name_or_path}: member {i}'s tokenizer folder {sub}/ is missing or "
                              f"incomplete (no {TOKENIZER_CONFIG_FILE}); save the MultiEncoderTokenizer again, or "
                              f"copy the whole folder.")
        # A blank config: AutoTokenizer would otherwise look for the member's `config.json` in its sub-folder (there
        # is none; the members' configs live in the model's config), which fails offline from the Hub cache. Each
        # member's own `tokenizer_config.json` names its tokenizer class.
        tokenizers = [
            AutoTokenizer.from_pretrained(pretrained_model_name_or_path, config=PreTrainedConfig(),
                                          subfolder=f"{parent}/{sub}" if parent else sub, **hub_kwargs)
            for sub in tok_config["member_tokenizers"]
        ]
        tokenizer = cls(tokenizers, encoder_names=tok_config.get("encoder_names"),
                        name_or_path=str(pretrained_model_name_or_path))
        # a model saved beside (a trained folder, a Hub repository): its recorded fingerprints must match, so that a
        # swapped tokenizer_<i>/ folder fails here, for `pipeline` and every other caller, not only in `check_model`
        model_config = cached_file(pretrained_model_name_or_path, "config.json", **hub_kwargs,
                                   _raise_exceptions_for_missing_entries=False,
                                   _raise_exceptions_for_connection_errors=False)
        if model_config is not None:
            with open(model_config, encoding="utf-8") as f:
                recorded = json.load(f).get("tokenizer_fingerprints")
            if recorded is not None and len(recorded) == tokenizer.num_encoders:
                check_fingerprints(recorded, tokenizer.member_fingerprints(), tokenizer.encoder_names)
        return tokenizer

    def save_pretrained(self, save_directory, push_to_hub: bool = False, **kwargs) -> tuple[str, ...]:
        """Save every member tokenizer (``tokenizer_<i>/``) and ``tokenizer_config.json``. With ``push_to_hub=True``
        the folder is then uploaded by the inherited ``push_to_hub`` (``repo_id`` defaults to the folder's name;
        other keyword arguments go to it)."""
        if os.path.isfile(save_directory):
            raise ValueError(f"Provided path ({save_directory}) should be a directory, not a file.")
        os.makedirs(save_directory, exist_ok=True)
        files = []
        for i, tok in enumerate(self.tokenizers):
            files.extend(tok.save_pretrained(os.path.join(save_directory, member_folder(i))))
        tok_config = {
            "tokenizer_class": type(self).__name__,
            "encoder_names": self.encoder_names,
            "member_tokenizers": [member_folder(i) for i in range(len(self.tokenizers))],
        }
        if self._auto_class is not None:
            custom_object_save(self, save_directory, config=tok_config)
        path = os.path.join(save_directory, TOKENIZER_CONFIG_FILE)
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(tok_config, indent=2, sort_keys=True) + "\n")
        files.append(path)
        if push_to_hub:
            repo_id = kwargs.pop("repo_id", os.path.basename(os.path.normpath(str(save_directory))))
            self.push_to_hub(repo_id, **kwargs)
        return tuple(str(f) for f in files)

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoTokenizer"):
        """Make ``save_pretrained`` ship this file and write ``auto_map`` (``trust_remote_code`` loading)."""
        if not isinstance(auto_class, str):
            auto_class = auto_class.__name__
        cls._auto_class = auto_class

    # ---- properties the pipeline and collators read -----------------------------------------------------------
    @property
    def num_encoders(self) -> int:
        return len(self.tokenizers)

    @property
    def pad_token_id(self) -> int:
        return self.tokenizers[0].pad_token_id

    @property
    def model_max_length(self) -> int:
        return min(t.model_max_length for t in self.tokenizers)

    @property
    def returns_token_type_ids(self) -> list[bool]:
        return ["token_type_ids" in t.model_input_names for t in self.tokenizers]

    def __len__(self) -> int:
        return self.num_encoders

    def __repr__(self) -> str:
        members = ", ".join(f"{n}: {type(t).__name__}" for n, t in zip(self.encoder_names, self.tokenizers))
        return f"{type(self).__name__}({members})"

    def member_fingerprints(self) -> list[str]:
        """A short hash of each member tokenizer's vocabulary and special tokens: two tokenizers with the same
        fingerprint tokenize alike."""
        # hashing a vocabulary takes tens of milliseconds: computed once per member, again only if its size or
        # special tokens change (`add_tokens`, a new pad token), since `check_model` runs at every `encode` call
        cache = self.__dict__.setdefault("_fingerprints", {})
        prints = []
        for i, tok in enumerate(self.tokenizers):
            key = (id(tok), len(tok), tuple(tok.all_special_tokens))
            if cache.get(i, (None,))[0] != key:
                cache[i] = (key, tokenizer_fingerprint(tok))
            prints.append(cache[i][1])
        return prints

    def __getstate__(self):
        # the fingerprint cache is keyed by object ids, which differ in every process: leaving it out of the
        # pickled state keeps `datasets`' hash of this tokenizer (and so of every `map` that uses it) the same in
        # every process, so the processes of a torchrun share cache files
        state = self.__dict__.copy()
        state.pop("_fingerprints", None)
        return state

    def check_model(self, model) -> None:
        """Raise a ``ValueError`` if this tokenizer was built for other members than ``model``'s.

        Members must match in number and display name (pass the same ``encoder_names`` to both); no member tokenizer
        may produce ids outside its member's vocabulary or pad with another id than its member's config; and each
        member tokenizer must be the one the model was first checked with: the first check records the tokenizers'
        fingerprints in ``model.config.tokenizer_fingerprints`` (saved with the model), later checks compare.
        """
        names = list(model.config.encoder_names)
        if len(names) != self.num_encoders:
            raise ValueError(f"The tokenizer has {self.num_encoders} member tokenizers ({self.encoder_names}) but the "
                             f"model has {len(names)} members ({names}): use the tokenizer saved with the model, or "
                             f"build one from the model's members (MultiEncoderTokenizer.from_encoders).")
        if names != self.encoder_names:
            raise ValueError(f"The tokenizer was built for members {self.encoder_names} but the model's members are "
                             f"{names}: use the tokenizer saved with the model, or the same `encoder_names` in the "
                             f"same order.")
        for i, (tok, member) in enumerate(zip(self.tokenizers, model.config.encoders)):
            vocab = member.get("vocab_size")
            if vocab is not None and len(tok) > vocab:
                raise ValueError(f"Member {i}: tokenizer {self.encoder_names[i]!r} has {len(tok)} tokens but member "
                                 f"{names[i]!r} has a vocabulary of {vocab}: the tokenizer was built for another "
                                 f"model.")
            pad = member.get("pad_token_id")
            if pad is not None and tok.pad_token_id is not None and pad != tok.pad_token_id:
                raise ValueError(f"Member {i} ({names[i]!r}): the tokenizer pads with id {tok.pad_token_id} but the "
                                 f"member's config with {pad}: the tokenizer was built for another model.")
        fingerprints = self.member_fingerprints()
        recorded = getattr(model.config, "tokenizer_fingerprints", None)
        check_fingerprints(recorded, fingerprints, names)
        if recorded is None or None in recorded:
            model.config.tokenizer_fingerprints = fingerprints

    # ---- encoding ---------------------------------------------------------------------------------------------
    def pre_tokenize(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        """The words of `text` with their character offsets `(start, end)`, as the first member's pre-tokenizer splits
        them (BERT's splits off punctuation: "France." is two words); whitespace words for a tokenizer without one.
        The word-level models tag these words (`predict_tags`, the `multiencoder-ner` pipeline)."""
        backend = getattr(self.tokenizers[0], "backend_tokenizer", None)
        if backend is not None and backend.pre_tokenizer is not None:
            return backend.pre_tokenizer.pre_tokenize_str(text)
        words, start = [], 0
        for word in text.split():
            start = text.index(word, start)
            words.append((word, (start, start + len(word))))
            start += len(word)
        return words

    def __call__(
        self,
        text=None,
        text_pair=None,
        is_split_into_words: bool = False,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | list[int] | None = None,
        return_tensors: str | None = None,
        pad_to_multiple_of: int | None = None,
        **kwargs,
    ) -> MultiEncoderBatch:
        """Encode for every member. ``max_length`` may be one value or one per member.

        With ``is_split_into_words=True`` (token classification) each example is a list of words; the output adds,
        per member, ``word_ids`` (the word of each subword, -1 for special tokens) and per example ``word_mask``.
        A word cut off by a member's ``max_length`` has no subword in that member (see the model's docs).
        """
        if text is None:
            raise ValueError("`text` is required.")
        per_token = [k for k in ("return_offsets_mapping", "return_special_tokens_mask") if kwargs.get(k)]
        if per_token:
            raise ValueError(f"{', '.join(per_token)}: a MultiEncoderTokenizer encodes each text once per member, so "
                             f"there is no single offset mapping or special-tokens mask to return (the stock "
                             f"token-classification pipeline asks for them). To tag words, use "
                             f"`pipeline(\"multiencoder-ner\", model=folder, trust_remote_code=True)`, "
                             f"`model.predict_tags(tokenizer, sentences)` or `run_glue_multi.py --do_predict`; to "
                             f"encode one member, call its own tokenizer (`tokenizer.tokenizers[i]`).")
        for name, value in (("text", text), ("text_pair", text_pair)):
            if value is not None and not isinstance(value, (str, list, tuple)):
                raise ValueError(f"`{name}` is {value!r} ({type(value).__name__}): give a string or a list of strings "
                                 f"(with is_split_into_words=True, a list of words or a list of word lists).")
        single = isinstance(text, str) or (is_split_into_words and text and isinstance(text[0], str))
        if is_split_into_words and single and not isinstance(text, str):
            spaced = [w for w in text if len(w.split()) > 1]
            if spaced:
                raise ValueError(f"With is_split_into_words=True, `text` is one list of words (or a batch of word "
                                 f"lists), but {spaced[0]!r} holds spaces: pass sentences without "
                                 f"is_split_into_words, or split each one into words (`sentence.split()`).")
        texts = [text] if single else list(text)
        pairs = None if text_pair is None else ([text_pair] if single else list(text_pair))
        if not texts:
            raise ValueError("No texts to encode: the batch is empty.")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} text pairs: give one `text_pair` per text.")
        _check_texts("text", texts, is_split_into_words)
        if pairs is not None:
            _check_texts("text_pair", pairs, is_split_into_words)
        max_lengths = max_length if isinstance(max_length, (list, tuple)) else [max_length] * self.num_encoders
        if len(max_lengths) != self.num_encoders:
            raise ValueError(f"`max_length` has {len(max_lengths)} values for {self.num_encoders} member encoders: "
                             f"give one value for all, or one per member ({self.encoder_names}).")
        for m in max_lengths:
            if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
                raise ValueError(f"`max_length` must be a positive integer (or None: each member's own limit), got "
                                 f"{m!r}.")
        if padding == "max_length" and any(m is None for m in max_lengths):
            raise ValueError("padding='max_length' needs `max_length`.")

        any_tt = any(self.returns_token_type_ids)
        examples: list[dict[str, Any]] = [
            {"input_ids": [], "attention_mask": [], **({"token_type_ids": []} if any_tt else {})} for _ in texts
        ]
        if is_split_into_words:
            for ex, words in zip(examples, texts):
                ex["word_ids"] = []
                ex["word_mask"] = [1] * len(words)
        for i, tok in enumerate(self.tokenizers):
            enc = tok(texts, text_pair=pairs, is_split_into_words=is_split_into_words, padding=False,
                      truncation=truncation, max_length=max_lengths[i], **kwargs)
            limit = tok.model_max_length if tok.model_max_length < 10**6 else None
            longest = max(len(ids) for ids in enc["input_ids"])
            if not truncation and limit is not None and longest > limit:
                raise ValueError(f"A text is {longest} tokens long for member {i} ({self.encoder_names[i]}), which "
                                 f"takes at most {limit}: pass truncation=True (with max_length <= {limit}).")
            for b, ex in enumerate(examples):
                ids = enc["input_ids"][b]
                ex["input_ids"].append(ids)
                ex["attention_mask"].append(enc["attention_mask"][b])
                if any_tt:
                    types = enc["token_type_ids"][b] if "token_type_ids" in enc else [0] * len(ids)
                    ex["token_type_ids"].append(types)
                if is_split_into_words:
                    ex["word_ids"].append([-1 if w is None else w for w in enc.word_ids(b)])

        if return_tensors is None and not padding:
            if single:
                return MultiEncoderBatch(examples[0])
            return MultiEncoderBatch({k: [ex[k] for ex in examples] for k in examples[0]})
        padded = self.pad(examples, padding=padding or True, max_length=max_lengths,
                          pad_to_multiple_of=pad_to_multiple_of, return_tensors=return_tensors)
        return padded

    def pad(self, features: list[dict], padding: bool | str = True, max_length: int | list[int] | None = None,
            pad_to_multiple_of: int | None = None, return_tensors: str | None = "pt") -> MultiEncoderBatch:
        """Pad a list of example-major features into member-major tensors, each member to its own longest.

        Keys: ``input_ids``/``attention_mask``/``token_type_ids``/``word_ids`` (lists per member), ``word_mask``, and
        labels (``label``/``labels``: scalars, or one label per word padded with -100). Other keys pass through
        as lists.
        """
        if not features:
            raise ValueError("Nothing to pad: `features` is empty.")
        n = self.num_encoders
        for b, f in enumerate(features):
            if "input_ids" not in f:
                raise ValueError(f"Example {b} has no `input_ids`: tokenize it with MultiEncoderTokenizer first.")
            if len(f["input_ids"]) != n:
                raise ValueError(
                    f"Example {b} has inputs for {len(f['input_ids'])} member encoders, but this tokenizer has {n} "
                    f"({self.encoder_names}); every member needs its own inputs.")
        max_lengths = max_length if isinstance(max_length, (list, tuple)) else [max_length] * n
        to_tensor = return_tensors == "pt"
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors={return_tensors!r} is not supported; use 'pt' or None.")
        out: dict[str, Any] = {}
        pad_values = {"input_ids": None, "attention_mask": 0, "token_type_ids": 0, "word_ids": -1}
        for key, pad_value in pad_values.items():
            if key not in features[0]:
                continue
            per_member = []
            for i in range(n):
                value = self.tokenizers[i].pad_token_id if key == "input_ids" else pad_value
                per_member.append(pad_rows([f[key][i] for f in features], value if value is not None else 0,
                                           length=max_lengths[i] if padding == "max_length" else None,
                                           multiple_of=pad_to_multiple_of, as_tensor=to_tensor))
            out[key] = MemberTensors(per_member) if to_tensor else per_member
        if "word_mask" in features[0]:
            out["word_mask"] = pad_rows([f["word_mask"] for f in features], 0, as_tensor=to_tensor)
        for key in ("label", "labels", "label_ids"):
            if key in features[0] and features[0][key] is not None:
                values = [f[key] for f in features]
                name = "labels"
                if isinstance(values[0], (list, tuple)) or (isinstance(values[0], torch.Tensor) and values[0].dim()):
                    is_word_labels = "word_mask" in features[0]
                    if is_word_labels:
                        out[name] = pad_rows(values, -100, as_tensor=to_tensor)
                    else:  # multi-label: multi-hot floats
                        out[name] = torch.tensor([list(v) for v in values], dtype=torch.float) if to_tensor else values
                elif to_tensor:
                    first = values[0].item() if isinstance(values[0], torch.Tensor) else values[0]
                    dtype = torch.long if isinstance(first, int) else torch.float
                    out[name] = torch.tensor([float(v) if dtype == torch.float else int(v) for v in values],
                                             dtype=dtype)
                else:
                    out[name] = values
        known = set(pad_values) | {"word_mask", "label", "labels", "label_ids"}
        for key in features[0]:
            if key not in known:
                out[key] = [f[key] for f in features]
        return MultiEncoderBatch(out)


def _check_texts(name: str, texts: list, words: bool) -> None:
    """Every text a string (a list of strings with ``is_split_into_words``); the error names the first bad index."""
    for i, t in enumerate(texts):
        ok = isinstance(t, (list, tuple)) and all(isinstance(w, str) for w in t) if words else isinstance(t, str)
        if not ok:
            want = "a list of words (strings)" if words else "a string"
            raise ValueError(f"`{name}[{i}]` is {t!r} ({type(t).__name__}); every text must be {want}.")


__all__ = ["MemberTensors", "MultiEncoderTokenizer", "MultiEncoderBatch", "pad_rows"]
