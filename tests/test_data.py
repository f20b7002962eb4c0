"""Tests of hf_multiencoder.data.loading: the real benchmark files (row counts, label ids as on the Hub), the CoNLL and
custom-file loaders on small temporary files, the Hub normalisation (with a fake `load_dataset`), and the errors."""

import csv
import json
import os
from collections import Counter

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value

from hf_multiencoder.data import loading as data_module
from hf_multiencoder.data.loading import (
    CONLL2003_LABELS,
    TASKS,
    WNUT17_LABELS,
    TaskSpec,
    iob1_to_iob2,
    load_conll_files,
    load_files,
    load_task,
    local_path,
    read_conll,
    resolve_data_dir,
)


def local_task(shared_data: str, task_name: str):
    """Load a task from the shared data folder, skipping (with the path) when that task's files are not there."""
    path = local_path(task_name, shared_data)
    if not os.path.exists(path):
        pytest.skip(f"{path} is missing from the shared data folder")
    dataset, spec = load_task(task_name, data_dir=shared_data, from_hub=False)
    assert spec is TASKS[task_name]
    return dataset


def split_sizes(dataset: DatasetDict) -> dict[str, int]:
    return {split: len(ds) for split, ds in dataset.items()}


# ---- GLUE -----------------------------------------------------------------------------------------------------------
GLUE_SIZES = {
    "cola": {"train": 8551, "validation": 1043, "test": 1063},
    "sst2": {"train": 67349, "validation": 872, "test": 1821},
    "mrpc": {"train": 3668, "validation": 408, "test": 1725},
    "stsb": {"train": 5749, "validation": 1500, "test": 1379},
    "rte": {"train": 2490, "validation": 277, "test": 3000},
    "wnli": {"train": 635, "validation": 71, "test": 146},
    "qnli": {"validation": 5463, "test": 5463},  # no local train.tsv: the split is absent, not an error
}


@pytest.mark.parametrize("task_name", sorted(GLUE_SIZES))
def test_glue_row_counts_and_features(shared_data, task_name):
    dataset = local_task(shared_data, task_name)
    spec = TASKS[task_name]
    assert split_sizes(dataset) == GLUE_SIZES[task_name]
    for split, ds in dataset.items():
        assert ds.column_names == [*spec.text_keys, "label"], split
        if spec.is_regression:
            assert ds.features["label"] == Value("float32")
        else:
            assert ds.features["label"] == ClassLabel(names=spec.label_list)
        labels = set(ds["label"])
        if split == "test":
            assert labels == {-1}  # GLUE test files are unlabelled, as on the Hub
        elif not spec.is_regression:
            assert labels == set(range(len(spec.label_list)))


def test_glue_label_ids_match_hub(shared_data):
    assert TASKS["cola"].label_list == ["unacceptable", "acceptable"]
    assert TASKS["mnli"].label_list == ["entailment", "neutral", "contradiction"]
    assert TASKS["mnli"].validation_splits == ("validation_matched", "validation_mismatched")
    assert TASKS["wnli"].label_list == ["not_entailment", "entailment"]

    cola = local_task(shared_data, "cola")
    assert cola["validation"][0] == {"sentence1": "The sailors rode the breeze clear of the rocks.", "label": 1}
    assert cola["train"][1] == {"sentence1": "One more pseudo generalization and I'm giving up.", "label": 1}
    assert cola["test"][0] == {"sentence1": "Bill whistled past the house.", "label": -1}


def test_sst2_keeps_text_verbatim(shared_data):
    sst2 = local_task(shared_data, "sst2")
    assert sst2["validation"][0] == {"sentence1": "it 's a charming and often affecting journey . ", "label": 1}
    assert sst2["train"][0]["label"] == 0


def test_mrpc_bom_header_and_quotes(shared_data):
    # the header starts with a UTF-8 BOM; QUOTE_NONE keeps the unbalanced quotes of this row
    mrpc = local_task(shared_data, "mrpc")
    first = mrpc["train"][0]
    assert first["sentence1"].startswith('Amrozi accused his brother, whom he called "the witness"')
    assert first["label"] == 1  # equivalent
    assert mrpc["validation"][0]["sentence2"] == (
        '"The foodservice pie business does not fit our long-term growth strategy.'
    )


def test_stsb_float_labels(shared_data):
    stsb = local_task(shared_data, "stsb")
    assert stsb["validation"][0]["label"] == pytest.approx(5.0)
    assert stsb["train"][1]["label"] == pytest.approx(3.8)
    scores = stsb["train"]["label"]
    assert min(scores) >= 0.0 and max(scores) <= 5.0
    assert len(set(scores)) > 2


