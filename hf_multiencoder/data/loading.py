"""Loading data: the registered tasks (see `tasks.py`) from local files or the Hub, and your own files.

Every loader returns a `datasets.DatasetDict` in one normalised layout, whatever the source, and the task's
[`TaskSpec`]:

- sequence tasks: `sentence1` (and `sentence2` for pairs) and `label` (a `ClassLabel` id, or a float for
  regression). Unlabelled test rows get label -1, as the Hub's `nyu-mll/glue` does.
- token tasks: `tokens` (list of words) and `ner_tags` (a `Sequence(ClassLabel)`).

Label ids match the Hub datasets (`nyu-mll/glue`, `conll2003`, `wnut_17`), so a model trained from the local files
and one trained from the Hub agree. Local files are read from `data_dir` (default: `$HF_MULTIENCODER_DATA`, else
`<repo>/../shared/data`), at each task's `local_path` with its `reader`; a reader is a function
`(spec, path) -> DatasetDict` registered in `READERS` (`register_reader`), so a new file format is one function.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value
from huggingface_hub import is_offline_mode

from .tasks import (  # noqa: F401 - the label lists are re-exported for convenience
    CONLL2003_LABELS,
    PAIR,
    SINGLE,
    TASKS,
    TREC_COARSE_LABELS,
    TREC_FINE_LABELS,
    WNUT17_LABELS,
    TaskSpec,
    get_task,
    register_task,
)

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = os.path.normpath(REPO_ROOT / ".." / "shared" / "data")


def resolve_data_dir(data_dir: str | None = None) -> str:
    """The data folder to read: `data_dir` if given, else `$HF_MULTIENCODER_DATA`, else `<repo>/../shared/data`."""
    if data_dir:
        return os.path.abspath(os.path.expanduser(data_dir))
    env = os.environ.get("HF_MULTIENCODER_DATA")
    return os.path.abspath(os.path.expanduser(env)) if env else DEFAULT_DATA_DIR


def _is_offline() -> bool:
    """Offline as `datasets` itself decides it (`HF_HUB_OFFLINE` / `HF_DATASETS_OFFLINE`, read at import)."""
    return is_offline_mode() or bool(datasets.config.HF_HUB_OFFLINE)


# ---- features and labels --------------------------------------------------------------------------------------------
def _sequence_features(spec: TaskSpec) -> Features:
    features = {key: Value("string") for key in spec.text_keys}
    features["label"] = Value("float32") if spec.is_regression else ClassLabel(names=list(spec.label_list))
    return Features(features)


def _token_features(label_list: list[str]) -> Features:
    return Features({"tokens": Sequence(Value("string")), "ner_tags": Sequence(ClassLabel(names=list(label_list)))})


def _label_to_id(value: str | None, spec: TaskSpec, where: str) -> int | float:
    """Turn a raw label string into the task's label space (id, float score, or -1 / -1.0 when absent)."""
    if value is None or value == "":
        return -1.0 if spec.is_regression else -1
    if spec.is_regression:
        try:
            score = float(value)
        except ValueError:
            raise ValueError(f"{where}: score {value!r} is not a number.") from None
        if not math.isfinite(score):
            raise ValueError(f"{where}: score {value!r} is not a finite number.")
        return score
    if value in spec.label_list:
        return spec.label_list.index(value)
    try:
        label_id = int(value)
    except ValueError:
        raise ValueError(f"{where}: label {value!r} is not one of {spec.label_list}.") from None
    if not 0 <= label_id < len(spec.label_list):
        raise ValueError(f"{where}: label id {label_id} is out of range for {spec.label_list}.")
    return label_id


def _rows_to_dataset(rows: list[tuple], spec: TaskSpec) -> Dataset:
    """rows: (text, [text2,] label) tuples already in the task's label space."""
    columns = list(spec.text_keys) + ["label"]
    data = {col: [row[i] for row in rows] for i, col in enumerate(columns)}
    return Dataset.from_dict(data, features=_sequence_features(spec))


def _split_first_per_label(rows: list[tuple[str, str]], per_label: int) -> tuple[list, list]:
    """The original project's dev split for corpora without one: the first `per_label` (text, label) rows of each label
    in file order are dev; train is every row not in dev (so later duplicates of dev rows are dropped too)."""
    counts: dict[str, int] = {}
    dev = []
    for text, label in rows:
        if counts.get(label, 0) < per_label:
            counts[label] = counts.get(label, 0) + 1
            dev.append((text, label))
    dev_set = set(dev)
    return [r for r in rows if r not in dev_set], dev


# ---- readers --------------------------------------------------------------------------------------------------------
Reader = Callable[[TaskSpec, str], DatasetDict]
READERS: dict[str, Reader] = {}


def register_reader(name: str) -> Callable[[Reader], Reader]:
    """Register a reader under `name`, for `TaskSpec(reader=name)`: a function `(spec, path) -> DatasetDict`."""

    def decorator(fn: Reader) -> Reader:
        READERS[name] = fn
        return fn

    return decorator


def _read_glue_tsv(path: str, fieldnames: tuple[str, ...] | None) -> list[dict[str, str]]:
    """Rows of a GLUE TSV as dicts, read the way HF's glue loader does (tab separated, `csv.QUOTE_NONE`).
    `fieldnames`: the columns of a file without header line (CoLA train/dev)."""
    # utf-8-sig drops MRPC's byte-order mark, so its first column is `Quality` and not `\ufeffQuality`.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(fieldnames) if fieldnames else next(reader, None)
        if header is None:
            return []
        rows = []
        for line_no, fields in enumerate(reader, start=1 if fieldnames else 2):
            if not fields:
                continue
            if len(fields) != len(header):
                raise ValueError(f"{path}:{line_no}: expected {len(header)} tab-separated fields, got {len(fields)}.")
            rows.append(dict(zip(header, fields)))
    return rows


