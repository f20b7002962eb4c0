"""Masked-LM adaptation of every member (pretraining.adaptation) on tiny members of three architectures: the
held-out loss falls, the saved members are standard checkpoints with changed weights and no head, the new head is
warmed up with the member frozen, whole-word masking, multi-encoder checkpoints, and every bad input."""

import json
import os
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    GPT2Config,
    GPT2Model,
    TrainingArguments,
)

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.data.corpus import build_corpus, tokenize_corpus
from hf_multiencoder.pretraining.adaptation import (
    OBJECTIVES,
    AdaptationTrainer,
    MaskedLMCollator,
    adapt_members,
    mask_once,
)
from hf_multiencoder.testing_utils import WORDS

NAMES = ["bert", "roberta", "distilbert"]
FAST = {"num_train_epochs": 3, "learning_rate": 1e-3, "per_device_train_batch_size": 8, "use_cpu": True,
        "disable_tqdm": True, "max_seq_length": 32, "seed": 0}


@pytest.fixture(scope="module")
def corpus():
    """A small repeated corpus: 20 texts, each 5 times (held-out texts are also training texts)."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS[:24]) for _ in range(8)) for _ in range(20)]
    return build_corpus(texts * 5, deduplicate=False, validation_split=0.2, seed=0)


@pytest.fixture(scope="module")
def adapted(tiny_paths, corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("adapted")
    return adapt_members(tiny_paths, corpus, output_dir=str(out), encoder_names=NAMES, **FAST), out


@pytest.mark.slow  # trains the tiny members
def test_adaptation_lowers_the_held_out_loss_of_every_member(adapted):
    report, out = adapted
    assert [m["name"] for m in report["members"]] == NAMES
    for member in report["members"]:
        assert member["adapted"] and member["new_head"]  # the tiny members ship no masked-LM head
        assert member["train_examples"] == 80 and member["eval_examples"] == 20
        assert member["end"]["loss"] < member["after_head_warmup"]["loss"] <= member["start"]["loss"], member
        assert member["end"]["perplexity"] == pytest.approx(torch.tensor(member["end"]["loss"]).exp().item())
    saved = json.loads((out / "adaptation_results.json").read_text())
    assert saved["members"] == report["members"] and saved["settings"]["learning_rate"] == 1e-3
    assert "| bert | yes | yes | 80 / 20 |" in report["table"]


@pytest.mark.slow  # trains the tiny members
def test_saved_members_are_standard_checkpoints_with_changed_weights_and_no_head(adapted, tiny_paths):
    report, out = adapted
    assert report["encoders"] == [str(out / name) for name in NAMES]
    for path, original in zip(report["encoders"], tiny_paths):
        model = AutoModel.from_pretrained(path)
        reference = AutoModel.from_pretrained(original)
        assert type(model) is type(reference)
        weights = load_file(os.path.join(path, "model.safetensors"))
        assert set(weights) == set(reference.state_dict())  # the member's own keys: no head, nothing missing
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, reference.state_dict()[k])]
        assert any("layer" in k for k in changed) and any("embeddings" in k for k in changed)
        assert not any("pooler" in k for k in changed)  # a pooler the head model lacks is kept as it was
        assert AutoTokenizer.from_pretrained(path)("the cat")["input_ids"] == \
            AutoTokenizer.from_pretrained(original)("the cat")["input_ids"]
        assert not os.path.exists(os.path.join(path, "mlm"))  # the head only on request
    # the adapted folders build a multi-encoder as any checkpoint does
    tokenizer = MultiEncoderTokenizer.from_encoders(report["encoders"], encoder_names=NAMES)
    model = MultiEncoderForSequenceClassification.from_encoders(report["encoders"], encoder_names=NAMES, num_labels=2)
    out = model(**tokenizer(["the cat sat", "he went"], padding=True, return_tensors="pt"))
    assert out.logits.shape == (2, 2)
    member = AutoModel.from_pretrained(report["encoders"][0])
    torch.testing.assert_close(model.multiencoder.encoders[0].embeddings.word_embeddings.weight,
                               member.embeddings.word_embeddings.weight)


def test_a_new_head_is_named_and_its_decoder_tied_to_the_input_embeddings(tiny_paths):
    objective = OBJECTIVES["mlm"]
    for path in tiny_paths:  # the tiny members, like the sentence-transformers ones, ship no masked-LM head
        live = AutoModel.from_pretrained(path)
        for model, new_head in (objective.from_checkpoint(path), objective.from_member(live)):
            assert new_head and not any(k.startswith(f"{model.base_model_prefix}.") for k in new_head)
            assert model.get_output_embeddings().weight is model.get_input_embeddings().weight, path


@pytest.mark.slow  # trains the tiny members
def test_head_warmup_leaves_the_member_untouched(tiny_paths, corpus, tmp_path):
    # learning_rate 0 after the warm-up: whatever changed in the member, the warm-up changed it
    report = adapt_members(tiny_paths[:1], corpus, output_dir=str(tmp_path), encoder_names=["bert"],
                           **{**FAST, "learning_rate": 0.0, "num_train_epochs": 1}, head_warmup="always",
                           save_mlm_head=True)
    member = report["members"][0]
    assert member["after_head_warmup"]["loss"] < member["start"]["loss"]
    original = AutoModel.from_pretrained(tiny_paths[0]).state_dict()
    for key, value in AutoModel.from_pretrained(str(tmp_path / "bert")).state_dict().items():
        assert torch.equal(value, original[key]), key
    with_head = AutoModelForMaskedLM.from_pretrained(str(tmp_path / "bert" / "mlm"))  # saved on request
    assert any(k.startswith("cls.predictions") for k in with_head.state_dict())

    never = adapt_members(tiny_paths[:1], corpus, output_dir=str(tmp_path / "never"), encoder_names=["bert"],
                          **{**FAST, "num_train_epochs": 1}, head_warmup="never")
    assert "after_head_warmup" not in never["members"][0]


def test_head_only_at_masked_positions_gives_the_models_own_loss(tiny_paths, tmp_path):
    model = AutoModelForMaskedLM.from_pretrained(tiny_paths[1]).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[1])
    collator = MaskedLMCollator(tokenizer, seed=0)
    batch = collator([dict(tokenizer(t, return_special_tokens_mask=True)) for t in
                      ["the cat sat on the mat", "somebody just left", "he went to new york and paris"]])
    trainer = AdaptationTrainer(model=model, args=TrainingArguments(str(tmp_path), use_cpu=True, report_to="none"),
                                encoder=model.base_model)
    with torch.no_grad():
        torch.testing.assert_close(trainer.compute_loss(model, batch), model(**batch).loss)
        total = int((batch["labels"] != -100).sum())
        torch.testing.assert_close(trainer.compute_loss(model, batch, num_items_in_batch=2 * total),
                                   model(**batch).loss / 2)


def test_whole_word_masking_masks_every_subword_of_a_masked_word(tiny_paths):
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[0])  # WordPiece: "quickly" is q ##u ##i ##c ##k ##l ##y
    texts = ["somebody went quickly to paris", "the cat runs", "she likes york and quickly left"]
    encodings = [tokenizer(t, return_special_tokens_mask=True, return_offsets_mapping=True) for t in texts]
    collator = MaskedLMCollator(tokenizer, whole_word_mask=True, mlm_probability=0.4, mask_replace_prob=1.0,
                                random_replace_prob=0.0, seed=0)
    masked_multi_subword = 0
    for _ in range(30):  # examples of different lengths: the offsets are padded too
        batch = collator([dict(e) for e in encodings])
        assert batch["input_ids"].shape == batch["labels"].shape == (3, max(len(e["input_ids"]) for e in encodings))
        for b, enc in enumerate(encodings):
            words = enc.word_ids()
            for word in set(w for w in words if w is not None):
                positions = [i for i, w in enumerate(words) if w == word]
                masked = [bool(batch["labels"][b, i] != -100) for i in positions]
                assert all(masked) or not any(masked), (texts[b], word, masked)
                masked_multi_subword += all(masked) and len(positions) > 1
                if all(masked):
                    assert all(batch["input_ids"][b, i] == tokenizer.mask_token_id for i in positions)
            specials = [i for i, s in enumerate(enc["special_tokens_mask"]) if s]
            assert all(batch["labels"][b, i] == -100 for i in specials)
    assert masked_multi_subword > 0


def test_held_out_masks_are_fixed(tiny_paths, corpus):
    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[0])
    held_out = tokenize_corpus(corpus["validation"], tokenizer, max_seq_length=32)
    collator = MaskedLMCollator(tokenizer)
    first, second = mask_once(held_out, collator, seed=5), mask_once(held_out, collator, seed=5)
    assert list(first["labels"]) == list(second["labels"]) and list(first["input_ids"]) == list(second["input_ids"])
    assert sum(label != -100 for row in first["labels"] for label in row) > 0
    padded = collator([first[0], first[1]])  # a masked example is only padded
    assert padded["labels"][0, : len(first[0]["labels"])].tolist() == first[0]["labels"]


@pytest.mark.slow  # trains the tiny members
def test_adapt_some_members_of_a_saved_multiencoder(tiny_paths, corpus, tmp_path):
    names = ["bert", "distilbert"]
    members = [tiny_paths[0], tiny_paths[2]]
    model = MultiEncoderForSequenceClassification.from_encoders(members, encoder_names=names, num_labels=2)
    MultiEncoderTokenizer.from_encoders(members, encoder_names=names).save_pretrained(tmp_path / "model")
    model.save_pretrained(tmp_path / "model")
    before = {k: v.clone() for k, v in model.state_dict().items()}

    report = adapt_members(str(tmp_path / "model"), corpus, output_dir=str(tmp_path / "adapted"),
                           adapt_members=["distilbert"], **FAST)
    assert [m["adapted"] for m in report["members"]] == [False, True]
    after = MultiEncoderForSequenceClassification.from_pretrained(tmp_path / "adapted").state_dict()
    assert set(after) == set(before)
    for key, value in after.items():
        if key.startswith("multiencoder.encoders.1."):
            continue
        assert torch.equal(value, before[key]), key  # member 0, fusion and head kept
    assert any(not torch.equal(v, before[k]) for k, v in after.items() if k.startswith("multiencoder.encoders.1."))
    assert MultiEncoderTokenizer.from_pretrained(tmp_path / "adapted").encoder_names == names
    assert (tmp_path / "adapted" / "adaptation_results.json").is_file()


def test_bad_input_fails_before_anything_is_written(tiny_paths, corpus, tmp_path):
    gpt2 = tmp_path / "tiny-gpt2"
    GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=60, n_positions=32, bos_token_id=0,
                         eos_token_id=0)).save_pretrained(gpt2)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"Member 'gpt' is a GPT2Config \('gpt2'\).*no masked-LM class"):
        adapt_members([tiny_paths[0], str(gpt2)], corpus, output_dir=str(out), encoder_names=["bert", "gpt"], **FAST)
    assert not out.exists()
    # RoBERTa counts positions from its padding index: 80 in the table, 78 usable
    with pytest.raises(ValueError, match="beyond member 'roberta''s 78 positions"):
        adapt_members(tiny_paths[:2], corpus, output_dir=str(out), encoder_names=["bert", "roberta"],
                      adapt_members=["roberta"], **{**FAST, "max_seq_length": 79})
    with pytest.raises(ValueError, match="beyond member 'bert''s 64 positions"):
        adapt_members(tiny_paths[:1], corpus, output_dir=str(out), encoder_names=["bert"],
                      **{**FAST, "max_seq_length": 65})
    assert not out.exists()
    with pytest.raises(ValueError, match="No member 'mpnet' to adapt"):
        adapt_members(tiny_paths[:1], corpus, output_dir=str(out), encoder_names=["bert"], adapt_members=["mpnet"],
                      **FAST)
    with pytest.raises(ValueError, match="corpus has no 'validation' text"):
        adapt_members(tiny_paths[:1], {"train": corpus["train"]}, output_dir=str(out), **FAST)
    with pytest.raises(ValueError, match="Member names must be unique"):
        adapt_members([tiny_paths[0], tiny_paths[0]], corpus, output_dir=str(out), **FAST)

    other = tmp_path / "taken"
    (other / "MiniLM").mkdir(parents=True)
    (other / "MiniLM" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds other members \(MiniLM\)"):
        adapt_members(tiny_paths[:1], corpus, output_dir=str(other), encoder_names=["bert"], **FAST)
    assert sorted(os.listdir(other)) == ["MiniLM"]


@pytest.mark.slow  # trains the tiny members
def test_a_second_run_into_the_same_folder(adapted, tiny_paths, corpus):
    report, out = adapted
    with pytest.raises(ValueError, match="already holds adapted bert, roberta, distilbert: pass overwrite_output_dir"):
        adapt_members(tiny_paths, corpus, output_dir=str(out), encoder_names=NAMES, **FAST)
    # resuming keeps the finished members (nothing is trained again) ...
    again = adapt_members(tiny_paths, corpus, output_dir=str(out), encoder_names=NAMES, resume_from_checkpoint=True,
                          **FAST)
    assert again["members"] == report["members"]
    # ... but not members adapted with other settings
    with pytest.raises(ValueError, match="adapted with other settings"):
        adapt_members(tiny_paths, corpus, output_dir=str(out), encoder_names=NAMES, resume_from_checkpoint=True,
                      **{**FAST, "learning_rate": 5e-4})


@pytest.mark.slow  # trains the tiny members
def test_an_interrupted_member_resumes_from_its_last_complete_checkpoint(tiny_paths, corpus, tmp_path):
    options = {**FAST, "num_train_epochs": 2, "save_strategy": "epoch"}
    first = adapt_members(tiny_paths[:1], corpus, output_dir=str(tmp_path), encoder_names=["bert"], **options)
    checkpoints = [f for f in os.listdir(tmp_path / "trainer" / "bert") if f.startswith("checkpoint-")]
    assert sorted(checkpoints) == ["checkpoint-10", "checkpoint-20"]  # 80 examples / batch 8, 2 epochs
    # the run is cut off after its last checkpoint, before the member was saved
    shutil.rmtree(tmp_path / "bert")
    (tmp_path / "trainer" / "bert" / "checkpoint-30").mkdir()  # and a save cut off half-way: skipped
    again = adapt_members(tiny_paths[:1], corpus, output_dir=str(tmp_path), encoder_names=["bert"],
                          resume_from_checkpoint=True, **options)
    member = again["members"][0]
    assert "after_head_warmup" not in member  # the checkpoint holds the trained head: no second warm-up
    assert member["end"]["loss"] == pytest.approx(first["members"][0]["end"]["loss"], abs=1e-4)
    assert AutoModel.from_pretrained(tmp_path / "bert").config.model_type == "bert"
