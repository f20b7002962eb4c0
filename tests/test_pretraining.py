"""Replaced-token detection (models.modeling_rtd, pretraining.rtd) on tiny BERT, ELECTRA and
ALBERT configs: the published recipe (masking rates, replaced labels, Gumbel-max sampling, shared and tied
embeddings, no gradient through sampling), learning on a small repeated corpus, the saved layout, continued
pretraining of a member, two-segment blocks, and the bad inputs."""

import importlib.util
import json
import os
import random
import shutil

import pytest
import torch
from transformers import (
    AlbertConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertConfig,
    BertTokenizer,
    ElectraConfig,
    ElectraForPreTraining,
    ElectraModel,
)

import run_pretraining
from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.data.corpus import build_corpus, tokenize_corpus
from hf_multiencoder.models import modeling_rtd
from hf_multiencoder.models.modeling_rtd import RTDConfig, RTDForPreTraining, gumbel_max_sample
from hf_multiencoder.pretraining.adaptation import adapt_members, mask_once
from hf_multiencoder.pretraining.rtd import (
    PretrainingArguments,
    RTDTrainer,
    build_rtd_model,
    default_pretraining_arguments,
    generator_config,
    pretrain,
    rtd_collator,
)
from hf_multiencoder.testing_utils import WORDS, bert_vocab

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = len(bert_vocab())
SIZES = {"vocab_size": VOCAB, "num_hidden_layers": 2, "intermediate_size": 37, "max_position_embeddings": 64}


def electra(hidden=32, heads=4, embedding=16):
    return ElectraConfig(embedding_size=embedding, hidden_size=hidden, num_attention_heads=heads, **SIZES)


def albert(hidden=32, heads=4, embedding=16):
    return AlbertConfig(embedding_size=embedding, hidden_size=hidden, num_attention_heads=heads, **SIZES)


def bert(hidden=32, heads=4):
    return BertConfig(hidden_size=hidden, num_attention_heads=heads, **SIZES)


def rtd_model(discriminator, seed=0, **kwargs) -> RTDForPreTraining:
    torch.manual_seed(seed)
    config = RTDConfig(generator=generator_config(discriminator), discriminator=discriminator, **kwargs)
    return RTDForPreTraining(config)


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(vocab=bert_vocab(), do_lower_case=True)


