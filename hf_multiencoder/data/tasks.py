"""The task registry: one [`TaskSpec`] per task, holding everything the package knows about it.

A task's kind, text columns, labels, metric, display name, where its local files are and how to read them, and the
Hub dataset it mirrors all live in its one entry below, so adding a task is one `register_task(...)` call (plus a
reader in `data/loading.py` if the file format is new). Everything else (the loaders, the metrics,
`run_glue_multi.py`, the model card, the sweeps and the benchmarks) reads the entry::

    from hf_multiencoder import TaskSpec, register_task

    register_task(TaskSpec(
        "my_reviews", text_keys=("sentence1",), label_list=["neg", "pos"], reader="labelled_csv",
        local_path="my_reviews", reader_kwargs={"file": "reviews.csv", "text_column": "review",
                                                "label_column": "stars", "dev_per_label": 100},
    ))

This module is pure data (no `datasets` import): readers are named here and implemented in `data/loading.py`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Metric family -> the metric a task of that family is ranked by. `metrics.py` computes each family.
METRIC_FAMILIES: dict[str, str] = {
    "accuracy": "accuracy",
    "accuracy_f1": "f1",  # binary F1 of the positive class (label id 1), as GLUE's MRPC/QQP
    "accuracy_macro_f1": "accuracy",  # multi-class: accuracy, plus macro-averaged F1
    "matthews": "matthews_correlation",
    "correlation": "spearmanr",
    "seqeval": "overall_f1",
}
# How tables print a main metric.
METRIC_DISPLAY_NAMES: dict[str, str] = {
    "accuracy": "accuracy",
    "f1": "F1",
    "matthews_correlation": "MCC",
    "spearmanr": "Spearman",
    "overall_f1": "entity F1",
}
TASK_KINDS = ("sequence", "token")


@dataclass
class TaskSpec:
    """What a task is and where its data comes from.

    Args:
        name: The registry key (lower case), e.g. `"cola"`.
        kind: `"sequence"` (a label per sentence or pair) or `"token"` (a tag per word).
        text_keys: The text columns after loading: `("sentence1",)`, `("sentence1", "sentence2")`, or `("tokens",)`
            for token tasks.
        label_list: Label names in id order; None for regression.
        is_regression: Whether the label is a float score.
        metric: The metric family (a key of `METRIC_FAMILIES`); default `correlation` for regression, `seqeval` for
            token tasks, else `accuracy`.
        main_metric: The metric key the task is ranked by (without `eval_`); default: the family's.
        validation_splits: The split(s) evaluated during training (MNLI has two).
        reader: How the local files are read: the name of a reader in `data.loading.READERS` (`"glue"`, `"trec"`,
            `"sick"`, `"conll"`, `"clickbait"`, `"labelled_csv"`, `"emobank"`, `"fb_va"`) or a callable
            `(spec, path) -> DatasetDict`.
        local_path: The file or folder under the data folder (`--data_dir`) the reader gets.
        reader_kwargs: The reader's options: file names, column names, splits.
        hub_id, hub_config: The `datasets.load_dataset` arguments of the same data on the Hub (None: not on the Hub).
        hub_columns: `(text columns, label column)` of the Hub version, renamed to `text_keys` and `label`/`ner_tags`.
        display_name: How cards and tables name the data set, e.g. `"GLUE CoLA"`.
        language: The data's language (model cards).
        description: Provenance and split notes (shown by `describe()`).
    """

    name: str
    kind: str = "sequence"
    text_keys: tuple[str, ...] = ("sentence1",)
    label_list: list[str] | None = None
    is_regression: bool = False
    metric: str | None = None
    main_metric: str | None = None
    validation_splits: tuple[str, ...] = ("validation",)
    reader: str | Callable[..., Any] | None = None
    local_path: str | None = None
    reader_kwargs: dict[str, Any] = field(default_factory=dict)
    hub_id: str | None = None
    hub_config: str | None = None
    hub_columns: tuple[tuple[str, ...], str] | None = None
    display_name: str | None = None
    language: str | None = "en"
    description: str = ""

    def __post_init__(self):
        if self.kind not in TASK_KINDS:
            raise ValueError(f"Task {self.name!r}: kind must be one of {TASK_KINDS}, got {self.kind!r}.")
        self.text_keys = tuple(self.text_keys)
        if self.kind == "token":
            self.text_keys = ("tokens",)
        elif self.text_keys not in (("sentence1",), ("sentence1", "sentence2")):
            raise ValueError(f"Task {self.name!r}: text_keys must be ('sentence1',) or ('sentence1', 'sentence2'), "
                             f"got {self.text_keys}.")
        if self.label_list is not None:
            self.label_list = [str(label) for label in self.label_list]
        if self.is_regression == (self.label_list is not None):
            raise ValueError(f"Task {self.name!r}: give a label_list for classification, none for regression.")
        if self.metric is None:
            self.metric = "correlation" if self.is_regression else "seqeval" if self.kind == "token" else "accuracy"
        if self.metric not in METRIC_FAMILIES:
            raise ValueError(f"Task {self.name!r}: unknown metric family {self.metric!r}; known: "
                             f"{', '.join(METRIC_FAMILIES)}.")
        if self.main_metric is None:
            self.main_metric = METRIC_FAMILIES[self.metric]
        self.validation_splits = tuple(self.validation_splits)

    @property
    def num_labels(self) -> int:
        """Size of the model head: 1 for regression, else the number of labels."""
        return 1 if self.is_regression else len(self.label_list or [])

    @property
    def is_pair(self) -> bool:
        """Whether the task gives a pair of sentences."""
        return len(self.text_keys) > 1

    @property
    def form(self) -> str:
        """What the task reads and predicts, for display: `"token"`, `"regression"`, `"pair"` or
        `"single-sentence"` (`kind` is the field that chooses the model: `"sequence"` or `"token"`)."""
        if self.kind == "token":
            return "token"
        if self.is_regression:
            return "regression"
        return "pair" if self.is_pair else "single-sentence"

    @property
    def task_type(self) -> str:
        """The earlier name of `form` (kept for code that reads it)."""
        return self.form

    @property
    def label_key(self) -> str:
        """The label column after loading: `ner_tags` for token tasks, else `label`."""
        return "ner_tags" if self.kind == "token" else "label"

    @property
    def hub(self) -> tuple[str, ...] | None:
        """`datasets.load_dataset` positional arguments for the Hub version, or None."""
        if self.hub_id is None:
            return None
        return (self.hub_id, self.hub_config) if self.hub_config else (self.hub_id,)

    @property
    def metric_display_name(self) -> str:
        return METRIC_DISPLAY_NAMES.get(self.main_metric, self.main_metric)

    def describe(self) -> str:
        labels = "regression" if self.is_regression else f"{len(self.label_list)} labels"
        head = f"{self.name}: {self.display_name or self.name} ({self.form}, {labels}, {self.main_metric})"
        return f"{head}\n{self.description}" if self.description else head


TASKS: dict[str, TaskSpec] = {}
_ALIASES: dict[str, str] = {}


def register_task(spec: TaskSpec, aliases: tuple[str, ...] = (), overwrite: bool = False) -> TaskSpec:
    """Add a task to the registry (as peft's `register_peft_method` adds a method).

    Afterwards `load_task(spec.name)`, the metrics and the model card know it; the run scripts know it with
    `--task_module <the module that registers it> --task_name <name>`.
    Raises a `ValueError` if the name (or an alias) is taken, unless `overwrite=True`.
    """
    if not isinstance(spec, TaskSpec):
        raise TypeError(f"register_task takes a TaskSpec, got {type(spec).__name__}.")
    key = spec.name.strip().lower()
    if key != spec.name:
        raise ValueError(f"Task names are lower case without surrounding spaces: {spec.name!r}.")
    names = [key, *(a.lower() for a in aliases)]
    taken = [n for n in names if (n in TASKS or n in _ALIASES) and not overwrite]
    if taken:
        raise ValueError(f"Task name(s) {taken} are already registered; pass overwrite=True to replace them.")
    TASKS[key] = spec
    for alias in aliases:
        _ALIASES[alias.lower()] = key
    return spec


def import_task_modules(modules: list[str] | str | None) -> None:
    """Import the Python modules (dotted names, or `.py` files) that register tasks of their own with
    `register_task`, so that the run scripts' `--task_module my_tasks --task_name my_task` know them."""
    import importlib
    import importlib.util
    import os
    import sys

    for module in [modules] if isinstance(modules, str) else (modules or []):
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise ValueError(f"--task_module {module}: no such file.")
            name = os.path.splitext(os.path.basename(module))[0]
            spec = importlib.util.spec_from_file_location(name, module)
            loaded = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(name, loaded)
            spec.loader.exec_module(loaded)
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name and module.startswith(err.name):
                raise ValueError(f"--task_module {module}: no such module ({err}); give a module on the Python "
                                 f"path (PYTHONPATH, or the current folder) or a .py file.") from None
            raise


def get_task(task_name: str | TaskSpec) -> TaskSpec:
    """The `TaskSpec` of a task name (case-insensitive, aliases such as `sst-2` accepted); a `TaskSpec` passes through.
    Unknown names raise a `ValueError` listing the known tasks."""
    if isinstance(task_name, TaskSpec):
        return task_name
    key = task_name.strip().lower() if isinstance(task_name, str) else task_name
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        close = difflib.get_close_matches(str(key), [*TASKS, *_ALIASES], n=1, cutoff=0.6)
        meant = f" Did you mean {_ALIASES.get(close[0], close[0])!r}?" if close else ""
        raise ValueError(f"Unknown task {task_name!r}.{meant} Known tasks: {', '.join(TASKS)}; for your own files, "
                         f"pass train_file=... (--train_file) instead of a task name.")
    return TASKS[key]


# ---- label lists ----------------------------------------------------------------------------------------------------
CONLL2003_LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
WNUT17_TYPES = ["corporation", "creative-work", "group", "location", "person", "product"]
MIT_MOVIE_TRIVIA_TYPES = ["Actor", "Award", "Character_Name", "Director", "Genre", "Opinion", "Origin", "Plot",
                          "Quote", "Relationship", "Soundtrack", "Year"]
MIT_MOVIE_ENG_TYPES = ["ACTOR", "CHARACTER", "DIRECTOR", "GENRE", "PLOT", "RATING", "RATINGS_AVERAGE", "REVIEW",
                       "SONG", "TITLE", "TRAILER", "YEAR"]
MIT_RESTAURANT_TYPES = ["Amenity", "Cuisine", "Dish", "Hours", "Location", "Price", "Rating", "Restaurant_Name"]


def bio_labels(entity_types: list[str]) -> list[str]:
    """`O`, then `B-X`, `I-X` for each type in the given order (the layout of the Hub's NER datasets)."""
    return ["O"] + [f"{prefix}-{t}" for t in entity_types for prefix in ("B", "I")]


WNUT17_LABELS = bio_labels(WNUT17_TYPES)
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
ISEAR_LABELS = ["anger", "disgust", "fear", "guilt", "joy", "sadness", "shame"]
EMOTION_STIMULUS_LABELS = ["anger", "disgust", "fear", "happy", "sad", "shame", "surprise"]

SINGLE = ("sentence1",)
PAIR = ("sentence1", "sentence2")
_NLI = ["entailment", "not_entailment"]


# ---- GLUE -----------------------------------------------------------------------------------------------------------
_GLUE_FILES = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}


