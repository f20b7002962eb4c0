"""Task registry and dataset loaders: GLUE, TREC, SICK, CoNLL-2003, WNUT-17, and your own files.

Every loader returns a `datasets.DatasetDict` in one normalised layout, whatever the source:

- sequence tasks: `sentence1` (and `sentence2` for pairs) and `label` (a `ClassLabel` id, or a float for
  regression). Unlabelled test rows get label -1, as the Hub's `nyu-mll/glue` does.
- token tasks: `tokens` (list of words) and `ner_tags` (a `Sequence(ClassLabel)`).

Label ids match the Hub datasets (`nyu-mll/glue`, `conll2003`, `wnut_17`), so a model trained from the local files
and one trained from the Hub agree. The local files are read first, from `data_dir` (default: `$HF_MULTIENCODER_DATA`,
else `<repo>/../shared/data`); the layout is the one the original downloads have:

    glue/<CoLA|SST-2|MRPC|STS-B|QQP|MNLI|QNLI|RTE|WNLI>/{train,dev,test}.tsv   (MNLI: dev_matched.tsv, ...)
    trec/train_5500.label, trec/TREC_10.label
    sick/SICK.txt
    conll2003/eng.train, eng.testa, eng.testb
    wnut17/wnut17train.conll, emerging.dev.conll, emerging.test.annotated
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = os.environ.get("HF_MULTIENCODER_DATA") or os.path.normpath(REPO_ROOT / ".." / "shared" / "data")

_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}


def resolve_data_dir(data_dir: str | None = None) -> str:
    """The data folder to read: `data_dir` if given, else `$HF_MULTIENCODER_DATA`, else `<repo>/../shared/data`."""
    if data_dir:
        return os.path.abspath(os.path.expanduser(data_dir))
    env = os.environ.get("HF_MULTIENCODER_DATA")
    return os.path.abspath(os.path.expanduser(env)) if env else DEFAULT_DATA_DIR


def _is_offline() -> bool:
    return any(os.environ.get(var, "").upper() in _TRUE_VALUES for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


# ---- task registry --------------------------------------------------------------------------------------------------
@dataclass
class TaskSpec:
    """What a task is: its kind, its text columns, its labels and the metric it is ranked by.

    Args:
        name: Task name, a key of `TASKS` (or "custom" for your own files).
        kind: "sequence" (one label per sentence or pair) or "token" (one tag per word).
        text_keys: The text columns after loading: `("sentence1",)`, `("sentence1", "sentence2")` or, for token tasks,
            `("tokens",)`.
        label_list: Label names in id order, or None for regression.
        is_regression: Whether the label is a float score.
        main_metric: The metric key the task is ranked by (without `eval_`).
        validation_splits: The split(s) evaluated during training (`("validation",)`; MNLI has two).
        hub: Arguments of `datasets.load_dataset` to fetch the task from the Hub, or None.
    """

    name: str
    kind: str
    text_keys: tuple[str, ...]
    label_list: list[str] | None
    is_regression: bool = False
    main_metric: str = "accuracy"
    validation_splits: tuple[str, ...] = ("validation",)
    hub: tuple[str, ...] | None = None

    @property
    def num_labels(self) -> int:
        """Size of the model head: 1 for regression, else the number of labels."""
        return 1 if self.is_regression else len(self.label_list or [])

    @property
    def is_pair(self) -> bool:
        """Whether the task gives a pair of sentences."""
        return len(self.text_keys) > 1


CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
WNUT17_LABELS = [
    "O",
    "B-corporation",
    "I-corporation",
    "B-creative-work",
    "I-creative-work",
    "B-group",
    "I-group",
    "B-location",
    "I-location",
    "B-person",
    "I-person",
    "B-product",
    "I-product",
]
TREC_COARSE_LABELS = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
# fmt: off
TREC_FINE_LABELS = sorted([
    "ABBR:abb", "ABBR:exp",
    "DESC:def", "DESC:desc", "DESC:manner", "DESC:reason",
    "ENTY:animal", "ENTY:body", "ENTY:color", "ENTY:cremat", "ENTY:currency", "ENTY:dismed", "ENTY:event",
    "ENTY:food", "ENTY:instru", "ENTY:lang", "ENTY:letter", "ENTY:other", "ENTY:plant", "ENTY:product",
    "ENTY:religion", "ENTY:sport", "ENTY:substance", "ENTY:symbol", "ENTY:techmeth", "ENTY:termeq", "ENTY:veh",
    "ENTY:word",
    "HUM:desc", "HUM:gr", "HUM:ind", "HUM:title",
    "LOC:city", "LOC:country", "LOC:mount", "LOC:other", "LOC:state",
    "NUM:code", "NUM:count", "NUM:date", "NUM:dist", "NUM:money", "NUM:ord", "NUM:other", "NUM:perc", "NUM:period",
    "NUM:speed", "NUM:temp", "NUM:volsize", "NUM:weight",
])
# fmt: on
SICK_ENTAILMENT_LABELS = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]

_SINGLE = ("sentence1",)
_PAIR = ("sentence1", "sentence2")
_NLI = ["entailment", "not_entailment"]

TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec("cola", "sequence", _SINGLE, ["unacceptable", "acceptable"], main_metric="matthews_correlation",
                     hub=("nyu-mll/glue", "cola")),
    "sst2": TaskSpec("sst2", "sequence", _SINGLE, ["negative", "positive"], hub=("nyu-mll/glue", "sst2")),
    "mrpc": TaskSpec("mrpc", "sequence", _PAIR, ["not_equivalent", "equivalent"], main_metric="f1",
                     hub=("nyu-mll/glue", "mrpc")),
    "stsb": TaskSpec("stsb", "sequence", _PAIR, None, is_regression=True, main_metric="spearmanr",
                     hub=("nyu-mll/glue", "stsb")),
    "qqp": TaskSpec("qqp", "sequence", _PAIR, ["not_duplicate", "duplicate"], main_metric="f1",
                    hub=("nyu-mll/glue", "qqp")),
    "mnli": TaskSpec("mnli", "sequence", _PAIR, ["entailment", "neutral", "contradiction"],
                     validation_splits=("validation_matched", "validation_mismatched"), hub=("nyu-mll/glue", "mnli")),
    "qnli": TaskSpec("qnli", "sequence", _PAIR, list(_NLI), hub=("nyu-mll/glue", "qnli")),
    "rte": TaskSpec("rte", "sequence", _PAIR, list(_NLI), hub=("nyu-mll/glue", "rte")),
    "wnli": TaskSpec("wnli", "sequence", _PAIR, ["not_entailment", "entailment"], hub=("nyu-mll/glue", "wnli")),
    "trec": TaskSpec("trec", "sequence", _SINGLE, list(TREC_COARSE_LABELS), hub=("CogComp/trec",)),
    "trec_fine": TaskSpec("trec_fine", "sequence", _SINGLE, list(TREC_FINE_LABELS), hub=("CogComp/trec",)),
    "sick_relatedness": TaskSpec("sick_relatedness", "sequence", _PAIR, None, is_regression=True,
                                 main_metric="spearmanr", hub=("RobZamp/sick",)),
    "sick_entailment": TaskSpec("sick_entailment", "sequence", _PAIR, list(SICK_ENTAILMENT_LABELS),
                                hub=("RobZamp/sick",)),
    "conll2003": TaskSpec("conll2003", "token", ("tokens",), list(CONLL2003_LABELS), main_metric="overall_f1",
                          hub=("eriktks/conll2003",)),
    "wnut17": TaskSpec("wnut17", "token", ("tokens",), list(WNUT17_LABELS), main_metric="overall_f1",
                       hub=("leondz/wnut_17",)),
}

_ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "sts_b": "stsb", "wnut_17": "wnut17", "conll": "conll2003"}


def get_task(task_name: str) -> TaskSpec:
    """The `TaskSpec` of a task name (case-insensitive); ValueError listing the known tasks otherwise."""
    key = task_name.strip().lower() if isinstance(task_name, str) else task_name
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        raise ValueError(f"Unknown task {task_name!r}. Known tasks: {', '.join(TASKS)}.")
    return TASKS[key]


# ---- local layouts --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _GlueLayout:
    folder: str
    files: dict[str, str]  # split -> file name
    text_columns: tuple[str, ...]
    label_column: str
    headerless: tuple[str, ...] = ()  # splits whose file has no header line (CoLA train/dev)
    fieldnames: tuple[str, ...] = ()


_STD_FILES = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
_GLUE_LAYOUTS: dict[str, _GlueLayout] = {
    "cola": _GlueLayout("CoLA", _STD_FILES, ("sentence",), "label", headerless=("train", "validation"),
                        fieldnames=("source", "label", "original_label", "sentence")),
    "sst2": _GlueLayout("SST-2", _STD_FILES, ("sentence",), "label"),
    "mrpc": _GlueLayout("MRPC", _STD_FILES, ("#1 String", "#2 String"), "Quality"),
    "stsb": _GlueLayout("STS-B", _STD_FILES, ("sentence1", "sentence2"), "score"),
    "qqp": _GlueLayout("QQP", _STD_FILES, ("question1", "question2"), "is_duplicate"),
    "mnli": _GlueLayout("MNLI", {"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                                 "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                                 "test_mismatched": "test_mismatched.tsv"}, ("sentence1", "sentence2"), "gold_label"),
    "qnli": _GlueLayout("QNLI", _STD_FILES, ("question", "sentence"), "label"),
    "rte": _GlueLayout("RTE", _STD_FILES, ("sentence1", "sentence2"), "label"),
    "wnli": _GlueLayout("WNLI", _STD_FILES, ("sentence1", "sentence2"), "label"),
}

# Column names of the Hub versions: (text columns, label column). Used to normalise `datasets.load_dataset` output.
_HUB_COLUMNS: dict[str, tuple[tuple[str, ...], str]] = {
    "cola": (("sentence",), "label"),
    "sst2": (("sentence",), "label"),
    "mrpc": (("sentence1", "sentence2"), "label"),
    "stsb": (("sentence1", "sentence2"), "label"),
    "qqp": (("question1", "question2"), "label"),
    "mnli": (("premise", "hypothesis"), "label"),
    "qnli": (("question", "sentence"), "label"),
    "rte": (("sentence1", "sentence2"), "label"),
    "wnli": (("sentence1", "sentence2"), "label"),
    "trec": (("text",), "coarse_label"),
    "trec_fine": (("text",), "fine_label"),
    "sick_relatedness": (("sentence_A", "sentence_B"), "relatedness_score"),
    "sick_entailment": (("sentence_A", "sentence_B"), "label"),
    "conll2003": (("tokens",), "ner_tags"),
    "wnut17": (("tokens",), "ner_tags"),
}


def _local_path(task: TaskSpec, data_dir: str) -> str:
    """The file or folder a task is read from under `data_dir`."""
    if task.name in _GLUE_LAYOUTS:
        return os.path.join(data_dir, "glue", _GLUE_LAYOUTS[task.name].folder)
    if task.name.startswith("trec"):
        return os.path.join(data_dir, "trec")
    if task.name.startswith("sick"):
        return os.path.join(data_dir, "sick", "SICK.txt")
    return os.path.join(data_dir, task.name)


# ---- feature helpers ------------------------------------------------------------------------------------------------
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
            return float(value)
        except ValueError:
            raise ValueError(f"{where}: score {value!r} is not a number.") from None
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


# ---- GLUE -----------------------------------------------------------------------------------------------------------
def _read_glue_tsv(path: str, layout: _GlueLayout, headerless: bool) -> list[dict[str, str]]:
    """Rows of a GLUE TSV as dicts, read the way HF's glue loader does (tab separated, `csv.QUOTE_NONE`)."""
    # utf-8-sig drops MRPC's byte-order mark, so its first column is `Quality` and not `\ufeffQuality`.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = list(layout.fieldnames) if headerless else next(reader, None)
        if header is None:
            return []
        rows = []
        for line_no, fields in enumerate(reader, start=1 if headerless else 2):
            if not fields:
                continue
            if len(fields) != len(header):
                raise ValueError(f"{path}:{line_no}: expected {len(header)} tab-separated fields, got {len(fields)}.")
            rows.append(dict(zip(header, fields)))
    return rows