@pytest.fixture(scope="module")
def corpus():
    """A small repeated corpus: 16 texts, each 6 times (held-out texts are also training texts)."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS[:24]) for _ in range(10)) for _ in range(16)]
    return build_corpus(texts * 6, deduplicate=False, validation_split=0.2, seed=0)


def masked_batch(tokenizer, corpus, n=32, seed=0):
    tokenized = tokenize_corpus(corpus["train"].select(range(n)), tokenizer, max_seq_length=16)
    return rtd_collator(tokenizer, seed=seed)([tokenized[i] for i in range(n)])


# ---- the recipe -----------------------------------------------------------------------------------------------------
def test_masking_rates_are_the_published_ones(tokenizer, corpus):
    tokenized = tokenize_corpus(corpus["train"], tokenizer, max_seq_length=16)
    examples = [tokenized[i] for i in range(len(tokenized))] * 20
    batch = rtd_collator(tokenizer, seed=0)(examples)
    original = torch.tensor([e["input_ids"] for e in examples])  # equal lengths: 10 words of the vocabulary
    special = torch.tensor([e["special_tokens_mask"] for e in examples]).bool()
    selected = batch["labels"] != -100
    assert not (selected & special).any()
    assert torch.equal(batch["labels"][selected], original[selected])
    assert selected.sum() / (~special).sum() == pytest.approx(0.15, abs=0.015)
    masked = batch["input_ids"] == tokenizer.mask_token_id
    assert not (masked & ~selected).any() and torch.equal(batch["input_ids"][~selected], original[~selected])
    assert masked.sum() / selected.sum() == pytest.approx(0.85, abs=0.03)
    kept = selected & ~masked  # no random replacement: the other 15% are the original tokens
    assert torch.equal(batch["input_ids"][kept], original[kept])


def test_gumbel_max_samples_the_softmax_in_fp32():
    logits = torch.tensor([[0.0, 1.0986, -30.0]], dtype=torch.bfloat16, requires_grad=True)  # p = 1/4, 3/4, ~0
    draws = gumbel_max_sample(logits.expand(20000, 3), generator=torch.Generator().manual_seed(0))
    assert not draws.requires_grad
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    assert freq[1].item() == pytest.approx(0.75, abs=0.015) and freq[2].item() == 0.0
    assert gumbel_max_sample(torch.tensor([[1.0, 5.0]]), temperature=1e-3).item() == 1


@pytest.mark.parametrize("discriminator", [electra(), albert(), bert()], ids=["electra", "albert", "bert"])
def test_replaced_labels_exactly_where_the_sample_differs(discriminator, tokenizer, corpus, monkeypatch):
    model = rtd_model(discriminator)
    batch = masked_batch(tokenizer, corpus)
    selected = batch["labels"] != -100

    def half_right(logits, temperature=1.0, generator=None):  # every other sample is the original token
        samples = gumbel_max_sample(logits, temperature, generator)
        targets = batch["labels"][selected]
        return torch.where(torch.arange(len(samples)) % 2 == 0, targets, samples)

    monkeypatch.setattr(modeling_rtd, "gumbel_max_sample", half_right)
    out = model(**batch)
    original = torch.where(selected, batch["labels"], batch["input_ids"])
    assert torch.equal(out.corrupted_input_ids[~selected], original[~selected])
    assert torch.equal(out.corrupted_input_ids[selected], out.generator_samples)
    assert torch.equal(out.replaced, (out.corrupted_input_ids != original).long())
    assert out.replaced[selected][::2].sum() == 0  # sampled == original: labelled original
    assert out.replaced.sum() > 0 and not out.replaced[~selected].any()
    assert out.loss.item() == pytest.approx(out.mlm_loss.item() + 50 * out.discriminator_loss.item(), rel=1e-5)


@pytest.mark.parametrize("discriminator", [electra(), albert(), bert(hidden=48)], ids=["electra", "albert", "bert"])
def test_embeddings_are_one_tensor_tied_to_the_generator_output_and_trained_by_both_losses(
        discriminator, tokenizer, corpus):
    model = rtd_model(discriminator)
    shared = model.discriminator.get_input_embeddings().weight
    assert model.generator.get_input_embeddings().weight is shared
    assert model.generator.get_output_embeddings().weight is shared
    expected = "electra" if discriminator.model_type == "bert" else discriminator.model_type
    assert model.generator.config.model_type == expected  # BERT's embeddings are as wide as its hidden states
    gen, disc = model.generator.config, model.discriminator.config
    assert gen.hidden_size * 4 == disc.hidden_size and gen.num_attention_heads * 4 == disc.num_attention_heads
    assert gen.num_hidden_layers == disc.num_hidden_layers
    batch = masked_batch(tokenizer, corpus)
    for loss in ("mlm_loss", "discriminator_loss"):
        model.zero_grad()
        getattr(model(**batch), loss).backward()
        assert shared.grad is not None and shared.grad.abs().sum() > 0, loss


@pytest.mark.parametrize("discriminator", [electra(), albert()], ids=["electra", "albert"])
def test_the_discriminator_loss_does_not_reach_the_generator_through_sampling(discriminator, tokenizer, corpus):
    model = rtd_model(discriminator)
    model(**masked_batch(tokenizer, corpus)).discriminator_loss.backward()
    shared = {id(model.discriminator.get_input_embeddings().weight)}
    generator_only = [(n, p) for n, p in model.generator.named_parameters() if id(p) not in shared]
    assert generator_only and all(p.grad is None or not p.grad.any() for _, p in generator_only)
    assert any(p.grad is not None and p.grad.any() for p in model.discriminator.parameters())


def test_the_wrapper_saves_and_loads_with_its_embeddings_shared(tmp_path):
    model = rtd_model(electra())
    model.save_pretrained(tmp_path)
    loaded = RTDForPreTraining.from_pretrained(tmp_path)
    assert loaded.generator.get_input_embeddings().weight is loaded.discriminator.get_input_embeddings().weight
    assert loaded.generator.get_output_embeddings().weight is loaded.discriminator.get_input_embeddings().weight
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


# ---- learning -------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_loss_falls_and_the_discriminator_beats_the_all_original_baseline(tokenizer, corpus, tmp_path):
    model = rtd_model(electra(hidden=64, heads=4, embedding=32))
    tokenized = tokenize_corpus(corpus, tokenizer, max_seq_length=16)
    collator = rtd_collator(tokenizer)
    args = default_pretraining_arguments(str(tmp_path), max_steps=80, warmup_steps=10, learning_rate=2e-3,
                                         per_device_train_batch_size=16, logging_steps=20, use_cpu=True,
                                         disable_tqdm=True, remove_unused_columns=False, prediction_loss_only=True,
                                         seed=0)
    trainer = RTDTrainer(model=model, args=args, train_dataset=tokenized["train"], data_collator=collator,
                         eval_dataset=mask_once(tokenized["validation"], collator, seed=0))
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"]
    assert after["eval_mlm_loss"] < before["eval_mlm_loss"] - 1.0
    assert after["eval_discriminator_accuracy"] > after["eval_all_original_accuracy"] + 0.01
    assert after["eval_replaced_precision"] > 0.5 and after["eval_replaced_recall"] > 0.05
    assert after["eval_replaced_fraction"] == pytest.approx(0.15 * (1 - after["eval_generator_accuracy"]), abs=0.05)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged and {"generator_accuracy", "discriminator_accuracy", "replaced_precision", "replaced_recall",
                       "replaced_fraction"} <= set(logged[-1])


# ---- the entry point: saved layout, presets, continued pretraining --------------------------------------------------
def _pretrain(tmp_path, corpus, name, training=None, **kwargs):
    steps = kwargs.pop("max_steps", 4)
    args = PretrainingArguments(**{"max_seq_length": 16, **kwargs})
    training_args = default_pretraining_arguments(str(tmp_path / name), max_steps=steps, warmup_steps=0,
                                                  per_device_train_batch_size=8, use_cpu=True, disable_tqdm=True,
                                                  seed=0, **(training or {}))
    return pretrain(args, corpus, training_args), tmp_path / name


@pytest.mark.slow
def test_pretrain_from_a_config_file_saves_the_google_layout(tmp_path, tiny_paths, corpus):
    (tmp_path / "disc.json").write_text(json.dumps(electra().to_dict()))
    report, out = _pretrain(tmp_path, corpus, "electra", discriminator=str(tmp_path / "disc.json"),
                            tokenizer=tiny_paths[0], save_generator=True, two_segments=True)
    assert report["model"]["architecture"] == "ElectraForPreTraining" and not report["model"]["continued"]
    assert report["settings"]["max_steps"] == 4 and report["train_seconds"] > 0
    assert {"eval_discriminator_accuracy", "eval_replaced_recall", "eval_generator_accuracy"} <= set(report["eval"])
    assert json.loads((out / "pretraining_results.json").read_text())["objective"] == "rtd"
    assert isinstance(AutoModel.from_pretrained(out), ElectraModel)
    assert isinstance(AutoModelForPreTraining.from_pretrained(out), ElectraForPreTraining)
    generator = AutoModelForMaskedLM.from_pretrained(out / "generator")
    assert generator.config.hidden_size == 8
    assert AutoTokenizer.from_pretrained(out)("the cat")["input_ids"] == \
        AutoTokenizer.from_pretrained(tiny_paths[0])("the cat")["input_ids"]
    assert not any(name.endswith(".partial") for name in os.listdir(out))
    # the saved discriminator is a member like any other
    encoders = [str(out), tiny_paths[1]]
    model = MultiEncoderForSequenceClassification.from_encoders(encoders, num_labels=2)
    batch = MultiEncoderTokenizer.from_encoders(encoders)(["the cat sat", "a dog"], return_tensors="pt")
    assert model(**batch).logits.shape == (2, 2)


@pytest.mark.slow
def test_continued_pretraining_of_a_member_and_the_mlm_baseline(tmp_path, tiny_paths, corpus):
    report, out = _pretrain(tmp_path, corpus, "bert", discriminator=tiny_paths[0], max_steps=6)
    assert report["model"]["continued"] and report["model"]["architecture"] == "BertForTokenClassification"
    assert report["model"]["new_weights"] == ["classifier.bias", "classifier.weight"]
    assert AutoModelForTokenClassification.from_pretrained(out).config.id2label == {0: "replaced"}
    before, after = AutoModel.from_pretrained(tiny_paths[0]), AutoModel.from_pretrained(out)
    changed = [k for k, v in after.state_dict().items() if not torch.equal(v, before.state_dict()[k])]
    assert any("embeddings.word_embeddings" in k for k in changed) and any("layer" in k for k in changed)
    assert report["model"]["generator"]["model_type"] == "electra"

    report, out = _pretrain(tmp_path, corpus, "mlm", objective="mlm", discriminator="tiny", architecture="albert",
                            tokenizer=tiny_paths[0])
    assert report["model"]["architecture"] == "AlbertForMaskedLM" and "eval_loss" in report["eval"]
    assert AutoModel.from_pretrained(out).config.hidden_size == 128


@pytest.mark.slow
def test_a_pretraining_run_resumes_from_its_checkpoint_with_the_same_arguments_only(tmp_path, tiny_paths, corpus):
    common = {"discriminator": "tiny", "tokenizer": tiny_paths[0]}
    _pretrain(tmp_path, corpus, "run", max_steps=4, training={"save_strategy": "steps", "save_steps": 2}, **common)
    assert (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").is_file()
    # as if killed after the checkpoint of step 2: no later checkpoint, no final metrics
    shutil.rmtree(tmp_path / "run" / "checkpoint-4")
    os.remove(tmp_path / "run" / "train_results.json")
    resume = {"resume_from_checkpoint": "true", "save_strategy": "steps", "save_steps": 2}
    with pytest.raises(ValueError, match="other arguments"):
        _pretrain(tmp_path, corpus, "run", max_steps=4, training=resume, discriminator_weight=10.0, **common)
    report, _ = _pretrain(tmp_path, corpus, "run", max_steps=4, training=resume, **common)
    assert report["train"]["train_loss"] > 0
    assert [e["step"] for e in report["log_history"] if "train_runtime" in e] == [4]


@pytest.mark.slow
def test_rtd_as_an_adaptation_objective(tmp_path, tiny_paths, corpus):
    report = adapt_members(tiny_paths[:2], corpus, output_dir=str(tmp_path), encoder_names=["bert", "roberta"],
                           objective="rtd", max_steps=4, head_warmup_epochs=0.2, learning_rate=1e-3,
                           per_device_train_batch_size=8, use_cpu=True, disable_tqdm=True, max_seq_length=16)
    assert report["objective"] == "rtd" and all(m["adapted"] and m["new_head"] for m in report["members"])
    for member in report["members"]:  # the replaced-token metrics, as run_pretraining.py logs them (no perplexity)
        assert 0 <= member["end"]["replaced_recall"] <= 1 and 0 < member["end"]["replaced_fraction"] < 0.3
        assert "perplexity" not in member["end"] and member["end"]["discriminator_accuracy"] > 0
    for path, original in zip(report["encoders"], tiny_paths):
        model, reference = AutoModel.from_pretrained(path), AutoModel.from_pretrained(original)
        assert type(model) is type(reference)
        assert any(not torch.equal(v, reference.state_dict()[k]) for k, v in model.state_dict().items())


# ---- corpus: two-segment blocks -------------------------------------------------------------------------------------
def test_two_segment_blocks(tokenizer, corpus):
    blocks = tokenize_corpus(corpus, tokenizer, max_seq_length=24, two_segments=True, seed=1)["train"]
    again = tokenize_corpus(corpus, tokenizer, max_seq_length=24, two_segments=True, seed=1)["train"]
    assert blocks["input_ids"] == again["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    lengths = [len(ids) for ids in blocks["input_ids"]]
    assert max(lengths) == 24 and sum(n == 24 for n in lengths) >= len(lengths) - 1
    cuts = set()
    for ids, types, special in zip(blocks["input_ids"], blocks["token_type_ids"], blocks["special_tokens_mask"]):
        assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2
        first = ids.index(sep) + 1
        assert types == [0] * first + [1] * (len(ids) - first)
        assert special == [int(i in (cls, sep)) for i in ids]
        cuts.add(first)
    assert len(cuts) > 3  # the split point is random


# ---- bad inputs -----------------------------------------------------------------------------------------------------
def test_bad_inputs(tokenizer, tiny_paths, corpus, tmp_path):
    with pytest.raises(ValueError, match="different vocabularies"):
        RTDConfig(generator=generator_config(electra()), discriminator=ElectraConfig(**{**SIZES, "vocab_size": 99}))
    with pytest.raises(ValueError, match="one width"):
        RTDConfig(generator=generator_config(electra(embedding=24)), discriminator=electra(embedding=16))
    no_mask = BertTokenizer(vocab=bert_vocab(), mask_token=None)
    no_mask.mask_token = None
    with pytest.raises(ValueError, match="no mask token"):
        build_rtd_model(PretrainingArguments(discriminator="tiny"), no_mask)
    with pytest.raises(ValueError, match="beyond member"):
        build_rtd_model(PretrainingArguments(discriminator=tiny_paths[0], max_seq_length=65), tokenizer)
    with pytest.raises(ValueError, match="tokenizer has"):
        build_rtd_model(PretrainingArguments(discriminator=tiny_paths[0]),
                        AutoTokenizer.from_pretrained(tiny_paths[1]))
    with pytest.raises(ValueError, match="holds no text"):
        build_corpus(["", ""])
    empty = build_corpus(["the cat"] * 4, deduplicate=False)
    empty["validation"] = empty["validation"].select([])
    with pytest.raises(ValueError, match="no 'validation' text"):
        _pretrain(tmp_path, empty, "empty", discriminator="tiny", tokenizer=tiny_paths[0])
    with pytest.raises(ValueError, match="give --tokenizer"):
        _pretrain(tmp_path, corpus, "no_tokenizer", discriminator="tiny")
    with pytest.raises(ValueError, match="beyond member"):
        _pretrain(tmp_path, corpus, "too_long", discriminator=tiny_paths[0], max_seq_length=65)
    assert not (tmp_path / "no_tokenizer").exists() and not (tmp_path / "too_long").exists()  # nothing half-written
    with pytest.raises(ValueError, match="generator_size"):
        PretrainingArguments(generator_size=0)
    with pytest.raises(ValueError, match="no masked-LM class"):
        PretrainingArguments(architecture="gpt2")


# ---- the scripts ----------------------------------------------------------------------------------------------------
def test_run_pretraining_defaults_are_electra_small_settings(tmp_path):
    args, corpus_args, training_args = run_pretraining.parse_args(["--train_file", "x.txt", "--output_dir",
                                                                   str(tmp_path)])
    assert (args.objective, args.discriminator, args.generator_size, args.discriminator_weight) == (
        "rtd", "tiny", 0.25, 50.0)
    assert (training_args.per_device_train_batch_size, training_args.learning_rate, training_args.adam_epsilon,
            training_args.warmup_steps, training_args.max_steps) == (128, 5e-4, 1e-6, 10000, 1000000)
    assert corpus_args.train_file == ["x.txt"]


@pytest.mark.slow
def test_run_pretraining_and_the_protocol_script(tmp_path, tiny_paths, corpus, shared_data):
    lines = tmp_path / "corpus.txt"
    lines.write_text("\n".join([*corpus["train"]["text"], *corpus["validation"]["text"]]) + "\n")
    common = ["--discriminator", "tiny", "--tokenizer", tiny_paths[0], "--train_file", str(lines),
              "--max_seq_length", "16", "--per_device_train_batch_size", "8", "--max_steps", "3",
              "--warmup_steps", "0", "--use_cpu", "true", "--disable_tqdm", "true"]
    for objective in ("rtd", "mlm"):
        report = run_pretraining.main([*common, "--objective", objective, "--output_dir", str(tmp_path / objective)])
        assert report["objective"] == objective and report["train"]["train_loss"] > 0
    with pytest.raises(ValueError, match="not empty"):
        run_pretraining.main([*common, "--output_dir", str(tmp_path / "rtd")])  # no silent reuse of a run folder

    spec = importlib.util.spec_from_file_location("pretraining_protocol",
                                                  os.path.join(REPO, "scripts", "pretraining_protocol.py"))
    protocol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(protocol)
    argv = ["--models", f"rtd={tmp_path / 'rtd'}", f"mlm={tmp_path / 'mlm'}", "--tasks", "mrpc", "--seeds", "1", "2",
            "--data_dir", shared_data, "--max_train_samples", "32", "--max_eval_samples", "32",
            "--num_train_epochs", "1", "--max_seq_length", "32", "--output_dir", str(tmp_path / "glue"),
            "--results", str(tmp_path / "results" / "pretraining"), "--", "--use_cpu", "true"]
    summary = protocol.main(argv)
    scores = summary["tasks"]["mrpc"]["scores"]
    assert set(scores) == {"rtd", "mlm"} and all(len(s["best_epoch"]["scores"]) == 2 for s in scores.values())
    assert summary["tasks"]["mrpc"]["winner"]["model"] in ("rtd", "mlm", "tie")
    assert summary["pretraining"]["rtd"]["max_steps"] == 3 and "eval_replaced_recall" in summary["pretraining"]["rtd"]
    md = (tmp_path / "results" / "pretraining.md").read_text()
    assert "| rtd | rtd | 3 x 8 x 16 |" in md and "| mrpc | f1 |" in md