@register_reader("glue")
def read_glue(spec: TaskSpec, folder: str) -> DatasetDict:
    """GLUE's TSV layout. Options: `files` (split -> file), `columns` (text columns), `label_column`, `headerless`
    (splits whose file has no header line) and `fieldnames` (their columns). A missing file is a missing split."""
    options = spec.reader_kwargs
    splits = {}
    for split, filename in options["files"].items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue  # e.g. QNLI has no train.tsv locally: the split is simply absent
        fieldnames = options.get("fieldnames") if split in options.get("headerless", ()) else None
        records = _read_glue_tsv(path, fieldnames)
        missing = [c for c in options["columns"] if records and c not in records[0]]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the file has {list(records[0])}.")
        rows = [(*(record[c] for c in options["columns"]),
                 _label_to_id(record.get(options["label_column"]), spec, f"{path} row {i}"))
                for i, record in enumerate(records)]
        splits[split] = _rows_to_dataset(rows, spec)
    return DatasetDict(splits)


def _read_trec(path: str) -> list[tuple[str, str]]:
    """(label, question) pairs of a TREC file, `COARSE:fine question` per line.

    The files are Latin-1. Like HF's `trec` loader, the one stray byte 0xF0 (`sister\\xf0city`) becomes a space.
    """
    examples = []
    with open(path, "rb") as f:
        for raw in f:
            line = raw.replace(b"\xf0", b" ").strip().decode("latin-1")
            if not line:
                continue
            label, _, text = line.partition(" ")
            examples.append((label, text))
    return examples


@register_reader("trec")
def read_trec(spec: TaskSpec, folder: str) -> DatasetDict:
    """TREC: train_5500.label -> train, TREC_10.label -> test and validation (TREC has no dev set). Option `fine`:
    the 50 fine labels instead of the 6 coarse ones."""
    splits = {}
    for split, filename in {"train": "train_5500.label", "test": "TREC_10.label"}.items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue
        rows = []
        for i, (fine, text) in enumerate(_read_trec(path)):
            label = fine if spec.reader_kwargs.get("fine") else fine.partition(":")[0]
            rows.append((text, _label_to_id(label, spec, f"{path} line {i + 1}")))
        splits[split] = _rows_to_dataset(rows, spec)
    if "test" in splits:
        splits = {**{k: v for k, v in splits.items() if k == "train"}, "validation": splits["test"],
                  "test": splits["test"]}
    return DatasetDict(splits)


_SICK_SPLITS = {"TRAIN": "train", "TRIAL": "validation", "TEST": "test"}


@register_reader("sick")
def read_sick(spec: TaskSpec, path: str) -> DatasetDict:
    """SICK.txt: splits from the `SemEval_set` column; option `label_column` (`relatedness_score` or
    `entailment_label`)."""
    rows: dict[str, list[tuple]] = {split: [] for split in _SICK_SPLITS.values()}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, record in enumerate(reader):
            where = f"{path} row {i}"
            split = _SICK_SPLITS.get((record.get("SemEval_set") or "").strip())
            if split is None:
                raise ValueError(f"{where}: SemEval_set {record.get('SemEval_set')!r} is not TRAIN, TRIAL or TEST.")
            raw = record[spec.reader_kwargs["label_column"]]
            rows[split].append((record["sentence_A"], record["sentence_B"], _label_to_id(raw, spec, where)))
    return DatasetDict({split: _rows_to_dataset(r, spec) for split, r in rows.items() if r})


@register_reader("clickbait")
def read_clickbait(spec: TaskSpec, folder: str) -> DatasetDict:
    """Headline files, one per label (`files`: label -> gzip file, one headline per line, blank lines skipped); the
    first `dev_per_label` headlines of each label (in the `files` order) are validation, the rest train."""
    options = spec.reader_kwargs
    train, dev = [], []
    for label, filename in options["files"].items():
        path = os.path.join(folder, filename)
        opener = gzip.open if filename.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            headlines = [line.strip() for line in f if line.strip()]
        label_id = _label_to_id(label, spec, path)
        dev += [(h, label_id) for h in headlines[:options["dev_per_label"]]]
        train += [(h, label_id) for h in headlines[options["dev_per_label"]:]]
    return DatasetDict({"train": _rows_to_dataset(train, spec), "validation": _rows_to_dataset(dev, spec)})


@register_reader("labelled_csv")
def read_labelled_csv(spec: TaskSpec, folder: str) -> DatasetDict:
    """One CSV with a text and a label column and no split (ISEAR, Emotion Stimulus). Options: `file`, `text_column`,
    `label_column`, `skip_rows` (data rows to skip first), `dev_per_label` (see `_split_first_per_label`)."""
    options = spec.reader_kwargs
    path = os.path.join(folder, options["file"])
    with open(path, encoding="utf-8", newline="") as f:
        records = list(csv.DictReader(f))[options.get("skip_rows", 0):]
    rows = [(r[options["text_column"]], r[options["label_column"]]) for r in records]
    train, dev = _split_first_per_label(rows, options["dev_per_label"])
    return DatasetDict({
        split: _rows_to_dataset([(text, _label_to_id(label, spec, path)) for text, label in part], spec)
        for split, part in (("train", train), ("validation", dev))
    })