def test_rte_and_qnli_string_labels_mapped(shared_data):
    rte = local_task(shared_data, "rte")
    assert rte["validation"][0]["sentence2"] == "Christopher Reeve had an accident."
    assert rte["validation"][0]["label"] == 1  # not_entailment
    assert rte["train"][0]["label"] == 1
    qnli = local_task(shared_data, "qnli")
    assert "train" not in qnli
    assert qnli["validation"][0]["sentence1"] == "What came into force after the new constitution was herald?"
    assert qnli["validation"][0]["label"] == 0  # entailment
    wnli = local_task(shared_data, "wnli")
    assert wnli["validation"][0]["label"] == 0  # not_entailment (WNLI files use 0/1)


# ---- TREC / SICK ----------------------------------------------------------------------------------------------------
def test_trec_coarse_and_fine(shared_data):
    coarse = local_task(shared_data, "trec")
    fine = local_task(shared_data, "trec_fine")
    for dataset in (coarse, fine):
        assert split_sizes(dataset) == {"train": 5452, "validation": 500, "test": 500}
        # no TREC dev set: validation is the test file
        assert dataset["validation"]["sentence1"] == dataset["test"]["sentence1"]
    assert coarse["train"].features["label"].names == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert len(set(coarse["train"]["label"])) == 6
    assert len(fine["train"].features["label"].names) == 50
    assert len(set(fine["train"]["label"])) == 50
    first_coarse, first_fine = coarse["train"][0], fine["train"][0]
    assert first_coarse["sentence1"] == "How did serfdom develop in and then leave Russia ?"
    assert coarse["train"].features["label"].int2str(first_coarse["label"]) == "DESC"
    assert fine["train"].features["label"].int2str(first_fine["label"]) == "DESC:manner"
    # the one Latin-1 byte (0xF0 in "sister\xf0city") is read without error and becomes a space, as on the Hub
    assert any("sister city" in s for s in coarse["train"]["sentence1"])


def test_sick_splits_and_labels(shared_data):
    relatedness = local_task(shared_data, "sick_relatedness")
    entailment = local_task(shared_data, "sick_entailment")
    for dataset in (relatedness, entailment):
        assert split_sizes(dataset) == {"train": 4439, "validation": 495, "test": 4906}
    assert relatedness["train"].features["label"] == Value("float32")
    assert relatedness["train"][0]["label"] == pytest.approx(4.5)
    scores = relatedness["test"]["label"]
    assert min(scores) >= 1.0 and max(scores) <= 5.0
    assert entailment["train"].features["label"].names == ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
    assert entailment["train"][0]["label"] == 2  # NEUTRAL
    assert entailment["train"][0]["sentence1"].startswith("A group of kids is playing in a yard")


# ---- CoNLL-2003 / WNUT-17 -------------------------------------------------------------------------------------------
def assert_iob2(tag_sequences: list[list[str]]) -> None:
    for tags in tag_sequences:
        previous = "O"
        for tag in tags:
            if tag.startswith("I-"):
                assert previous != "O" and previous[2:] == tag[2:], f"I- tag starts an entity: {tags}"
            previous = tag


def test_conll2003(shared_data):
    conll = local_task(shared_data, "conll2003")
    assert split_sizes(conll) == {"train": 14041, "validation": 3250, "test": 3453}
    assert conll["train"].column_names == ["tokens", "ner_tags"]
    names = conll["train"].features["ner_tags"].feature.names
    assert names == CONLL2003_LABELS
    for split in conll:
        tag_ids = conll[split]["ner_tags"]
        assert_iob2([[names[i] for i in tags] for tags in tag_ids])
    first = conll["validation"][0]
    assert first["tokens"][:3] == ["CRICKET", "-", "LEICESTERSHIRE"]
    assert [names[i] for i in first["ner_tags"][:3]] == ["O", "O", "B-ORG"]
    assert not any(tokens[0] == "-DOCSTART-" for tokens in conll["test"]["tokens"])


def test_wnut17(shared_data):
    wnut = local_task(shared_data, "wnut17")
    assert split_sizes(wnut) == {"train": 3394, "validation": 1009, "test": 1287}
    assert wnut["train"].features["ner_tags"].feature.names == WNUT17_LABELS
    assert wnut["train"][0]["tokens"][0] == "@paulwalk"
    assert all(len(tokens) > 0 and all(t for t in tokens) for tokens in wnut["train"]["tokens"])


