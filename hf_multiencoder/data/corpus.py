"""Unlabelled text for continued pretraining (domain- or task-adaptive, Gururangan et al. 2020): read it, hold part of
it out, tokenize it for one member.

A corpus is a `datasets.DatasetDict` with a `train` and a `validation` split and one column, `text`. It is built from
any mix of sources::

    from hf_multiencoder.data.corpus import load_corpus, tokenize_corpus

    corpus = load_corpus(["questions.txt", "forum.csv"], text_column="body")   # .txt: a text per line
    corpus = load_corpus(task="rte")            # a registered task's training texts (both sides of a pair)
    blocks = tokenize_corpus(corpus, tokenizer, max_seq_length=128, line_by_line=False)   # packed blocks

Sources: `.txt` files (one text per line, blank lines skipped); CSV/TSV/JSON(L) files with one or more text columns
(`text_column`; every column's texts are separate texts, so both sides of a pair each count); the training split of a
registered task (`task`, labels ignored; a token task's words are joined by spaces). The held-out split is
`validation_files`, else a seeded random `validation_split` of the texts. Exact duplicates are dropped first
(`deduplicate`), so no held-out text is also a training text.

Training side (`datasets`): not shipped with the weights. The masked-LM adaptation (`adaptation.py`) reads its text
here, and so can any other pretraining objective.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain

from datasets import Dataset, DatasetDict

from .loading import _FILE_FORMATS, _read_table_files, load_task
from .tasks import TaskSpec

logger = logging.getLogger(__name__)

TEXT_COLUMN = "text"
# Columns a CSV/JSON file's text is taken from when `text_column` is not given (the first that exists).
DEFAULT_TEXT_COLUMNS = (("text",), ("sentence1", "sentence2"), ("sentence",))


def _as_list(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _causes(err: BaseException) -> list[BaseException]:
    chain = []
    while err is not None and err not in chain:
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


def _not_utf8(path: str) -> str:
    """The message for a text file that is not UTF-8, naming the first line that is not."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                return (f"{path}, line {number}: not UTF-8 (byte {line[err.start:err.start + 1]!r} at column "
                        f"{err.start + 1}). Save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT`) and "
                        f"give that one.")
    return f"{path}: not UTF-8. Save the file as UTF-8 and give that one."