def _glue(name: str, folder: str, label_list, columns, label_column, hub_columns, metric=None, display=None,
          **kwargs) -> TaskSpec:
    """A GLUE task: its local TSV layout (read with `csv.QUOTE_NONE`, as HF's glue loader) and `nyu-mll/glue`."""
    options = {"files": dict(kwargs.pop("files", _GLUE_FILES)), "columns": tuple(columns),
               "label_column": label_column}
    for key in ("headerless", "fieldnames"):
        if key in kwargs:
            options[key] = tuple(kwargs.pop(key))
    return TaskSpec(
        name, text_keys=PAIR if len(columns) == 2 else SINGLE, label_list=label_list,
        is_regression=label_list is None, metric=metric, reader="glue", local_path=f"glue/{folder}",
        reader_kwargs=options, hub_id="nyu-mll/glue", hub_config=name, hub_columns=(tuple(hub_columns), "label"),
        display_name=display or f"GLUE {folder}", **kwargs,
    )


for _spec in (
    _glue("cola", "CoLA", ["unacceptable", "acceptable"], ("sentence",), "label", ("sentence",), metric="matthews",
          headerless=("train", "validation"), fieldnames=("source", "label", "original_label", "sentence"),
          description="CoLA v1.0 as GLUE ships it; train/dev files have no header."),
    _glue("sst2", "SST-2", ["negative", "positive"], ("sentence",), "label", ("sentence",)),
    _glue("mrpc", "MRPC", ["not_equivalent", "equivalent"], ("#1 String", "#2 String"), "Quality",
          ("sentence1", "sentence2"), metric="accuracy_f1"),
    _glue("stsb", "STS-B", None, ("sentence1", "sentence2"), "score", ("sentence1", "sentence2")),
    _glue("qqp", "QQP", ["not_duplicate", "duplicate"], ("question1", "question2"), "is_duplicate",
          ("question1", "question2"), metric="accuracy_f1"),
    _glue("mnli", "MNLI", ["entailment", "neutral", "contradiction"], ("sentence1", "sentence2"), "gold_label",
          ("premise", "hypothesis"), validation_splits=("validation_matched", "validation_mismatched"),
          files={"train": "train.tsv", "validation_matched": "dev_matched.tsv",
                 "validation_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                 "test_mismatched": "test_mismatched.tsv"}),
    _glue("qnli", "QNLI", list(_NLI), ("question", "sentence"), "label", ("question", "sentence")),
    _glue("rte", "RTE", list(_NLI), ("sentence1", "sentence2"), "label", ("sentence1", "sentence2")),
    _glue("wnli", "WNLI", ["not_entailment", "entailment"], ("sentence1", "sentence2"), "label",
          ("sentence1", "sentence2")),
):
    register_task(_spec, aliases={"sst2": ("sst-2",), "stsb": ("sts-b", "sts_b")}.get(_spec.name, ()))


# ---- TREC, SICK -----------------------------------------------------------------------------------------------------
_TREC_NOTE = ("TREC (Li & Roth 2002): train_5500 -> train; TREC_10 -> test, also given as validation (TREC has no dev "
              "set). Latin-1 text.")
register_task(TaskSpec(
    "trec", label_list=TREC_COARSE_LABELS, reader="trec", local_path="trec", reader_kwargs={"fine": False},
    hub_id="CogComp/trec", hub_columns=(("text",), "coarse_label"), display_name="TREC (coarse)",
    description=_TREC_NOTE))
register_task(TaskSpec(
    "trec_fine", label_list=TREC_FINE_LABELS, reader="trec", local_path="trec", reader_kwargs={"fine": True},
    hub_id="CogComp/trec", hub_columns=(("text",), "fine_label"), display_name="TREC (fine)", description=_TREC_NOTE))
_SICK_NOTE = "SICK: splits from the SemEval_set column (TRAIN/TRIAL/TEST -> train/validation/test)."
register_task(TaskSpec(
    "sick_relatedness", text_keys=PAIR, is_regression=True, reader="sick", local_path="sick/SICK.txt",
    reader_kwargs={"label_column": "relatedness_score"}, hub_id="RobZamp/sick",
    hub_columns=(("sentence_A", "sentence_B"), "relatedness_score"), display_name="SICK (relatedness)",
    description=_SICK_NOTE))
register_task(TaskSpec(
    "sick_entailment", text_keys=PAIR, label_list=SICK_ENTAILMENT_LABELS, reader="sick", local_path="sick/SICK.txt",
    reader_kwargs={"label_column": "entailment_label"}, hub_id="RobZamp/sick",
    hub_columns=(("sentence_A", "sentence_B"), "label"), display_name="SICK (entailment)", description=_SICK_NOTE))


# ---- NER (CoNLL-style files) ----------------------------------------------------------------------------------------
register_task(TaskSpec(
    "conll2003", kind="token", label_list=CONLL2003_LABELS, reader="conll", local_path="conll2003",
    reader_kwargs={"files": {"train": "eng.train", "validation": "eng.testa", "test": "eng.testb"}, "iob1": True},
    hub_id="eriktks/conll2003", hub_columns=(("tokens",), "ner_tags"), display_name="CoNLL-2003",
    description="CoNLL-2003 English: eng.train/testa/testb; IOB1 tags converted to IOB2 (the Hub's ids)."),
    aliases=("conll",))
register_task(TaskSpec(
    "wnut17", kind="token", label_list=WNUT17_LABELS, reader="conll", local_path="wnut17",
    reader_kwargs={"files": {"train": "wnut17train.conll", "validation": "emerging.dev.conll",
                             "test": "emerging.test.annotated"}},
    hub_id="leondz/wnut_17", hub_columns=(("tokens",), "ner_tags"), display_name="WNUT-17",
    description="WNUT-17 emerging entities: the official train/dev/test files."), aliases=("wnut_17",))
register_task(TaskSpec(
    "mit_movie", kind="token", label_list=bio_labels(MIT_MOVIE_TRIVIA_TYPES), reader="conll", local_path="mit_movie",
    reader_kwargs={"files": {"train": "trivia10k13train.bio", "validation": "trivia10k13test.bio",
                             "test": "trivia10k13test.bio"}, "token_column": 1, "tag_column": 0},
    display_name="MIT Movie (trivia10k13)",
    description="MIT Movie trivia10k13 (Liu et al. 2013), the corpus the original project used: its official "
                "train/test split; the test file is also the validation set (no dev set), as the original did. "
                "Files are TAG<TAB>word. Every sentence is read (7816/1953; the original dropped each file's last).",
))
register_task(TaskSpec(
    "mit_movie_eng", kind="token", label_list=bio_labels(MIT_MOVIE_ENG_TYPES), reader="conll",
    local_path="mit_movie", reader_kwargs={"files": {"train": "engtrain.bio", "validation": "engtest.bio",
                                                     "test": "engtest.bio"}, "token_column": 1, "tag_column": 0},
    display_name="MIT Movie (eng)",
    description="MIT Movie eng corpus (not used by the original project): official train/test; test = validation."))
register_task(TaskSpec(
    "mit_restaurant", kind="token", label_list=bio_labels(MIT_RESTAURANT_TYPES), reader="conll",
    local_path="mit_restaurant", reader_kwargs={"files": {"train": "restauranttrain.bio",
                                                          "validation": "restauranttest.bio",
                                                          "test": "restauranttest.bio"},
                                                "token_column": 1, "tag_column": 0},
    display_name="MIT Restaurant",
    description="MIT Restaurant (Liu et al. 2013): official train/test split; the test file is also the validation "
                "set (no dev set), as the original project did. Files are TAG<TAB>word."))


# ---- the original project's text classification and regression corpora ---------------------------------------------
register_task(TaskSpec(
    "clickbait", label_list=["non_clickbait", "clickbait"], reader="clickbait", local_path="clickbait",
    reader_kwargs={"files": {"clickbait": "clickbait_data.gz", "non_clickbait": "non_clickbait_data.gz"},
                   "dev_per_label": 2000},
    display_name="Clickbait headlines (Chakraborty et al. 2016)",
    description="No official split. The original project's: validation = the first 2000 headlines of each class in "
                "file order (clickbait file first), train = the other 28000; no test set. The original then "
                "shuffled both unseeded; here they keep file order (the Trainer shuffles training batches)."))
register_task(TaskSpec(
    "isear", label_list=ISEAR_LABELS, reader="labelled_csv", local_path="isear",
    reader_kwargs={"file": "isear.csv", "text_column": "Text", "label_column": "Emotion", "dev_per_label": 180},
    display_name="ISEAR",
    description="No official split. The original project's: validation = the first 180 rows of each emotion in file "
                "order (1260); train = the rows not in validation (6196: later duplicates of validation rows are "
                "dropped too); no test set."))
register_task(TaskSpec(
    "emotion_stimulus", label_list=EMOTION_STIMULUS_LABELS, metric="accuracy_macro_f1", reader="labelled_csv",
    local_path="emotion_stimulus",
    reader_kwargs={"file": "emotion-stimulus.csv", "text_column": "Text", "label_column": "Emotion",
                   "dev_per_label": 30, "skip_rows": 820},
    display_name="Emotion Stimulus (Ghazi et al. 2015)",
    description="The 'No Cause' part only (CSV rows 821-2414, 1594 sentences), as the original project used. No "
                "official split. The original's: validation = the first 30 per emotion (210), train = the rest "
                "(1384); no test set."))
_EMOBANK_NOTE = ("EmoBank (Buechel & Hahn 2017): the official train/dev/test split (8062/1000/1000) of the `split` "
                 "column; the target is the mean reader+writer rating in [1, 5]. Note: the original project's loader "
                 "wrote its test set from the dev rows (dev used as test by mistake); here test is the real test.")
for _name, _column, _what in (("emobank", "V", "valence"), ("emobank_arousal", "A", "arousal"),
                              ("emobank_dominance", "D", "dominance")):
    register_task(TaskSpec(
        _name, is_regression=True, reader="emobank", local_path="emobank/emobank.csv",
        reader_kwargs={"target": _column}, display_name=f"EmoBank ({_what})", description=_EMOBANK_NOTE))
_FB_NOTE = ("Facebook valence/arousal (Preotiuc-Pietro et al. 2016). No official split. The original project's: "
            "tabs removed from the messages, empty ones dropped (2894 left); validation = the first 800, train = the "
            "other 2094; no test set. The target is the first annotator's rating (1-9), as the original used.")
for _name, _column, _what in (("fb_va", "Valence1", "valence"), ("fb_va_arousal", "Arousal1", "arousal")):
    register_task(TaskSpec(
        _name, is_regression=True, reader="fb_va", local_path="fb_va/dataset-fb-valence-arousal-anon.csv",
        reader_kwargs={"target": _column, "dev_size": 800}, display_name=f"Facebook posts ({_what})",
        description=_FB_NOTE))

del _spec, _name, _column, _what

__all__ = [
    "METRIC_FAMILIES",
    "TASKS",
    "import_task_modules",
    "TaskSpec",
    "bio_labels",
    "get_task",
    "register_task",
]