def _load_glue_local(spec: TaskSpec, folder: str) -> DatasetDict:
    layout = _GLUE_LAYOUTS[spec.name]
    splits = {}
    for split, filename in layout.files.items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue  # e.g. QNLI has no train.tsv locally: the split is simply absent
        records = _read_glue_tsv(path, layout, headerless=split in layout.headerless)
        missing = [c for c in layout.text_columns if records and c not in records[0]]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the file has {list(records[0])}.")
        rows = []
        for i, record in enumerate(records):
            texts = tuple(record[c] for c in layout.text_columns)
            label = _label_to_id(record.get(layout.label_column), spec, f"{path} row {i}")
            rows.append((*texts, label))
        splits[split] = _rows_to_dataset(rows, spec)
    return DatasetDict(splits)


# ---- TREC -----------------------------------------------------------------------------------------------------------
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


def _load_trec_local(spec: TaskSpec, folder: str) -> DatasetDict:
    files = {"train": "train_5500.label", "test": "TREC_10.label"}
    splits = {}
    for split, filename in files.items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue
        rows = []
        for i, (fine, text) in enumerate(_read_trec(path)):
            label = fine if spec.name == "trec_fine" else fine.partition(":")[0]
            rows.append((text, _label_to_id(label, spec, f"{path} line {i + 1}")))
        splits[split] = _rows_to_dataset(rows, spec)
    if "test" in splits:
        # TREC has no development set: the test file (TREC_10) also serves as `validation`.
        splits = {**{k: v for k, v in splits.items() if k == "train"}, "validation": splits["test"],
                  "test": splits["test"]}
    return DatasetDict(splits)