@register_reader("emobank")
def read_emobank(spec: TaskSpec, path: str) -> DatasetDict:
    """emobank.csv (`id,split,V,A,D,text`): the official split column; option `target` (V, A or D)."""
    rows: dict[str, list[tuple]] = {"train": [], "validation": [], "test": []}
    with open(path, encoding="utf-8", newline="") as f:
        for i, record in enumerate(csv.DictReader(f)):
            split = {"train": "train", "dev": "validation", "test": "test"}[record["split"]]
            target = _label_to_id(record[spec.reader_kwargs["target"]], spec, f"{path} row {i + 2}")
            rows[split].append((record["text"], target))
    return DatasetDict({split: _rows_to_dataset(r, spec) for split, r in rows.items()})


@register_reader("fb_va")
def read_fb_va(spec: TaskSpec, path: str) -> DatasetDict:
    """The Facebook valence/arousal CSV: tabs removed from the messages, empty ones dropped; the first `dev_size` are
    validation, the rest train; option `target` (`Valence1`, `Arousal1`, ...)."""
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for i, record in enumerate(csv.DictReader(f)):
            text = record["Anonymized Message"].replace("\t", "").strip()
            if text:
                rows.append((text, _label_to_id(record[spec.reader_kwargs["target"]], spec, f"{path} row {i + 2}")))
    dev_size = spec.reader_kwargs["dev_size"]
    return DatasetDict({"train": _rows_to_dataset(rows[dev_size:], spec),
                        "validation": _rows_to_dataset(rows[:dev_size], spec)})


# ---- CoNLL ----------------------------------------------------------------------------------------------------------
def iob1_to_iob2(tags: list[str]) -> list[str]:
    """Convert one sentence's IOB1 tags (`I-` by default, `B-` only between touching entities) to IOB2.

    In IOB2 every entity starts with `B-`. An `I-X` that follows `O`, the start of the sentence, or a tag of another
    type starts an entity, so it becomes `B-X`. IOB2 input comes back unchanged.
    """
    converted = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-"):
            entity_type = tag[2:]
            if previous == "O" or previous[2:] != entity_type:
                tag = "B-" + entity_type
        converted.append(tag)
        previous = tag
    return converted


_IOB_TAG = re.compile(r"^(O|[BI]-\S+)$")
_NOT_CONLL = (".csv", ".json", ".jsonl")


