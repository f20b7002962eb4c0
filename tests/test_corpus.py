"""Unlabelled text for adaptation (data.corpus): every source, the held-out split, packing, bad input."""

import json

import pytest
from transformers import AutoTokenizer

from hf_multiencoder.data.corpus import build_corpus, load_corpus, read_text_file, task_texts, tokenize_corpus


def test_sources_are_pooled_deduplicated_and_split(tmp_path):
    (tmp_path / "a.txt").write_text("the cat sat\n\n  \nhe went to paris\nthe cat sat\n")
    (tmp_path / "pairs.csv").write_text("q1,q2,label\nwhere is paris,is paris far,1\nwho left,who went,0\n")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"body": t, "id": i}) for i, t in
                                                enumerate(["a dog runs", "", "she can go"])) + "\n")
    assert read_text_file(str(tmp_path / "a.txt")) == ["the cat sat", "he went to paris", "the cat sat"]
    # both columns of a pair each give a text
    assert read_text_file(str(tmp_path / "pairs.csv"), ["q1", "q2"]) == ["where is paris", "who left",
                                                                         "is paris far", "who went"]
    assert read_text_file(str(tmp_path / "b.jsonl"), "body") == ["a dog runs", "she can go"]

    corpus = load_corpus([str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl")], text_column="body",
                         validation_split=0.25, seed=3)
    texts = list(corpus["train"]["text"]) + list(corpus["validation"]["text"])
    assert sorted(texts) == sorted(["the cat sat", "he went to paris", "a dog runs", "she can go"])  # 1 duplicate
    assert len(corpus["validation"]) == 1 and not set(corpus["validation"]["text"]) & set(corpus["train"]["text"])
    again = load_corpus([str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl")], text_column="body",
                        validation_split=0.25, seed=3)
    assert list(again["validation"]["text"]) == list(corpus["validation"]["text"])  # seeded
    kept = load_corpus(str(tmp_path / "a.txt"), deduplicate=False, validation_files=str(tmp_path / "a.txt"))
    assert list(kept["train"]["text"]) == ["the cat sat", "he went to paris", "the cat sat"]
    assert list(kept["validation"]["text"]) == ["the cat sat", "he went to paris", "the cat sat"]
    assert len(load_corpus(str(tmp_path / "pairs.csv"), text_column=["q1", "q2"], max_texts=2)["train"]) == 2


def test_a_registered_tasks_training_texts(shared_data):
    texts = task_texts("rte", data_dir=shared_data)
    assert len(texts) == 2 * 2490  # premise and hypothesis of every training pair, labels ignored
    tweets = task_texts("wnut17", data_dir=shared_data)
    assert len(tweets) == 3394 and all(isinstance(t, str) and " " in t for t in tweets[:20])  # words joined
    corpus = load_corpus(task="rte", data_dir=shared_data, validation_split=0.1)
    assert 0.09 < len(corpus["validation"]) / (len(corpus["train"]) + len(corpus["validation"])) < 0.11


def test_line_by_line_and_packed_blocks(tiny_paths):
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[0])
    corpus = build_corpus(["the cat sat on the mat " * 4, "he went", "somebody just left quickly"] * 3,
                          deduplicate=False, validation_split=0.2)
    lines = tokenize_corpus(corpus, tokenizer, max_seq_length=12)
    assert {"input_ids", "attention_mask", "special_tokens_mask"} <= set(lines["train"].column_names)
    assert max(len(ids) for ids in lines["train"]["input_ids"]) == 12  # truncated
    assert len(lines["train"]) == len(corpus["train"])
    packed = tokenize_corpus(corpus, tokenizer, max_seq_length=12, line_by_line=False, return_offsets_mapping=True)
    lengths = [len(ids) for ids in packed["train"]["input_ids"]]
    assert all(n == 12 for n in lengths[:-1]) and 0 < lengths[-1] <= 12  # full blocks, the rest kept
    full = tokenize_corpus(corpus, tokenizer, max_seq_length=512, line_by_line=True)
    assert sum(lengths) == sum(len(ids) for ids in full["train"]["input_ids"])  # nothing lost
    assert [len(o) for o in packed["train"]["offset_mapping"]] == lengths


def test_bad_corpus_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="empty.txt holds no text"):
        load_corpus(str(empty))
    with pytest.raises(ValueError, match="holds no text"):
        build_corpus([])
    table = tmp_path / "t.csv"
    table.write_text("id,body\n1,hello there\n")
    with pytest.raises(ValueError, match=r"no text column 'text_col'; the columns are \['id', 'body'\]"):
        read_text_file(str(table), "text_col")
    with pytest.raises(ValueError, match="which column holds the text"):
        read_text_file(str(table))
    with pytest.raises(ValueError, match="at least 2 are needed"):
        load_corpus(str(table), text_column="body")
    header_only = tmp_path / "h.csv"  # read as the task files are: the file and the cause named
    header_only.write_text("text\n")
    with pytest.raises(ValueError, match=r"h.csv holds only a header row \('text'\) and no data rows"):
        read_text_file(str(header_only))
    xml = tmp_path / "x.xml"
    xml.write_text("<a/>")
    with pytest.raises(ValueError, match="unsupported extension '.xml'"):
        read_text_file(str(xml))
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus(str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="needs text files"):
        load_corpus()