# ---- the original project's corpora (counts and label sets: ../shared/data/SOURCES.md) ---------------------------
def label_counts(ds) -> dict[str, int]:
    names = ds.features["label"].names
    counts = Counter(ds["label"])
    return {names[i]: counts[i] for i in sorted(counts)}


def test_clickbait(shared_data):
    data = local_task(shared_data, "clickbait")
    # 15999 + 16001 headlines; the original's dev = the first 2000 of each class, train = the other 28000
    assert split_sizes(data) == {"train": 28000, "validation": 4000}
    assert label_counts(data["validation"]) == {"non_clickbait": 2000, "clickbait": 2000}
    assert label_counts(data["train"]) == {"non_clickbait": 14001, "clickbait": 13999}
    clickbait = data["validation"].filter(lambda r: r["label"] == 1)
    assert clickbait[0]["sentence1"] == "Should I Get Bings"  # file order, blank lines skipped
    assert all(s.strip() == s and s for s in data["train"]["sentence1"])


def test_isear(shared_data):
    data = local_task(shared_data, "isear")
    # dev = first 180 per emotion (1260); train = rows not in dev (6196: later duplicates of dev rows are dropped)
    assert split_sizes(data) == {"train": 6196, "validation": 1260}
    assert data["train"].features["label"].names == ["anger", "disgust", "fear", "guilt", "joy", "sadness", "shame"]
    assert set(label_counts(data["validation"]).values()) == {180}
    assert data["validation"][0]["sentence1"].startswith("During the period of falling in love")
    dev = set(zip(data["validation"]["sentence1"], data["validation"]["label"]))
    assert not dev & set(zip(data["train"]["sentence1"], data["train"]["label"]))


def test_emotion_stimulus(shared_data):
    data = local_task(shared_data, "emotion_stimulus")
    # the No Cause part (1594 sentences), dev = the first 30 per label
    assert split_sizes(data) == {"train": 1384, "validation": 210}
    total = {k: label_counts(data["train"])[k] + label_counts(data["validation"])[k]
             for k in label_counts(data["validation"])}
    assert total == {"anger": 284, "disgust": 57, "fear": 279, "happy": 268, "sad": 468, "shame": 78, "surprise": 160}
    assert TASKS["emotion_stimulus"].metric == "accuracy_macro_f1"


@pytest.mark.parametrize("task_name, column", [("emobank", "V"), ("emobank_arousal", "A"), ("emobank_dominance", "D")])
def test_emobank(shared_data, task_name, column):
    data = local_task(shared_data, task_name)
    assert split_sizes(data) == {"train": 8062, "validation": 1000, "test": 1000}  # the official split
    assert data["train"].features["label"] == Value("float32")
    scores = [s for split in data.values() for s in split["label"]]
    assert 1.0 <= min(scores) and max(scores) <= 5.0
    with open(os.path.join(shared_data, "emobank", "emobank.csv"), newline="") as f:
        first_test = next(r for r in csv.DictReader(f) if r["split"] == "test")
    assert data["test"][0]["sentence1"] == first_test["text"] == "If I wasn't working here."
    assert data["test"][0]["label"] == pytest.approx(float(first_test[column]))
    # test is the real test split (the original project's loader used dev as test by mistake)
    assert set(data["test"]["sentence1"]) != set(data["validation"]["sentence1"])


@pytest.mark.parametrize("task_name, column", [("fb_va", "Valence1"), ("fb_va_arousal", "Arousal1")])
def test_fb_va(shared_data, task_name, column):
    data = local_task(shared_data, task_name)
    assert split_sizes(data) == {"train": 2094, "validation": 800}  # 2894 non-empty messages, dev = first 800
    assert data["validation"][0]["sentence1"].startswith("We'll be off and running")
    assert data["validation"][0]["label"] == (9.0 if column == "Valence1" else 8.0)  # the first annotator
    assert not any("\t" in s for split in data.values() for s in split["sentence1"])
    assert all(1 <= score <= 9 for split in data.values() for score in split["label"])