def read_conll(path: str, token_column: int = 0, tag_column: int = -1, iob: bool = True,
               ) -> list[tuple[list[str], list[str]]]:
    """Read a CoNLL-format file into (tokens, tags) sentences.

    One word per line, columns separated by a tab (if the line has one) or by whitespace; a blank line (or a line
    of whitespace only) ends a sentence; `-DOCSTART-` lines are skipped. MIT's `.bio` files put the tag first:
    `token_column=1, tag_column=0`.

    Checked, with the file and line in the error: every line has the column count of the file's first line (a token
    without a tag, a stray column or another separator is an error, not a new tag), every tag is an IOB/IOB2 tag
    (`O`, `B-TYPE`, `I-TYPE`; `iob=False` reads any other column, e.g. POS tags), the file is UTF-8 and holds at
    least one sentence.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"CoNLL file {path} does not exist.")
    if path.lower().endswith(_NOT_CONLL):
        raise ValueError(f"{path} is a CSV/JSON file, not a CoNLL file (a token and a tag per line): token tasks "
                         f"(--task_type token) read CoNLL files; sentence tasks read CSV/JSON.")
    sentences: list[tuple[list[str], list[str]]] = []
    tokens: list[str] = []
    tags: list[str] = []
    columns = None

    def flush() -> None:
        nonlocal tokens, tags
        if tokens:
            sentences.append((tokens, tags))
        tokens, tags = [], []

    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not UTF-8 ({err.reason} at byte {err.start} of the line); "
                                 f"save the file as UTF-8.") from None
            if not line.strip():
                flush()
                continue
            if line.startswith("-DOCSTART-"):
                flush()
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            if columns is None:
                columns = len(fields)
                if columns < 2:
                    raise ValueError(f"{path}:{line_no}: one column ({line!r}): a CoNLL file has a token and a tag "
                                     f"on each line.")
            if len(fields) != columns:
                raise ValueError(f"{path}:{line_no}: {len(fields)} column(s) where the file's first line has "
                                 f"{columns} ({line!r}): a token without a tag, a stray column, or another "
                                 f"separator.")
            token, tag = fields[token_column], fields[tag_column].strip()
            if iob and not _IOB_TAG.match(tag):
                raise ValueError(f"{path}:{line_no}: tag {tag!r} is not an IOB tag (O, B-TYPE or I-TYPE).")
            tokens.append(token)
            tags.append(tag)
    flush()
    if not sentences:
        raise ValueError(f"{path} holds no sentences (it is empty, or has only -DOCSTART- lines).")
    return sentences


def _conll_dataset(sentences: list[tuple[list[str], list[str]]], label_list: list[str], path: str) -> Dataset:
    label_to_id = {label: i for i, label in enumerate(label_list)}
    ids = []
    for tokens, tags in sentences:
        try:
            ids.append([label_to_id[tag] for tag in tags])
        except KeyError as err:
            raise ValueError(f"{path}: tag {err.args[0]!r} is not in the label list {label_list}.") from None
    return Dataset.from_dict({"tokens": [s[0] for s in sentences], "ner_tags": ids},
                             features=_token_features(label_list))


def _sort_tags(tags: Iterable[str]) -> list[str]:
    """The tag set sorted, with "O" first (id 0, which the rest of the package takes as "outside")."""
    return ["O"] + sorted({t for t in tags if t != "O"})


def _training_tags(sentences: dict, files: dict[str, str]) -> list[str]:
    """The tags a token model trains with, from the training file only (as run_ner.py): its tags, each entity type
    with both its B- and I- tag, "O" first. A tag of another file whose type the training file lacks is an error
    naming it (a dev-only tag would otherwise become a class the model never sees trained)."""
    source = "train" if "train" in sentences else next(iter(sentences))
    seen = {tag for _, tags in sentences[source] for tag in tags}
    types = {tag[2:] for tag in seen if tag[:2] in ("B-", "I-")}
    label_list = _sort_tags(seen | {f"{prefix}-{t}" for t in types for prefix in "BI"})
    for split, sents in sentences.items():
        unseen = sorted({tag for _, tags in sents for tag in tags} - set(label_list))
        if unseen:
            lower = {tag.lower(): tag for tag in label_list}
            hints = [f"{tag!r} -> {lower[tag.lower()]!r}" for tag in unseen if tag.lower() in lower]
            raise ValueError(
                f"{files[split]}: tag(s) {unseen} do not occur in {files[source]}, whose tags {label_list} are the "
                f"ones the model trains with." + (f" Different case? {', '.join(hints)}." if hints else "")
                + " Pass label_list to name every tag yourself.")
    return label_list


def _read_conll_splits(files: dict[str, str], iob1: bool, token_column: int = 0, tag_column: int = -1) -> dict:
    """split -> sentences; a file named for two splits (MIT: test = validation) is read once."""
    cache: dict[str, list] = {}
    for path in dict.fromkeys(files.values()):
        sentences = read_conll(path, token_column=token_column, tag_column=tag_column)
        cache[path] = [(tokens, iob1_to_iob2(tags)) for tokens, tags in sentences] if iob1 else sentences
    return {split: cache[path] for split, path in files.items()}


@register_reader("conll")
def read_conll_task(spec: TaskSpec, folder: str) -> DatasetDict:
    """CoNLL-style files, one per split (`files`), a token and a tag column (`token_column`, `tag_column`), IOB1
    converted to IOB2 with `iob1`. A missing file is a missing split."""
    options = spec.reader_kwargs
    files = {split: os.path.join(folder, name) for split, name in options["files"].items()}
    files = {split: path for split, path in files.items() if os.path.isfile(path)}
    sentences = _read_conll_splits(files, options.get("iob1", False), options.get("token_column", 0),
                                   options.get("tag_column", -1))
    return DatasetDict({split: _conll_dataset(s, spec.label_list, files[split]) for split, s in sentences.items()})


def load_conll_files(
    train_file: str | None,
    validation_file: str | None = None,
    test_file: str | None = None,
    label_list: list[str] | None = None,
    iob1: bool = False,
) -> tuple[DatasetDict, TaskSpec]:
    """Load your own CoNLL-format files (token in the first column, tag in the last) as `tokens`/`ner_tags`.

    Args:
        train_file, validation_file, test_file: The files; at least one is needed.
        label_list: The tag names in id order. If None, the training file's tags (each type's B- and I- tag), "O"
            first then sorted; another file's tag outside them is an error.
        iob1: Convert IOB1 tags (CoNLL-2003's original scheme) to IOB2.

    Returns:
        The `DatasetDict` (splits train/validation/test, for the files given) and a token-task `TaskSpec` named
        "custom_ner".
    """
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path}
    if not files:
        raise ValueError("load_conll_files needs at least one of train_file, validation_file or test_file.")
    sentences = _read_conll_splits(files, iob1)
    if label_list is None:
        label_list = _training_tags(sentences, files)
    dataset = DatasetDict({split: _conll_dataset(s, label_list, files[split]) for split, s in sentences.items()})
    spec = TaskSpec("custom_ner", kind="token", label_list=list(label_list),
                    validation_splits=("validation",) if "validation" in dataset else (),
                    display_name=os.path.basename(train_file or validation_file or test_file), language=None)
    return dataset, spec


# ---- Hub ------------------------------------------------------------------------------------------------------------
def _label_mapping(source_names: list[str], target_names: list[str], where: str) -> list[int]:
    """For each source label id, the target id with the same name (case-insensitive)."""
    target = {name.lower(): i for i, name in enumerate(target_names)}
    missing = [name for name in source_names if name.lower() not in target]
    if missing:
        raise ValueError(f"{where}: label(s) {missing} have no match in {target_names}.")
    return [target[name.lower()] for name in source_names]


def _normalise_hub(spec: TaskSpec, dataset: DatasetDict) -> DatasetDict:
    """Rename the Hub columns to the local layout and put the labels in this package's label space."""
    text_columns, label_column = spec.hub_columns
    where = f"Hub dataset {'/'.join(spec.hub)}"
    out = {}
    for split, ds in dataset.items():
        missing = [c for c in (*text_columns, label_column) if c not in ds.column_names]
        if missing:
            raise ValueError(f"{where} split {split!r}: missing column(s) {missing}; it has {ds.column_names}.")
        ds = ds.select_columns([*text_columns, label_column])
        feature = ds.features[label_column]
        if spec.kind == "token":
            inner = getattr(feature, "feature", None)
            if isinstance(inner, ClassLabel) and inner.names != spec.label_list:
                mapping = _label_mapping(inner.names, spec.label_list, where)
                ds = ds.map(lambda b: {label_column: [[mapping[t] for t in tags] for tags in b[label_column]]},
                            batched=True)
            if label_column != "ner_tags":
                ds = ds.rename_column(label_column, "ner_tags")
            out[split] = ds.cast(_token_features(spec.label_list))
            continue
        if not spec.is_regression:
            source_names = feature.names if isinstance(feature, ClassLabel) else None
            if source_names is not None and source_names != spec.label_list:
                mapping = _label_mapping(source_names, spec.label_list, where)
                ds = ds.map(lambda b: {label_column: [mapping[x] if x >= 0 else -1 for x in b[label_column]]},
                            batched=True)
            elif source_names is None and feature.dtype == "string":
                ds = ds.map(lambda b: {label_column: [_label_to_id(x, spec, where) for x in b[label_column]]},
                            batched=True)
        renames = dict(zip(text_columns, spec.text_keys))
        if label_column != "label":
            renames[label_column] = "label"
        ds = ds.rename_columns({old: new for old, new in renames.items() if old != new})
        out[split] = ds.cast(_sequence_features(spec))
    return DatasetDict(out)


def _load_from_hub(spec: TaskSpec) -> DatasetDict:
    if spec.hub is None:
        raise ValueError(f"Task {spec.name!r} has no Hub dataset to load.")
    return _normalise_hub(spec, datasets.load_dataset(*spec.hub))


# ---- entry points ---------------------------------------------------------------------------------------------------
def local_path(task: str | TaskSpec, data_dir: str | None = None) -> str:
    """The file or folder a registered task is read from under `data_dir`."""
    spec = get_task(task)
    return os.path.join(resolve_data_dir(data_dir), spec.local_path or spec.name)


def _load_registered(spec: TaskSpec, data_dir: str | None, from_hub: bool | None) -> DatasetDict:
    if from_hub:
        return _load_from_hub(spec)
    data_dir = resolve_data_dir(data_dir)
    path = local_path(spec, data_dir)
    if os.path.exists(path) and spec.reader is not None:
        reader = READERS[spec.reader] if isinstance(spec.reader, str) else spec.reader
        dataset = reader(spec, path)
        if not dataset:
            raise FileNotFoundError(f"{path} exists but holds none of the files of task {spec.name!r}.")
        return dataset
    where = path if os.path.isdir(data_dir) else f"{path} (the data folder {data_dir} itself is missing)"
    if from_hub is None and not _is_offline() and spec.hub is not None:
        try:
            return _load_from_hub(spec)
        except Exception as err:
            raise FileNotFoundError(
                f"Task {spec.name!r}: local data {where} not found, and loading {'/'.join(spec.hub)} from the Hub "
                f"failed ({type(err).__name__}: {err}). Pass data_dir (--data_dir) pointing at the data folder."
            ) from err
    raise FileNotFoundError(
        f"Task {spec.name!r}: local data {where} not found. Pass data_dir (--data_dir) pointing at the folder that "
        f"holds it (or set HF_MULTIENCODER_DATA)"
        + (", or go online (unset HF_HUB_OFFLINE/HF_DATASETS_OFFLINE, or pass from_hub=True / --from_hub) to load "
           "it from the Hub." if spec.hub is not None else "; this task has no Hub copy.")
    )


def load_task(
    task: str | TaskSpec | None = None,
    data_dir: str | None = None,
    from_hub: bool | None = None,
    *,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    task_type: str | None = None,
    label_column: str = "label",
    text_columns: list[str] | None = None,
) -> tuple[DatasetDict, TaskSpec]:
    """Load a registered task, or your own files, as a `DatasetDict` in the normalised layout (module docstring) and
    its `TaskSpec`: the same pair for every kind of task.

    Args:
        task: A registered task name (see `tasks.TASKS`: GLUE, TREC, SICK, CoNLL-2003, WNUT-17, MIT Movie/Restaurant,
            clickbait, ISEAR, Emotion Stimulus, EmoBank, Facebook valence/arousal) or a `TaskSpec`. None: your files.
        data_dir: The data folder (default: see `resolve_data_dir`).
        from_hub: True: load from the Hub with `datasets.load_dataset` (skipping local files). False: local files
            only. None (default): local files, and the Hub only if the task's local files are missing and the
            Hugging Face offline mode is off.
        train_file, validation_file, test_file: Your own files (CSV/TSV/JSON(L), or CoNLL with `task_type="token"`).
        task_type: `"sequence"` (default) or `"token"` for your own files.
        label_column, text_columns: Columns of your own CSV/JSON files (see `load_files`).

    Splits: `train`, the task's `validation_splits` and `test` for the files that exist (QNLI has no local train.tsv).
    Tasks without a dev set (TREC, MIT) give their test file as `validation` too; tasks without a split of their own
    get the original project's (see each task's `description`).
    """
    if task is not None:
        spec = get_task(task)
        return _load_registered(spec, data_dir, from_hub), spec
    if task_type not in (None, "sequence", "token"):
        raise ValueError(f"`task_type` must be 'sequence' or 'token', got {task_type!r}.")
    if task_type == "token":
        return load_conll_files(train_file, validation_file, test_file)
    return load_files(train_file, validation_file, test_file, label_column=label_column, text_columns=text_columns)


_FILE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json"}


def _check_not_empty(path: str, tabular: bool) -> None:
    """An empty file, or a CSV/TSV with a header and no rows, is an error naming it (the parser's own message for
    these says neither the file nor the cause)."""
    with open(path, "rb") as f:
        lines = [line for line in (f.readline() for _ in range(1000)) if line.strip()][:2]
    if not lines:
        raise ValueError(f"Data file {path} is empty.")
    if tabular and len(lines) == 1:
        raise ValueError(f"Data file {path} holds only a header row ({lines[0].decode(errors='replace').strip()!r}) "
                         f"and no data rows.")


def _read_table_files(files: dict[str, str], file_format: str, cache_dir: str | None = None) -> DatasetDict:
    """CSV/TSV/JSON(L) files (split -> path) as a `DatasetDict`; an empty, header-only or unparsable file is an error
    naming it."""
    for path in files.values():
        _check_not_empty(path, tabular=file_format != "json")
    kwargs = {"delimiter": "\t"} if file_format == "tsv" else {}
    builder = "json" if file_format == "json" else "csv"
    try:
        raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **kwargs)
    except Exception as err:  # noqa: BLE001 - datasets wraps the parser's error; name the files and the cause
        _check_same_columns(files, file_format)
        cause = err.__cause__ or err.__context__
        because = f" (caused by {type(cause).__name__}: {cause})" if cause is not None else ""
        raise ValueError(f"Could not read {', '.join(files.values())} as {file_format.upper()}: "
                         f"{type(err).__name__}: {err}{because}. Is a file empty, header-only, or are its rows of "
                         f"different lengths?") from err
    for split, ds in raw.items():
        if len(ds) == 0:
            raise ValueError(f"{files[split]} holds no rows (empty, or a header only).")
    return raw