# ---- SICK -----------------------------------------------------------------------------------------------------------
_SICK_SPLITS = {"TRAIN": "train", "TRIAL": "validation", "TEST": "test"}


def _load_sick_local(spec: TaskSpec, path: str) -> DatasetDict:
    rows: dict[str, list[tuple]] = {split: [] for split in _SICK_SPLITS.values()}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, record in enumerate(reader):
            where = f"{path} row {i}"
            split = _SICK_SPLITS.get((record.get("SemEval_set") or "").strip())
            if split is None:
                raise ValueError(f"{where}: SemEval_set {record.get('SemEval_set')!r} is not TRAIN, TRIAL or TEST.")
            raw = record["relatedness_score"] if spec.is_regression else record["entailment_label"]
            rows[split].append((record["sentence_A"], record["sentence_B"], _label_to_id(raw, spec, where)))
    return DatasetDict({split: _rows_to_dataset(r, spec) for split, r in rows.items() if r})


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


def read_conll(path: str, token_column: int = 0, tag_column: int = -1) -> list[tuple[list[str], list[str]]]:
    """Read a CoNLL-format file into (tokens, tags) sentences.

    One word per line, columns separated by a tab (if the line has one) or by whitespace; a blank line (or a line
    of whitespace only) ends a sentence; `-DOCSTART-` lines are skipped.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"CoNLL file {path} does not exist.")
    sentences: list[tuple[list[str], list[str]]] = []
    tokens: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        nonlocal tokens, tags
        if tokens:
            sentences.append((tokens, tags))
        tokens, tags = [], []

    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                flush()
                continue
            if line.startswith("-DOCSTART-"):
                flush()
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            try:
                token, tag = fields[token_column], fields[tag_column].strip()
            except IndexError:
                raise ValueError(
                    f"{path}:{line_no}: cannot read token column {token_column} and tag column {tag_column} from "
                    f"{len(fields)} field(s): {line!r}."
                ) from None
            tokens.append(token)
            tags.append(tag)
    flush()
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


def load_conll_files(
    train_file: str | None,
    validation_file: str | None = None,
    test_file: str | None = None,
    label_list: list[str] | None = None,
    iob1: bool = False,
) -> tuple[DatasetDict, list[str]]:
    """Load CoNLL-format files (token in the first column, tag in the last) as `tokens`/`ner_tags` datasets.

    Args:
        train_file, validation_file, test_file: The files; at least one is needed.
        label_list: The tag names in id order. If None, the tags of all files, "O" first then sorted by type.
        iob1: Convert IOB1 tags (CoNLL-2003's original scheme) to IOB2.

    Returns:
        The `DatasetDict` (splits train/validation/test, for the files given) and the label list.
    """
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path}
    if not files:
        raise ValueError("load_conll_files needs at least one of train_file, validation_file or test_file.")
    sentences = {}
    for split, path in files.items():
        sentences[split] = read_conll(path)
        if iob1:
            sentences[split] = [(tokens, iob1_to_iob2(tags)) for tokens, tags in sentences[split]]
    if label_list is None:
        label_list = _sort_tags(tag for sents in sentences.values() for _, tags in sents for tag in tags)
    dataset = DatasetDict({split: _conll_dataset(s, label_list, files[split]) for split, s in sentences.items()})
    return dataset, list(label_list)


_CONLL_LOCAL = {
    "conll2003": ({"train": "eng.train", "validation": "eng.testa", "test": "eng.testb"}, True),
    "wnut17": (
        {"train": "wnut17train.conll", "validation": "emerging.dev.conll", "test": "emerging.test.annotated"},
        False,
    ),
}


def _load_conll_local(spec: TaskSpec, folder: str) -> DatasetDict:
    files, iob1 = _CONLL_LOCAL[spec.name]
    splits = {}
    for split, filename in files.items():
        path = os.path.join(folder, filename)
        if not os.path.isfile(path):
            continue
        sentences = read_conll(path)
        if iob1:
            sentences = [(tokens, iob1_to_iob2(tags)) for tokens, tags in sentences]
        splits[split] = _conll_dataset(sentences, spec.label_list, path)
    return DatasetDict(splits)


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
    text_columns, label_column = _HUB_COLUMNS[spec.name]
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
def load_task(task_name: str, data_dir: str | None = None, from_hub: bool | None = None) -> DatasetDict:
    """Load a benchmark task as a `DatasetDict` in the normalised layout (see the module docstring).

    Args:
        task_name: A key of `TASKS` (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, trec, trec_fine,
            sick_relatedness, sick_entailment, conll2003, wnut17).
        data_dir: The folder holding glue/, trec/, sick/, conll2003/, wnut17/ (default: see `resolve_data_dir`).
        from_hub: True: load from the Hub with `datasets.load_dataset` (skipping local files). False: local files
            only. None (default): local files, and the Hub only if the task's local folder is missing and neither
            `HF_DATASETS_OFFLINE` nor `HF_HUB_OFFLINE` is set.

    Splits: `train`, the task's `validation_splits`, and `test` (MNLI: `test_matched`/`test_mismatched`) for the
    files that exist; a missing file means a missing split (QNLI has no local train.tsv). TREC has no development
    set: its test file (TREC_10) is given both as `validation` and as `test`. SICK uses the `SemEval_set` column:
    TRAIN/TRIAL/TEST -> train/validation/test.
    """
    spec = get_task(task_name)
    if from_hub:
        return _load_from_hub(spec)
    data_dir = resolve_data_dir(data_dir)
    path = _local_path(spec, data_dir)
    if os.path.exists(path):
        if spec.name in _GLUE_LAYOUTS:
            dataset = _load_glue_local(spec, path)
        elif spec.name.startswith("trec"):
            dataset = _load_trec_local(spec, path)
        elif spec.name.startswith("sick"):
            dataset = _load_sick_local(spec, path)
        else:
            dataset = _load_conll_local(spec, path)
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
        f"holds glue/, trec/, sick/, conll2003/ and wnut17/ (or set HF_MULTIENCODER_DATA), or go online "
        f"(unset HF_HUB_OFFLINE/HF_DATASETS_OFFLINE, or pass from_hub=True / --from_hub) to load it from the Hub."
    )


_FILE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json"}


def load_files(
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    label_column: str = "label",
    cache_dir: str | None = None,
) -> tuple[DatasetDict, TaskSpec]:
    """Load your own CSV/TSV/JSON(L) files, with run_glue.py's conventions.

    - Text: the columns `sentence1` (and `sentence2`) if present, else the first two non-label columns, or the
      first one if there is only one (renamed to `sentence1`/`sentence2`).
    - Labels: a float label column means regression; anything else is classification with the label names sorted
      (label id = position in the sorted list). A test file may have no label column (labels become -1).

    Returns:
        The `DatasetDict` (train/validation/test, for the files given) and a `TaskSpec` named "custom".
    """
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    files = {split: path for split, path in files.items() if path}
    if not files:
        raise ValueError("load_files needs at least one of train_file, validation_file or test_file.")
    formats = set()
    for path in files.values():
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Data file {path} does not exist.")
        extension = os.path.splitext(path)[1].lower()
        if extension not in _FILE_FORMATS:
            raise ValueError(f"{path}: unsupported extension {extension!r}; use one of {', '.join(_FILE_FORMATS)}.")
        formats.add(_FILE_FORMATS[extension])
    if len(formats) > 1:
        raise ValueError(f"All data files must have the same format (csv, tsv or json); got {files}.")
    file_format = formats.pop()
    kwargs = {"delimiter": "\t"} if file_format == "tsv" else {}
    builder = "json" if file_format == "json" else "csv"
    raw = datasets.load_dataset(builder, data_files=files, cache_dir=cache_dir, **kwargs)

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
    non_label = [c for c in reference.column_names if c != label_column]
    if "sentence1" in non_label:
        text_columns = ("sentence1", "sentence2") if "sentence2" in non_label else ("sentence1",)
    elif len(non_label) >= 2:
        text_columns = tuple(non_label[:2])
    elif non_label:
        text_columns = (non_label[0],)
    else:
        raise ValueError(f"{files[labelled[0]]}: no text column besides the label column {label_column!r}.")

    dtype = reference.features[label_column].dtype if isinstance(reference.features[label_column], Value) else None
    is_regression = dtype in ("float16", "float32", "float64")
    label_list = None
    if not is_regression:
        values = set()
        for split in labelled:
            values.update(v for v in raw[split].unique(label_column) if v is not None)
        label_list = sorted(values)
    text_keys = _PAIR if len(text_columns) == 2 else _SINGLE
    spec = TaskSpec(
        name="custom",
        kind="sequence",
        text_keys=text_keys,
        label_list=[str(v) for v in label_list] if label_list is not None else None,
        is_regression=is_regression,
        main_metric="spearmanr" if is_regression else "accuracy",
        validation_splits=("validation",) if "validation" in raw else (),
        hub=None,
    )
    value_to_id = {v: i for i, v in enumerate(label_list)} if label_list is not None else None

    out = {}
    for split, ds in raw.items():
        missing = [c for c in text_columns if c not in ds.column_names]
        if missing:
            raise ValueError(f"{files[split]}: missing text column(s) {missing}; the columns are {ds.column_names}.")
        has_label = label_column in ds.column_names

        def convert(batch, split=split, has_label=has_label):
            n = len(batch[text_columns[0]])
            out_batch = {key: batch[col] for key, col in zip(text_keys, text_columns)}
            raw_labels = batch[label_column] if has_label else [None] * n
            if any(v is None for v in raw_labels) and split != "test":
                raise ValueError(f"{files[split]}: some rows have no value in the label column {label_column!r}.")
            if is_regression:
                out_batch["label"] = [-1.0 if v is None else float(v) for v in raw_labels]
            else:
                out_batch["label"] = [-1 if v is None else value_to_id[v] for v in raw_labels]
            return out_batch

        out[split] = ds.map(convert, batched=True, remove_columns=ds.column_names, features=_sequence_features(spec))
    return DatasetDict(out), spec