@pytest.mark.parametrize("task_name, sizes, tokens, types", [
    ("mit_movie", (7816, 1953), (158823, 39035), 12),
    ("mit_movie_eng", (9775, 2443), (99491, 24686), 12),
    ("mit_restaurant", (7660, 1521), (70525, 14256), 8),
])
def test_mit(shared_data, task_name, sizes, tokens, types):
    data = local_task(shared_data, task_name)
    assert split_sizes(data) == {"train": sizes[0], "validation": sizes[1], "test": sizes[1]}  # test = validation
    assert (sum(map(len, data["train"]["tokens"])), sum(map(len, data["test"]["tokens"]))) == tokens
    names = data["train"].features["ner_tags"].feature.names
    assert len(names) == 1 + 2 * types and names[0] == "O"
    used = {names[i] for split in ("train", "test") for tags in data[split]["ner_tags"] for i in tags}
    assert used == set(names)  # every tag of the label list occurs
    for split in data:
        assert_iob2([[names[i] for i in tags] for tags in data[split]["ner_tags"]])
    if task_name == "mit_movie":  # tag-first files: the word is the second column
        assert data["train"][0]["tokens"][:3] == ["steve", "mcqueen", "provided"]
        assert [names[i] for i in data["train"][0]["ner_tags"][:3]] == ["B-Actor", "I-Actor", "O"]


# ---- iob1_to_iob2 / read_conll / load_conll_files -------------------------------------------------------------------
@pytest.mark.parametrize(
    "iob1, iob2",
    [
        ([], []),
        (["O", "O"], ["O", "O"]),
        (["I-PER", "I-PER", "O", "I-LOC"], ["B-PER", "I-PER", "O", "B-LOC"]),
        (["I-PER", "B-PER", "I-PER"], ["B-PER", "B-PER", "I-PER"]),  # two touching PER entities
        (["I-ORG", "I-LOC", "I-LOC"], ["B-ORG", "B-LOC", "I-LOC"]),  # type change starts an entity
        (["B-PER", "I-PER", "O", "B-MISC"], ["B-PER", "I-PER", "O", "B-MISC"]),  # IOB2 stays as it is
    ],
)
def test_iob1_to_iob2(iob1, iob2):
    assert iob1_to_iob2(iob1) == iob2


CONLL_TEXT = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER


-DOCSTART- -X- O O