def _file_columns(path: str, file_format: str) -> list[str] | None:
    """The columns of a CSV/TSV file's header, or the keys of a JSON Lines file's first row (None if unknown)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            if file_format == "json":
                first = json.loads(next(line for line in f if line.strip()))
                return sorted(first) if isinstance(first, dict) else None
            return next(csv.reader(f, delimiter="\t" if file_format == "tsv" else ","))
    except (ValueError, StopIteration, UnicodeDecodeError):
        return None


def _check_same_columns(files: dict[str, str], file_format: str) -> None:
    """Files read together must have the same columns (a test file may leave out the label column): name the file
    that differs, where `datasets` would report a cast error between schemas."""
    columns = {split: _file_columns(path, file_format) for split, path in files.items()}
    reference = next(iter(files))
    for split, cols in columns.items():
        if cols is None or columns[reference] is None or split == reference:
            continue
        fewer = split == "test" and set(cols) < set(columns[reference])  # a test file without labels
        if sorted(cols) != sorted(columns[reference]) and not fewer:
            raise ValueError(f"{files[split]} has the columns {cols} but {files[reference]} has "
                             f"{columns[reference]}: every file needs the same text and label columns (a test file "
                             f"may leave out the label column). Rename the columns to match.")


def _choose_text_columns(reference: Dataset, where: str, label_column: str | None,
                         text_columns: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The text column(s), run_glue.py's way: `text_columns` if given; else `sentence1` (and `sentence2`); else the
    first two string columns that are not the label, or the only one. The choice is logged."""
    # text is what is not the label and holds strings (an `id` column of numbers is no text)
    non_label = [c for c in reference.column_names if c != label_column
                 and getattr(reference.features[c], "dtype", None) in ("string", "large_string")]
    if text_columns:
        text_columns = tuple(text_columns)
        if len(text_columns) > 2:
            raise ValueError(f"`text_columns` takes one or two columns (a sentence or a pair), got {text_columns}.")
        missing = [c for c in text_columns if c not in reference.column_names]
        if missing:
            raise ValueError(f"{where}: no text column(s) {missing}; the columns are {reference.column_names}.")
        return text_columns
    if "sentence1" in non_label:
        text_columns = ("sentence1", "sentence2") if "sentence2" in non_label else ("sentence1",)
    elif len(non_label) >= 2:
        text_columns = tuple(non_label[:2])
    elif non_label:
        text_columns = (non_label[0],)
    else:
        besides = f" besides the label column {label_column!r}" if label_column else ""
        raise ValueError(f"{where}: no text column{besides}; the columns are {reference.column_names}.")
    shape = "a sentence pair" if len(text_columns) == 2 else "one sentence"
    label = f", label column {label_column!r}" if label_column else ""
    logger.warning(f"Text column(s) {list(text_columns)} (read as {shape}){label}; pass text_columns "
                   f"(--text_column_names) to choose others.")
    return text_columns