def read_text_file(path: str, text_column: str | list[str] | None = None) -> list[str]:
    """The texts of one file: a `.txt` file's non-blank lines, or a CSV/TSV/JSON(L) file's text column(s).

    Without `text_column`, a table's texts come from `text`, else `sentence1` (+ `sentence2`), else `sentence`, else
    its only column. Several columns give several texts per row (both sides of a pair). Empty cells are skipped.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Text file {path} does not exist.")
    extension = os.path.splitext(path)[1].lower()
    if extension == ".txt":
        try:
            with open(path, encoding="utf-8") as f:
                return [line.strip() for line in f if line.strip()]
        except UnicodeDecodeError:
            raise ValueError(_not_utf8(path)) from None
    if extension not in _FILE_FORMATS:
        raise ValueError(f"{path}: unsupported extension {extension!r}; use .txt (a text per line) or one of "
                         f"{', '.join(_FILE_FORMATS)} with a text column.")
    try:  # the task readers' own: an empty, header-only or unparsable file is an error naming it
        table = _read_table_files({"train": path}, _FILE_FORMATS[extension])["train"]
    except ValueError as err:
        if not any(isinstance(e, UnicodeDecodeError) for e in _causes(err)):
            raise
        raise ValueError(_not_utf8(path)) from None
    columns = _as_list(text_column)
    if not columns:
        found = [c for c in DEFAULT_TEXT_COLUMNS if c[0] in table.column_names]
        if found:
            columns = [c for c in found[0] if c in table.column_names]
        elif len(table.column_names) == 1:
            columns = list(table.column_names)
        else:
            raise ValueError(f"{path}: which column holds the text? The columns are {table.column_names}; pass "
                             f"text_column (--text_column).")
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: no text column {missing[0]!r}; the columns are {table.column_names}.")
    texts = []
    for column in columns:
        texts.extend(str(t).strip() for t in table[column] if t is not None and str(t).strip())
    return texts


def task_texts(task: str | TaskSpec | None = None, data_dir: str | None = None, split: str = "train",
               dataset: Dataset | None = None) -> list[str]:
    """A task's texts, labels ignored: every text column of `split` (both sides of a pair), or each sentence's words
    joined by spaces for token tasks. Give `dataset` (a split already loaded with `load_task`) and the task to
    skip reading it again."""
    spec = task
    if dataset is None:
        if task is None:
            raise ValueError("task_texts needs a task or a loaded dataset.")
        raw, spec = load_task(task, data_dir=data_dir)
        if split not in raw:
            raise ValueError(f"Task {spec.name!r} has no {split!r} split; it has {list(raw)}.")
        dataset = raw[split]
    if not isinstance(spec, TaskSpec):
        raise ValueError("task_texts needs the TaskSpec of the loaded dataset.")
    if spec.kind == "token":
        return [" ".join(words) for words in dataset["tokens"] if words]
    return [t.strip() for key in spec.text_keys for t in dataset[key] if t and t.strip()]


def build_corpus(
    texts: Iterable[str],
    validation_texts: Iterable[str] | None = None,
    validation_split: float = 0.1,
    deduplicate: bool = True,
    seed: int = 42,
    max_texts: int | None = None,
    source: str = "the corpus",
) -> DatasetDict:
    """A corpus (`train`/`validation`, column `text`) from texts in memory: duplicates dropped (in order), at most
    `max_texts` kept (a seeded sample), and a seeded random `validation_split` held out unless `validation_texts`
    are given."""
    def kept(values: Iterable[str]) -> list[str]:
        values = [t for t in values if t]
        return list(dict.fromkeys(values)) if deduplicate else values

    texts = kept(texts)
    if not texts:
        raise ValueError(f"{source} holds no text (no non-empty line or cell).")
    train = Dataset.from_dict({TEXT_COLUMN: texts})
    if validation_texts is not None:
        validation = kept(validation_texts)
        if not validation:
            raise ValueError(f"The validation text of {source} is empty.")
        validation = Dataset.from_dict({TEXT_COLUMN: validation})
    else:
        if not 0 < validation_split < 1:
            raise ValueError(f"`validation_split` must be in (0, 1), got {validation_split}.")
        if len(train) < 2:
            raise ValueError(f"{source} holds {len(train)} distinct text(s): at least 2 are needed to hold one out "
                             f"for evaluation (or give validation files).")
        held_out = min(len(train) - 1, max(1, round(len(train) * validation_split)))
        split = train.train_test_split(test_size=held_out, seed=seed)
        train, validation = split["train"], split["test"]
    if max_texts is not None and max_texts < len(train):
        train = train.shuffle(seed=seed).select(range(max_texts))
    return DatasetDict({"train": train, "validation": validation})


def load_corpus(
    files: str | list[str] | None = None,
    task: str | TaskSpec | None = None,
    *,
    text_column: str | list[str] | None = None,
    validation_files: str | list[str] | None = None,
    validation_split: float = 0.1,
    data_dir: str | None = None,
    deduplicate: bool = True,
    seed: int = 42,
    max_texts: int | None = None,
) -> DatasetDict:
    """Read unlabelled text from files and/or a registered task's training split into a corpus.

    Args:
        files: `.txt` (a text per line) or CSV/TSV/JSON(L) files; several are pooled.
        task: A registered task name (or `TaskSpec`): its training texts, labels ignored.
        text_column: The text column(s) of table files (see `read_text_file`).
        validation_files: Held-out texts; default: a random `validation_split` of the texts.
        data_dir: The data folder of registered tasks (see `data.resolve_data_dir`).
        deduplicate: Drop exact duplicate texts before splitting (default), so held-out texts are unseen.
        seed: Seed of the held-out split and of the `max_texts` sample.
        max_texts: Keep at most this many training texts.

    Returns:
        `DatasetDict` with `train` and `validation`, each with one column `text`.
    """
    files = _as_list(files)
    if not files and task is None:
        raise ValueError("load_corpus needs text files (--train_file) or a registered task (--task_name).")
    texts: list[str] = []
    for path in files:
        found = read_text_file(path, text_column)
        if not found:
            raise ValueError(f"{path} holds no text (no non-empty line or cell).")
        texts.extend(found)
    if task is not None:
        texts.extend(task_texts(task, data_dir=data_dir))
    validation = None
    if validation_files:
        validation = [t for path in _as_list(validation_files) for t in read_text_file(path, text_column)]
    source = ", ".join([*files, *([f"task {getattr(task, 'name', task)!r}"] if task is not None else [])])
    corpus = build_corpus(texts, validation, validation_split=validation_split, deduplicate=deduplicate, seed=seed,
                          max_texts=max_texts, source=source)
    logger.info(f"Corpus from {source}: {len(corpus['train'])} training and {len(corpus['validation'])} held-out "
                f"texts.")
    return corpus


def group_texts(examples: dict[str, list], block_size: int) -> dict[str, list]:
    """Concatenate tokenized texts and cut them into blocks of `block_size` (run_mlm.py's `group_texts`); the last,
    shorter block is kept, so a small corpus is not dropped whole."""
    concatenated = {k: list(chain.from_iterable(examples[k])) for k in examples}
    total = len(concatenated["input_ids"])
    return {k: [v[i:i + block_size] for i in range(0, total, block_size)] for k, v in concatenated.items()}


def segment_pairs(examples: dict[str, list], tokenizer, block_size: int, seed: int = 42,
                  **options) -> dict[str, list]:
    """BERT-style two-segment examples (as BERT and ELECTRA pretrain): the texts' tokens concatenated, cut into chunks
    that fill a block of `block_size` with the pair's special tokens, each chunk split at a random token into a first
    and a second segment, and the pair tokenized with its special tokens and token types.

    The segments are cut from the texts by the tokens' character offsets, so each is real text (a chunk spanning
    several texts joins its pieces with a space); fast tokenizers only.
    """
    budget = block_size - tokenizer.num_special_tokens_to_add(pair=True)
    if budget < 2:
        raise ValueError(f"A block of {block_size} tokens leaves {budget} for the two segments after the special "
                         f"tokens; use a larger `max_seq_length`.")
    texts = examples[TEXT_COLUMN]
    offsets = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    stream = [(i, start, end) for i, spans in enumerate(offsets) for start, end in spans if end > start]
    rng = random.Random(seed + len(stream))

    def text_of(tokens):
        runs: list[list] = []
        for i, start, end in tokens:
            if runs and runs[-1][0] == i:
                runs[-1][2] = end
            else:
                runs.append([i, start, end])
        return " ".join(texts[i][start:end] for i, start, end in runs)

    firsts, seconds = [], []
    for begin in range(0, len(stream), budget):
        chunk = stream[begin:begin + budget]
        if len(chunk) < 2:
            continue
        cut = rng.randint(1, len(chunk) - 1)
        firsts.append(text_of(chunk[:cut]))
        seconds.append(text_of(chunk[cut:]))
    return tokenizer(firsts, seconds, truncation="longest_first", max_length=block_size, **options)


def tokenize_corpus(
    corpus: DatasetDict | Dataset,
    tokenizer,
    max_seq_length: int = 128,
    line_by_line: bool = True,
    return_offsets_mapping: bool = False,
    two_segments: bool = False,
    seed: int = 42,
    **map_kwargs,
) -> DatasetDict | Dataset:
    """Tokenize a corpus for one member: each text truncated to `max_seq_length` (`line_by_line`), or all texts
    concatenated and cut into blocks of `max_seq_length` tokens (`line_by_line=False`, run_mlm.py's grouping), or
    packed into two-segment blocks (`two_segments`, see `segment_pairs`; seeded split points).

    The columns are the tokenizer's, plus `special_tokens_mask` (the masking collator skips special tokens) and, with
    `return_offsets_mapping`, `offset_mapping` (whole-word masking finds word boundaries with it; fast tokenizers
    only).
    """
    if max_seq_length < 2:
        raise ValueError(f"`max_seq_length` must be at least 2, got {max_seq_length}.")
    if (return_offsets_mapping or two_segments) and not tokenizer.is_fast:
        raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: it gives no offset mapping, which "
                         f"{'two-segment packing' if two_segments else 'whole-word masking'} needs.")
    options = {"return_special_tokens_mask": True, "return_offsets_mapping": return_offsets_mapping}
    if two_segments:
        columns = corpus.column_names
        columns = columns[next(iter(columns))] if isinstance(columns, dict) else columns
        map_kwargs.setdefault("desc", f"Packing into two-segment blocks of {max_seq_length}")
        return corpus.map(segment_pairs, batched=True, remove_columns=columns,
                          fn_kwargs={"tokenizer": tokenizer, "block_size": max_seq_length, "seed": seed, **options},
                          **map_kwargs)

    def tokenize(batch):
        if line_by_line:
            return tokenizer(batch[TEXT_COLUMN], truncation=True, max_length=max_seq_length, **options)
        return tokenizer(batch[TEXT_COLUMN], **options)

    columns = corpus.column_names
    columns = columns[next(iter(columns))] if isinstance(columns, dict) else columns
    map_kwargs.setdefault("desc", "Tokenizing the corpus")
    tokenized = corpus.map(tokenize, batched=True, remove_columns=columns, **map_kwargs)
    if not line_by_line:
        map_kwargs["desc"] = f"Packing into blocks of {max_seq_length}"
        tokenized = tokenized.map(group_texts, batched=True, fn_kwargs={"block_size": max_seq_length}, **map_kwargs)
    return tokenized


@dataclass
class CorpusArguments:
    """Where the unlabelled text comes from (the command-line face of `load_corpus`)."""

    train_file: list[str] | None = field(
        default=None, metadata={"help": "Unlabelled text: .txt (a text per line) or CSV/TSV/JSON(L) files with "
                                        "--text_column; several are pooled."}
    )
    task_name: str | None = field(
        default=None, metadata={"help": "A registered task whose training texts are the corpus (labels ignored)."}
    )
    data_dir: str | None = field(default=None, metadata={"help": "The data folder of registered tasks."})
    validation_file: list[str] | None = field(
        default=None, metadata={"help": "Held-out text for evaluation (default: --validation_split_percentage)."}
    )
    validation_split_percentage: float = field(
        default=10.0, metadata={"help": "Percent of the texts held out for evaluation when no validation file."}
    )
    text_column: list[str] | None = field(
        default=None, metadata={"help": "Text column(s) of CSV/TSV/JSON files (both columns of a pair task)."}
    )
    deduplicate: bool = field(default=True, metadata={"help": "Drop exact duplicate texts before splitting."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many training texts."})

    def __post_init__(self):
        if not self.train_file and self.task_name is None:
            raise ValueError("Give unlabelled text (--train_file) or a registered task (--task_name).")
        if not 0 < self.validation_split_percentage < 100:
            raise ValueError(f"--validation_split_percentage must be in (0, 100), got "
                             f"{self.validation_split_percentage}.")

    def load(self, seed: int = 42) -> DatasetDict:
        return load_corpus(self.train_file, self.task_name, text_column=self.text_column,
                           validation_files=self.validation_file,
                           validation_split=self.validation_split_percentage / 100, data_dir=self.data_dir,
                           deduplicate=self.deduplicate, seed=seed, max_texts=self.max_train_samples)


__all__ = [
    "TEXT_COLUMN",
    "CorpusArguments",
    "build_corpus",
    "group_texts",
    "load_corpus",
    "read_text_file",
    "segment_pairs",
    "task_texts",
    "tokenize_corpus",
]