BRUSSELS NNP I-NP I-LOC"""  # no trailing newline; two blank lines in a row


def test_read_conll(tmp_path):
    path = tmp_path / "small.conll"
    path.write_text(CONLL_TEXT)
    sentences = read_conll(str(path))
    assert sentences == [
        (["EU", "rejects", "German", "call"], ["I-ORG", "O", "I-MISC", "O"]),
        (["Peter", "Blackburn"], ["I-PER", "I-PER"]),
        (["BRUSSELS"], ["I-LOC"]),
    ]
    assert read_conll(str(path), tag_column=1, iob=False)[0][1] == ["NNP", "VBZ", "JJ", "NN"]  # another column

    tab_path = tmp_path / "tabs.conll"
    tab_path.write_text("New\tB-location\nYork\tI-location\n\t\nhi\tO\n")  # WNUT style: a lone tab ends a sentence
    assert read_conll(str(tab_path)) == [(["New", "York"], ["B-location", "I-location"]), (["hi"], ["O"])]


def test_load_conll_files(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text(CONLL_TEXT)
    dev = tmp_path / "dev.txt"
    dev.write_text("Paris NNP I-NP B-PER\nis VBZ I-VP O\n")

    dataset, spec = load_conll_files(str(train), str(dev))
    labels = spec.label_list
    # the training file's tags, each of its types with both B- and I-: "O" first, then sorted
    assert labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    assert spec.kind == "token" and spec.main_metric == "overall_f1" and spec.validation_splits == ("validation",)
    assert split_sizes(dataset) == {"train": 3, "validation": 1}
    assert dataset["train"].features["ner_tags"] == Sequence(ClassLabel(names=labels))
    assert dataset["validation"][0] == {"tokens": ["Paris", "is"], "ner_tags": [4, 0]}

    dataset, spec = load_conll_files(str(train), iob1=True)
    labels = spec.label_list
    assert labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    assert [labels[i] for i in dataset["train"][1]["ner_tags"]] == ["B-PER", "I-PER"]

    dataset, spec = load_conll_files(None, test_file=str(dev), label_list=CONLL2003_LABELS, iob1=True)
    labels = spec.label_list
    assert labels == CONLL2003_LABELS and list(dataset) == ["test"]
    assert [labels[i] for i in dataset["test"][0]["ner_tags"]] == ["B-PER", "O"]

    with pytest.raises(ValueError, match="I-MISC"):
        load_conll_files(str(train), label_list=["O", "I-ORG", "I-PER", "I-LOC"])
    with pytest.raises(ValueError, match="at least one"):
        load_conll_files(None)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_conll_files(str(tmp_path / "nope.txt"))

    # a tag of a type the training file lacks is no new class: an error naming it (and a case fix where one fits)
    dev.write_text("Paris NNP I-NP B-GPE\nis VBZ I-VP O\n")
    with pytest.raises(ValueError, match=r"dev\.txt: tag\(s\) \['B-GPE'\] do not occur in .*train\.txt"):
        load_conll_files(str(train), str(dev))
    dev.write_text("Paris NNP I-NP B-per\n")
    with pytest.raises(ValueError, match=r"Different case\? 'B-per' -> 'B-PER'"):
        load_conll_files(str(train), str(dev))


# ---- load_files -----------------------------------------------------------------------------------------------------
def test_load_files_csv_pairs_classification(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("id,sentence1,sentence2,label\n1,a b,c d,pos\n2,e f,g h,neg\n3,i j,k l,pos\n")
    dev = tmp_path / "dev.csv"
    dev.write_text("id,sentence1,sentence2,label\n4,m n,o p,pos\n")
    test = tmp_path / "test.csv"
    test.write_text("id,sentence1,sentence2\n5,q r,s t\n")
    dataset, spec = load_files(str(train), str(dev), str(test), cache_dir=str(tmp_path / "cache"))
    assert spec.name == "custom" and spec.kind == "sequence"
    assert spec.text_keys == ("sentence1", "sentence2")
    assert spec.label_list == ["neg", "pos"]  # sorted, from the training file
    assert not spec.is_regression and spec.main_metric == "accuracy"
    assert spec.validation_splits == ("validation",)
    assert dataset["train"].column_names == ["sentence1", "sentence2", "label"]
    assert dataset["train"]["label"] == [1, 0, 1]
    assert dataset["train"].features["label"] == ClassLabel(names=["neg", "pos"])
    assert dataset["validation"][0] == {"sentence1": "m n", "sentence2": "o p", "label": 1}
    assert dataset["test"][0]["label"] == -1


def test_load_files_tsv_first_columns(tmp_path):
    # no sentence1/sentence2: the first non-label column(s) are the text (run_glue's convention)
    single = tmp_path / "single.tsv"
    single.write_text("text\tlabel\nhello there\t1\nbye now\t0\n")
    dataset, spec = load_files(str(single), cache_dir=str(tmp_path / "cache"))
    assert spec.text_keys == ("sentence1",) and spec.label_list == ["0", "1"]
    assert spec.validation_splits == ()
    assert dataset["train"][0] == {"sentence1": "hello there", "label": 1}

    pair = tmp_path / "pair.tsv"
    pair.write_text("question\tanswer\tgold\tnotes\nwhy?\tbecause\tyes\tx\nhow?\tno idea\tno\ty\n")
    dataset, spec = load_files(str(pair), label_column="gold", cache_dir=str(tmp_path / "cache"))
    assert spec.text_keys == ("sentence1", "sentence2") and spec.label_list == ["no", "yes"]
    assert dataset["train"][1] == {"sentence1": "how?", "sentence2": "no idea", "label": 0}


def test_load_files_json_regression(tmp_path):
    rows = [{"sentence1": "a", "sentence2": "b", "label": 4.5}, {"sentence1": "c", "sentence2": "d", "label": 1.0}]
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps(rows[:1]))
    dataset, spec = load_files(str(train), str(dev), cache_dir=str(tmp_path / "cache"))
    assert spec.is_regression and spec.label_list is None and spec.main_metric == "spearmanr"
    assert spec.num_labels == 1
    assert dataset["train"].features["label"] == Value("float32")
    assert dataset["train"]["label"] == pytest.approx([4.5, 1.0])
    assert dataset["validation"][0]["sentence2"] == "b"


def test_load_files_errors(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("sentence,target\nhi,1\n")
    with pytest.raises(ValueError, match=r"'label'.*\['sentence', 'target'\]"):
        load_files(str(train), cache_dir=str(tmp_path / "cache"))
    other = tmp_path / "dev.json"
    other.write_text('{"sentence": "x", "target": 1}\n')
    with pytest.raises(ValueError, match="same format"):
        load_files(str(train), str(other), label_column="target")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_files(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="at least one"):
        load_files()


# ---- errors, data folder, Hub ---------------------------------------------------------------------------------------
def test_unknown_task():
    with pytest.raises(ValueError, match="Unknown task 'glue_foo'.*cola.*wnut17"):
        load_task("glue_foo")


def test_missing_data_folder(tmp_path, monkeypatch, hub_offline):
    hub_offline(True)
    missing = tmp_path / "no_data"
    with pytest.raises(FileNotFoundError, match="data_dir") as err:
        load_task("cola", data_dir=str(missing))
    assert os.path.join(str(missing), "glue", "CoLA") in str(err.value)

    # from_hub=False never tries the Hub, even online
    hub_offline(False)
    monkeypatch.setattr(data_module.datasets, "load_dataset", lambda *a, **k: pytest.fail("tried the Hub"))
    with pytest.raises(FileNotFoundError, match="conll2003"):
        load_task("conll2003", data_dir=str(tmp_path), from_hub=False)


def test_task_folder_missing_but_data_dir_present(tmp_path, hub_offline):
    hub_offline(True)
    (tmp_path / "glue" / "CoLA").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="QQP"):
        load_task("qqp", data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="none of the files"):
        load_task("cola", data_dir=str(tmp_path))


def test_resolve_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_MULTIENCODER_DATA", str(tmp_path))
    assert resolve_data_dir(None) == str(tmp_path)
    assert resolve_data_dir(str(tmp_path / "x")) == str(tmp_path / "x")
    monkeypatch.delenv("HF_MULTIENCODER_DATA")
    assert resolve_data_dir(None) == data_module.DEFAULT_DATA_DIR


def test_hub_fallback_normalises_columns_and_labels(tmp_path, monkeypatch, hub_offline):
    """Offline stand-in for `datasets.load_dataset`: checks renaming and label re-mapping of Hub layouts."""
    hub_offline(False)
    calls = []
    hub_trec_names = ["ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"]  # the Hub's (unsorted) coarse order

    def fake_load_dataset(*args, **kwargs):
        calls.append(args)
        if args[0] == "nyu-mll/glue":
            features = Features({"question1": Value("string"), "question2": Value("string"),
                                 "label": ClassLabel(names=["not_duplicate", "duplicate"]), "idx": Value("int32")})
            ds = Dataset.from_dict({"question1": ["q1"], "question2": ["q2"], "label": [1], "idx": [0]}, features)
            return DatasetDict({"train": ds, "validation": ds})
        features = Features({"text": Value("string"), "coarse_label": ClassLabel(names=hub_trec_names),
                             "fine_label": Value("int64")})
        ds = Dataset.from_dict({"text": ["Who?", "What?"], "coarse_label": [3, 1], "fine_label": [0, 0]}, features)
        return DatasetDict({"train": ds})

    monkeypatch.setattr(data_module.datasets, "load_dataset", fake_load_dataset)
    qqp, spec = load_task("qqp", data_dir=str(tmp_path))  # no local QQP, online: goes to the Hub
    assert spec.name == "qqp"
    assert calls == [("nyu-mll/glue", "qqp")]
    assert qqp["train"].column_names == ["sentence1", "sentence2", "label"]
    assert qqp["train"][0] == {"sentence1": "q1", "sentence2": "q2", "label": 1}

    trec, _ = load_task("trec", from_hub=True)  # from_hub=True skips the local files
    assert trec["train"].column_names == ["sentence1", "label"]
    assert trec["train"].features["label"].names == TASKS["trec"].label_list
    assert [trec["train"].features["label"].int2str(i) for i in trec["train"]["label"]] == ["HUM", "ENTY"]


def test_task_specs():
    assert set(TASKS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "trec", "trec_fine",
                          "sick_relatedness", "sick_entailment", "conll2003", "wnut17", "mit_movie", "mit_movie_eng",
                          "mit_restaurant", "clickbait", "isear", "emotion_stimulus", "emobank", "emobank_arousal",
                          "emobank_dominance", "fb_va", "fb_va_arousal"}
    for name, spec in TASKS.items():
        assert isinstance(spec, TaskSpec) and spec.name == name
        assert spec.is_regression == (spec.label_list is None)
        assert spec.kind in ("sequence", "token")
    assert TASKS["cola"].main_metric == "matthews_correlation"
    assert TASKS["stsb"].main_metric == "spearmanr" and TASKS["stsb"].num_labels == 1
    assert TASKS["conll2003"].main_metric == "overall_f1"
    assert TASKS["rte"].label_list == TASKS["qnli"].label_list == ["entailment", "not_entailment"]
    assert len(TASKS["trec_fine"].label_list) == 50