def load_texts(path: str, text_columns: list[str] | None = None, words_column: str = "tokens",
               cache_dir: str | None = None) -> tuple[list[str], list[str] | None]:
    """The inputs of a CSV/TSV/JSON(L) file to predict, labelled or not: `(texts, text_pairs or None)`.

    Text columns are chosen as in [`load_files`] (a `label` column is never text); a JSON file whose rows hold
    pre-split words in `words_column` (CoNLL-style, as `load_conll_files` returns them) gives those words joined by
    spaces. Every row must hold text."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Data file {path} does not exist.")
    extension = os.path.splitext(path)[1].lower()
    if extension not in _FILE_FORMATS:
        raise ValueError(f"{path}: unsupported extension {extension!r}; use one of {', '.join(_FILE_FORMATS)}.")
    ds = _read_table_files({"test": path}, _FILE_FORMATS[extension], cache_dir)["test"]
    if not text_columns and words_column in ds.column_names and not any(
            c in ds.column_names for c in ("sentence1", "text", "sentence")):
        rows = ds[words_column]
        for i, words in enumerate(rows):
            if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
                raise ValueError(f"{path}: row {i + 1} has no list of words in column {words_column!r} ({words!r}).")
        return [" ".join(words) for words in rows], None
    columns = _choose_text_columns(ds, path, "label" if "label" in ds.column_names else None, text_columns)
    row = 2 if extension in (".csv", ".tsv") else 1
    out = []
    for col in columns:
        values = ds[col]
        for i, text in enumerate(values):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}: row {i + row} has no text in column {col!r} ({text!r}).")
        out.append(values)
    return out[0], (out[1] if len(out) == 2 else None)


def load_files(
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    label_column: str = "label",
    text_columns: list[str] | None = None,
    cache_dir: str | None = None,
) -> tuple[DatasetDict, TaskSpec]:
    """Load your own CSV/TSV/JSON(L) files, with run_glue.py's conventions.

    - Text: `text_columns` if given (one or two names); else the columns `sentence1` (and `sentence2`) if present,
      else the first two non-label columns, or the first one if there is only one (renamed to
      `sentence1`/`sentence2`). The choice is logged.
    - Labels: a float label column means regression; anything else is classification with the label names sorted
      (label id = position in the sorted list). A test file may have no label column (labels become -1).

    Returns:
        The `DatasetDict` (train/validation/test, for the files given) and a `TaskSpec` named "custom".
    """
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path}
    if not files:
        raise ValueError("load_files needs at least one of train_file, validation_file or test_file.")
    if isinstance(text_columns, str):
        text_columns = [text_columns]  # one column named by itself
    formats = set()
    for path in files.values():
        if os.path.isdir(path):
            raise ValueError(f"Data file {path} is a folder: give a CSV/TSV/JSON(L) file inside it (for a registered "
                             f"task's folder, pass its name as the task and the folder above as data_dir).")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Data file {path} does not exist.")
        extension = os.path.splitext(path)[1].lower()
        if extension not in _FILE_FORMATS:
            raise ValueError(f"{path}: unsupported extension {extension!r}; use one of {', '.join(_FILE_FORMATS)}.")
        formats.add(_FILE_FORMATS[extension])
    if len(formats) > 1:
        raise ValueError(f"All data files must have the same format (csv, tsv or json); got {files}.")
    file_format = formats.pop()
    raw = _read_table_files(files, file_format, cache_dir)

    labelled = [split for split in raw if label_column in raw[split].column_names]
    for split in raw:
        if split not in labelled and split != "test":
            raise ValueError(
                f"{files[split]}: no label column {label_column!r}; the columns are {raw[split].column_names}. "
                f"Pass label_column (--label_column_name) naming the label column."
            )
    if not labelled:
        raise ValueError(f"None of the files has the label column {label_column!r}; "
                         f"the columns are {raw[next(iter(raw))].column_names}.")

    reference = raw[labelled[0]]
    text_columns = _choose_text_columns(reference, files[labelled[0]], label_column, text_columns)

    dtype = reference.features[label_column].dtype if isinstance(reference.features[label_column], Value) else None
    is_regression = dtype in ("float16", "float32", "float64")
    label_list = None
    if not is_regression:
        # the labels the model trains with come from the training file (as run_glue.py); other files may not add any
        source = "train" if "train" in labelled else labelled[0]
        label_list = sorted(v for v in raw[source].unique(label_column) if v is not None)
        for split in labelled:
            unseen = sorted(set(v for v in raw[split].unique(label_column) if v is not None) - set(label_list),
                            key=str)
            if unseen:
                lower = {str(v).lower(): v for v in label_list}
                hints = [f"{v!r} -> {lower[str(v).lower()]!r}" for v in unseen if str(v).lower() in lower]
                raise ValueError(
                    f"{files[split]}: label(s) {unseen} do not occur in {files[source]}, whose labels "
                    f"{label_list} are the ones the model trains with."
                    + (f" Different case? {', '.join(hints)}." if hints else ""))
    text_keys = PAIR if len(text_columns) == 2 else SINGLE
    spec = TaskSpec(
        "custom",
        text_keys=text_keys,
        label_list=[str(v) for v in label_list] if label_list is not None else None,
        is_regression=is_regression,
        validation_splits=("validation",) if "validation" in raw else (),
        display_name=os.path.basename(train_file or validation_file or test_file),
        language=None,
    )
    value_to_id = {v: i for i, v in enumerate(label_list)} if label_list is not None else None

    out = {}
    for split, ds in raw.items():
        missing = [c for c in text_columns if c not in ds.column_names]
        if missing:
            raise ValueError(f"{files[split]}: missing text column(s) {missing}; the columns are {ds.column_names}.")
        has_label = label_column in ds.column_names

        def convert(batch, indices, split=split, has_label=has_label):
            n = len(batch[text_columns[0]])
            where = files[split]
            row = 2 if file_format in ("csv", "tsv") else 1  # a file's line number: CSV/TSV rows start after a header
            for key, col in zip(text_keys, text_columns):
                for i, text in zip(indices, batch[col]):
                    if not isinstance(text, str) or not text.strip():
                        raise ValueError(f"{where}: row {i + row} has no text in column {col!r} ({text!r}).")
            out_batch = {key: batch[col] for key, col in zip(text_keys, text_columns)}
            raw_labels = batch[label_column] if has_label else [None] * n
            for i, v in zip(indices, raw_labels):
                if v is None and split != "test":
                    raise ValueError(f"{where}: row {i + row} has no value in the label column {label_column!r}.")
                if is_regression and v is not None and not math.isfinite(float(v)):
                    raise ValueError(f"{where}: row {i + row} has the label {v!r}, not a finite number.")
            if is_regression:
                out_batch["label"] = [-1.0 if v is None else float(v) for v in raw_labels]
            else:
                out_batch["label"] = [-1 if v is None else value_to_id[v] for v in raw_labels]
            return out_batch

        out[split] = ds.map(convert, batched=True, with_indices=True, remove_columns=ds.column_names,
                            features=_sequence_features(spec))
    return DatasetDict(out), spec


# ---- tokenization ---------------------------------------------------------------------------------------------------
def tokenize_task(
    raw: DatasetDict | Dataset,
    spec: TaskSpec,
    tokenizer,
    max_length: int | None = 128,
    padding: bool | str = False,
    add_length: bool = True,
    **map_kwargs,
) -> DatasetDict | Dataset:
    """Tokenize a loaded task for the model: its text columns become the tokenizer's inputs, the label column
    `label` (sequence tasks) or `labels` (token tasks, one per word); the text and raw label columns are removed.

    Works with a `MultiEncoderTokenizer` (per-member inputs; token tasks keep one label per word) and with a plain
    (fast) tokenizer, a one-model baseline for `AutoModelFor...`: for token tasks each word's tag goes on its first
    sub-token and -100 on the rest, as in transformers' token-classification example, and two columns the model does
    not read keep the words for scoring: `word_starts` (each word's first sub-token, -1 for a word cut off by
    `max_length` or with no sub-token) and `word_labels` (every word's tag); `EpochPredictions` reads them.
    `add_length` adds a `length` column (the longest member's length), which `--group_by_length` samplers read and
    `MultiEncoderDataCollator` leaves out of the batch. `map_kwargs` go to `datasets.map` (`desc`, `num_proc`, ...).
    """
    multi = hasattr(tokenizer, "num_encoders")
    if spec.kind == "token" and not multi and not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"Token tasks with one model need a fast tokenizer (its word ids align the tags to "
                         f"sub-tokens); {type(tokenizer).__name__} is not one: load it with "
                         f"AutoTokenizer.from_pretrained(path) (fast by default) or use a MultiEncoderTokenizer.")

    def preprocess(examples):
        if spec.kind == "token":
            enc = tokenizer(examples["tokens"], is_split_into_words=True, truncation=True, max_length=max_length,
                            padding=padding)
            if multi:
                enc["labels"] = examples["ner_tags"]
            else:
                enc["labels"], enc["word_starts"] = [], []
                for i, tags in enumerate(examples["ner_tags"]):
                    word_ids = enc.word_ids(i)
                    starts = [-1] * len(tags)
                    for position, word in enumerate(word_ids):
                        if word is not None and starts[word] < 0:
                            starts[word] = position
                    enc["labels"].append([tags[w] if w is not None and starts[w] == p else -100
                                          for p, w in enumerate(word_ids)])
                    enc["word_starts"].append(starts)
                enc["word_labels"] = examples["ner_tags"]
        else:
            pairs = examples["sentence2"] if spec.is_pair else None
            enc = tokenizer(examples["sentence1"], text_pair=pairs, truncation=True, max_length=max_length,
                            padding=padding)
            enc["label"] = examples["label"]
        enc = dict(enc)
        if add_length:
            enc["length"] = [max(len(ids) for ids in member_ids) if multi else len(member_ids)
                             for member_ids in enc["input_ids"]]
        return enc

    columns = raw.column_names
    columns = columns[next(iter(columns))] if isinstance(columns, dict) else columns
    map_kwargs.setdefault("desc", "Tokenizing for every member" if multi else "Tokenizing")
    return raw.map(preprocess, batched=True, remove_columns=columns, **map_kwargs)


__all__ = [
    "READERS",
    "TaskSpec",
    "get_task",
    "iob1_to_iob2",
    "load_conll_files",
    "load_files",
    "load_task",
    "local_path",
    "read_conll",
    "register_reader",
    "register_task",
    "resolve_data_dir",
    "tokenize_task",
]


# ---- length-grouped sampling ----------------------------------------------------------------------------------------
def uses_length_grouping(training_args) -> bool:
    """Whether the Trainer's length-grouped sampler is on (`group_by_length=True`, or the
    `train_sampling_strategy="group_by_length"` of newer transformers)."""
    return getattr(training_args, "train_sampling_strategy", None) == "group_by_length" or bool(
        getattr(training_args, "group_by_length", False))


def keep_length_column(training_args) -> None:
    """With length-grouped sampling on, keep the `length` column `tokenize_task` adds: the Trainer drops columns the
    model's forward does not name *before* it builds the sampler, which would then measure `len(input_ids)`, for a
    multi-encoder the number of members. (Every other column is a model input; `MultiEncoderDataCollator` leaves
    `length` out of the batch.)"""
    if uses_length_grouping(training_args):
        training_args.remove_unused_columns = False


def length_grouping_kwargs(multi_encoder: bool = True) -> dict:
    """`TrainingArguments` keyword arguments for length-grouped sampling in this transformers version (the option
    was renamed `train_sampling_strategy`), keeping the `length` column for a multi-encoder (`keep_length_column`)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    kwargs = {"train_sampling_strategy": "group_by_length"} if "train_sampling_strategy" in names else {
        "group_by_length": True}
    if multi_encoder:
        kwargs["remove_unused_columns"] = False
    return kwargs
