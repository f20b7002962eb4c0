"""Every interrupted run can be continued (and is the run it claims to be), and every option is honoured or refused.

Resuming: seeds not yet started start afresh, arguments that change the training must match the checkpoint's (or are
refused naming the key), damaged checkpoints are skipped naming the file, a finished run stays as it is, and
`--overwrite_output_dir` starts from an empty folder. Options: the ones that used to be ignored or rewritten without a
word are refused naming the option (or honoured: `--task_module`). The same guards in every script: no non-finite
weights saved, no nan perplexity, no folder blocked by a run that stopped on bad arguments. A model loads as the head
it was saved as.
"""

import json
import logging
import os
import shutil

import numpy as np
import pytest
import torch
import yaml

import run_glue_multi
import run_mlm_multi
import run_multitask
import run_pretraining
from hf_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
)
from hf_multiencoder.training.runs import checkpoint_problem, last_complete_checkpoint

NAMES = ["bert", "roberta"]
ROWS = ["the cat sat,pos", "a dog left,neg", "she can go,pos", "he went,neg"] * 4


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.csv"
    path.write_text("sentence,label\n" + "\n".join(ROWS) + "\n")
    return str(path)


def glue_args(tiny_paths, data, out, *extra):
    return ["--encoders", *tiny_paths[:2], "--encoder_names", *NAMES, "--train_file", data, "--validation_file",
            data, "--output_dir", str(out), "--num_train_epochs", "2", "--per_device_train_batch_size", "8",
            "--learning_rate", "1e-3", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
            "--max_seq_length", "16", "--save_strategy", "epoch", *extra]


MULTITASK = {"ner": {"task_name": "conll2003", "max_train_samples": 16, "max_eval_samples": 8},
             "trec": {"task_name": "trec", "max_train_samples": 16, "max_eval_samples": 8}}


def multitask_args(tiny_paths, shared_data, out, *extra):
    return ["--encoders", *tiny_paths[:2], "--encoder_names", *NAMES, "--output_dir", str(out),
            "--tasks", json.dumps(MULTITASK), "--data_dir", shared_data, "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8", "--learning_rate", "1e-3",
            "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true", "--do_train", "--do_eval",
            "--max_seq_length", "16", "--save_strategy", "steps", "--save_steps", "1", *extra]


def seeds_run(script, tiny_paths, data, shared_data, out, *extra):
    if script == "run_glue_multi":
        return run_glue_multi.main(glue_args(tiny_paths, data, out, "--seeds", "1", "2", *extra))
    return run_multitask.main(multitask_args(tiny_paths, shared_data, out, "--seeds", "1", "2", *extra))


# ---- rule 1: resuming -------------------------------------------------------------------------------------------
@pytest.mark.slow  # two short trainings, then the resumed one
@pytest.mark.parametrize("script", ["run_glue_multi", "run_multitask"])
@pytest.mark.parametrize("killed", ["before seed 2's folder", "after seed 2's run_args.json"])
def test_resume_starts_the_seeds_not_yet_started(script, killed, tiny_paths, data, shared_data, tmp_path, caplog):
    out = tmp_path / "run"
    seeds_run(script, tiny_paths, data, shared_data, out)
    seed_1 = json.loads((out / "seed_1" / "trainer_state.json").read_text())
    # as if killed while seed 1 was the last to run: seed 2 has no folder, or only its run_args.json
    run_args = (out / "seed_2" / "run_args.json").read_text()
    shutil.rmtree(out / "seed_2")
    if killed.startswith("after"):
        (out / "seed_2").mkdir()
        (out / "seed_2" / "run_args.json").write_text(run_args)
    with caplog.at_level(logging.WARNING):
        table = seeds_run(script, tiny_paths, data, shared_data, out, "--resume_from_checkpoint", "true")
    assert "Seed 2 had not started" in caplog.text and "is finished" in caplog.text
    assert [r["seed"] for r in table["runs"]] == [1, 2]
    assert (out / "seed_2" / "model.safetensors").is_file()
    # seed 1 was finished: nothing trained again
    assert json.loads((out / "seed_1" / "trainer_state.json").read_text())["global_step"] == seed_1["global_step"]


@pytest.fixture(scope="module")
def finished_run(tiny_paths, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    run_glue_multi.main(glue_args(tiny_paths, data, out, "--seed", "7", "--save_only_model", "false"))
    return out


@pytest.mark.parametrize("change, key", [
    (["--learning_rate", "5e-3"], "training.learning_rate"),
    (["--per_device_train_batch_size", "4"], "training.per_device_train_batch_size"),
    (["--num_train_epochs", "3"], "training.num_train_epochs"),
    (["--max_steps", "9"], "training.max_steps"),
    (["--gradient_accumulation_steps", "2"], "training.gradient_accumulation_steps"),
    (["--warmup_steps", "2"], "training.warmup_steps"),
    (["--weight_decay", "0.1"], "training.weight_decay"),
    (["--lr_scheduler_type", "constant"], "training.lr_scheduler_type"),
    (["--optim", "sgd"], "training.optim"),
    (["--encoder_learning_rates", "1e-2", "1e-2"], "model.encoder_learning_rates"),
])
def test_resuming_with_other_training_arguments_is_refused_naming_the_key(change, key, finished_run, tiny_paths,
                                                                          data):
    with pytest.raises(ValueError, match=rf"other arguments .*{key}: "):
        run_glue_multi.main(glue_args(tiny_paths, data, finished_run, "--seed", "7", "--save_only_model", "false",
                                      "--resume_from_checkpoint", "true", *change))


@pytest.mark.slow  # a LoRA training, then the resumed call
def test_resuming_a_finished_lora_run_changes_nothing(tiny_paths, data, tmp_path, caplog):
    """A LoRA run saves the merged model and its adapters: resuming it when finished neither trains again nor rewrites
    them."""
    out = tmp_path / "lora"
    args = glue_args(tiny_paths, data, out, "--lora_r", "2", "--save_only_model", "false")
    run_glue_multi.main(args)
    # what the training wrote (the evaluations, run again on resuming, rewrite their own files and results.json)
    files = [p for p in sorted(out.rglob("*")) if p.is_file() and p.suffix in (".safetensors", ".json")
             and "checkpoint-" not in str(p) and p.name not in ("all_results.json", "results.json")
             and not p.name.startswith("eval_")]
    trained_seconds = json.loads((out / "results.json").read_text())["runs"][0]["train_seconds"]
    assert any(p.parent.name == "adapter" for p in files) and (out / "model.safetensors") in files
    before = {p: p.read_bytes() for p in files}
    with caplog.at_level(logging.WARNING):
        table = run_glue_multi.main(args + ["--resume_from_checkpoint", "true"])
    assert "nothing to resume" in caplog.text
    assert [p.relative_to(out) for p, content in before.items() if p.read_bytes() != content] == []
    # the table reports the time the run trained, not the resumed call's
    assert table["runs"][0]["score"] is not None and table["runs"][0]["train_seconds"] == trained_seconds > 0


@pytest.mark.slow  # two short trainings
def test_resume_true_with_no_checkpoint_yet_trains_from_the_beginning(tiny_paths, data, tmp_path, caplog):
    """A job script that always passes --resume_from_checkpoint true, and a run killed before its first save, start
    from the beginning (with a warning) instead of stopping: before, the rerun was refused, and the run without the
    option was refused too ("not empty"), leaving only --overwrite_output_dir."""
    fresh = tmp_path / "fresh"
    with caplog.at_level("WARNING"):
        run_glue_multi.main(glue_args(tiny_paths, data, fresh, "--resume_from_checkpoint", "true"))
    assert "holds no complete checkpoint yet; training from the beginning" in caplog.text
    assert (fresh / "model.safetensors").is_file()
    killed = tmp_path / "killed"  # started (its run_args.json written), killed before the first checkpoint
    killed.mkdir()
    shutil.copy(fresh / "run_args.json", killed / "run_args.json")
    run_glue_multi.main(glue_args(tiny_paths, data, killed, "--resume_from_checkpoint", "true"))
    assert (killed / "model.safetensors").is_file()


def test_resuming_a_finished_run_changes_nothing(finished_run, tiny_paths, data, caplog):
    before = {name: (finished_run / name).read_bytes() for name in ("model.safetensors", "trainer_state.json",
                                                                    "train_results.json")}
    with caplog.at_level(logging.WARNING):
        table = run_glue_multi.main(glue_args(tiny_paths, data, finished_run, "--seed", "7", "--save_only_model",
                                              "false", "--resume_from_checkpoint", "true"))
    assert "is finished (step 4): nothing to resume" in caplog.text
    assert all((finished_run / name).read_bytes() == content for name, content in before.items())
    assert table["runs"][0]["seed"] == 7 and table["runs"][0]["score"] is not None


def _checkpoint(folder, damage: str | None = None):
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(64)}, str(folder / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": 1}, folder / "scheduler.pt")
    (folder / "trainer_state.json").write_text('{"global_step": 1}')
    if damage == "no scheduler.pt":
        os.remove(folder / "scheduler.pt")
    elif damage is not None:  # a copy cut off in the middle
        path = folder / damage.split()[0]
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])


@pytest.mark.parametrize("damage, named", [
    ("no scheduler.pt", "no scheduler.pt"),
    ("model.safetensors truncated", "model.safetensors is damaged"),
    ("optimizer.pt truncated", "optimizer.pt is damaged"),
    ("scheduler.pt truncated", "scheduler.pt is damaged"),
])
def test_a_damaged_checkpoint_is_skipped_naming_the_file(damage, named, tmp_path, caplog):
    _checkpoint(tmp_path / "checkpoint-4")
    _checkpoint(tmp_path / "checkpoint-8", damage)
    assert checkpoint_problem(str(tmp_path / "checkpoint-4")) is None
    with caplog.at_level(logging.WARNING):
        assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
    assert f"checkpoint-8: {named}" in caplog.text


def test_a_study_run_resumes_from_its_last_checkpoint_whose_callbacks_saved(tmp_path, caplog):
    """A study run (scripts/glue_sweep.py) cut during a save leaves a newer checkpoint without the epoch predictions or
    the training clock, which the Trainer's callbacks write last: it resumes from the one before, never crashes on it;
    and those files are written whole or not at all."""
    from types import SimpleNamespace

    from hf_multiencoder.training.selection import EpochPredictions, TrainingClock, load_last_checkpoint

    args, control = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace()
    saved_predictions, saved_clock = EpochPredictions({}, spec=None), TrainingClock()
    saved_predictions.epochs, saved_predictions.steps = [{"dev": {"outputs": np.ones((3, 2))}}], [4]
    saved_clock.before = 12.5
    _checkpoint(tmp_path / "checkpoint-4")
    for callback in (saved_predictions, saved_clock):
        callback.on_save(args, SimpleNamespace(global_step=4, epoch=1.0, is_world_process_zero=True), control)
    assert sorted(os.listdir(tmp_path / "checkpoint-4")) == sorted(
        ["model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json", EpochPredictions.FILE,
         TrainingClock.FILE])  # no temporary file left beside them
    _checkpoint(tmp_path / "checkpoint-8")  # the Trainer's files written, the callbacks' not yet
    _checkpoint(tmp_path / "checkpoint-12")
    saved_predictions.on_save(args, SimpleNamespace(global_step=12, epoch=3.0, is_world_process_zero=True), control)

    predictions, clock = EpochPredictions({}, spec=None), TrainingClock()
    with caplog.at_level(logging.WARNING):
        assert load_last_checkpoint(str(tmp_path), predictions, clock) == str(tmp_path / "checkpoint-4")
    assert f"checkpoint-12: no {TrainingClock.FILE}" in caplog.text
    assert f"checkpoint-8: no {EpochPredictions.FILE}, {TrainingClock.FILE}" in caplog.text
    assert predictions.steps == [4] and np.array_equal(predictions.epochs[0]["dev"]["outputs"], np.ones((3, 2)))
    assert clock.before == pytest.approx(12.5, abs=1) and clock.resumed_after_epochs == 1
    shutil.rmtree(tmp_path / "checkpoint-4")
    assert load_last_checkpoint(str(tmp_path), EpochPredictions({}, spec=None), TrainingClock()) is None
    assert load_last_checkpoint(str(tmp_path / "never_made"), TrainingClock()) is None


@pytest.mark.slow  # two short runs
def test_overwrite_starts_from_an_empty_folder(tiny_paths, data, tmp_path):
    out = tmp_path / "run"
    run_glue_multi.main(glue_args(tiny_paths, data, out))
    assert {"results.md", "eval_results.json", "fusion_weights.json"} <= set(os.listdir(out))
    run_glue_multi.main(glue_args(tiny_paths, data, out, "--overwrite_output_dir", "true", "--do_train",
                                  "--save_strategy", "no"))
    left = set(os.listdir(out))
    assert not left & {"results.md", "results.json", "eval_results.json", "fusion_weights.json"}
    assert not [e for e in left if e.startswith("checkpoint-")]
    assert not [k for k in json.loads((out / "all_results.json").read_text()) if k.startswith("eval_")]


@pytest.mark.slow  # two short pretraining runs
@pytest.mark.parametrize("script", ["run_mlm_multi", "run_pretraining"])
def test_the_pretraining_scripts_name_the_changed_keys_and_keep_a_finished_run(script, tiny_paths, corpus_file,
                                                                                 tmp_path, caplog):
    out = tmp_path / "out"
    if script == "run_mlm_multi":
        argv = ["--encoders", tiny_paths[0], "--encoder_names", "bert", "--train_file", corpus_file, "--output_dir",
                str(out), "--head_warmup", "never", *COMMON]
        main, changed = run_mlm_multi.main, r"learning_rate: 1e-05 -> 0.001"
    else:
        argv = ["--objective", "mlm", "--discriminator", tiny_paths[0], "--train_file", corpus_file, "--output_dir",
                str(out), "--save_strategy", "steps", "--save_steps", "1", *COMMON]
        main, changed = run_pretraining.main, r"training.learning_rate: 0.0005 -> 0.001"
    main(argv)
    with pytest.raises(ValueError, match=changed) as err:
        main([*argv, "--resume_from_checkpoint", "true", "--learning_rate", "1e-3"])
    assert "{" not in str(err.value)  # the changed keys, not the whole settings dict
    weights = out / ("bert" if script == "run_mlm_multi" else "") / "model.safetensors"
    before = weights.read_bytes()
    with caplog.at_level(logging.WARNING):
        main([*argv, "--resume_from_checkpoint", "true"])
    assert weights.read_bytes() == before  # nothing trained or saved again
    if script == "run_pretraining":
        assert "is finished: nothing to resume" in caplog.text


# ---- rule 2: no option silently ignored -------------------------------------------------------------------------
def _glue_parse(tiny_paths, tmp_path, *extra, data_args=("--train_file", "x.csv")):
    return run_glue_multi.parse_args(["--encoders", *tiny_paths[:2], *data_args, "--output_dir",
                                      str(tmp_path / "out"), *extra])


@pytest.mark.parametrize("extra, data_args, message", [
    (["--max_seq_length", "0"], ("--train_file", "x.csv"), r"--max_seq_length must be at least 2 .*got 0"),
    (["--max_seq_length", "1"], ("--train_file", "x.csv"), r"--max_seq_length must be at least 2 .*got 1"),
    ([], ("--task_name", "sst2", "--train_file", "x.csv"), "--train_file describe"),
    ([], ("--task_name", "sst2", "--text_column_names", "body"), "--text_column_names describe"),
    ([], ("--task_name", "sst2", "--label_column_name", "stars"), "--label_column_name describe"),
    (["--frozen_feature_cache", "cache"], ("--train_file", "x.csv"), "--frozen_feature_cache .* --freeze_encoders"),
    (["--adaptive_mlm_epochs", "-1"], ("--train_file", "x.csv"), "--adaptive_mlm_epochs must be >= 0"),
    (["--encoder_names", "a"], ("--train_file", "x.csv"), r"--encoder_names has 1 value\(s\)"),
    (["--encoder_learning_rates", "1e-3", "1e-3", "1e-3"], ("--train_file", "x.csv"),
     r"--encoder_learning_rates has 3 value\(s\)"),
    (["--pooling", "cls", "mean", "mean"], ("--train_file", "x.csv"), r"--pooling has 3 value\(s\)"),
    # rule 5: what to fix
    (["--seeds", "1", "1"], ("--train_file", "x.csv"), "--seeds 1 1 repeats a seed"),
    (["--max_train_samples", "0"], ("--train_file", "x.csv"), "--max_train_samples must be at least 1"),
])
def test_run_glue_refuses_options_it_would_ignore(extra, data_args, message, tiny_paths, tmp_path):
    with pytest.raises(ValueError, match=message):
        _glue_parse(tiny_paths, tmp_path, *extra, data_args=data_args)


def test_the_same_checkpoint_twice_without_names_says_to_name_them(tiny_paths, tmp_path):
    with pytest.raises(ValueError, match="more than once: pass --encoder_names"):
        run_glue_multi.parse_args(["--encoders", tiny_paths[0], tiny_paths[0], "--train_file", "x.csv",
                                   "--output_dir", str(tmp_path)])
    model_args = run_glue_multi.parse_args(["--encoders", tiny_paths[0], tiny_paths[0], "--encoder_names", "a", "b",
                                            "--train_file", "x.csv", "--output_dir", str(tmp_path)])[0]
    assert model_args.encoder_names == ["a", "b"]


@pytest.mark.parametrize("script", ["run_glue_multi", "run_multitask"])
@pytest.mark.parametrize("epochs", ["0", "-1"])
def test_no_training_at_all_is_refused(script, epochs, tiny_paths, data, shared_data, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=f"--num_train_epochs must be a positive number, got {float(epochs)}"):
        if script == "run_glue_multi":
            run_glue_multi.main(glue_args(tiny_paths, data, out, "--num_train_epochs", epochs))
        else:
            run_multitask.main(multitask_args(tiny_paths, shared_data, out, "--max_steps", "-1",
                                              "--num_train_epochs", epochs))
    assert not out.exists() or not os.listdir(out)


@pytest.mark.parametrize("script", ["run_glue_multi", "run_multitask"])
def test_no_accumulated_batch_is_refused(script, tiny_paths, data, shared_data, tmp_path):
    """--gradient_accumulation_steps 0: TrainingArguments accepts it; the scripts refuse it before any folder is
    made."""
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="--gradient_accumulation_steps must be at least 1, got 0"):
        if script == "run_glue_multi":
            run_glue_multi.main(glue_args(tiny_paths, data, out, "--gradient_accumulation_steps", "0"))
        else:
            run_multitask.main(multitask_args(tiny_paths, shared_data, out, "--gradient_accumulation_steps", "0"))
    assert not out.exists() or not os.listdir(out)


def test_adaptation_with_no_training_is_refused(tiny_paths, tmp_path):
    from hf_multiencoder.pretraining.adaptation import adapt_members

    with pytest.raises(ValueError, match="--num_train_epochs must be a positive number, got 0"):
        adapt_members(tiny_paths[:1], None, output_dir=str(tmp_path / "a"), num_train_epochs=0, use_cpu=True)


def test_a_config_files_member_options_do_not_follow_other_members_silently(tiny_paths, tmp_path):
    """The config's names and rates were written for its members: replacing the members on the command line without
    them is refused naming them (a second MiniLM was labelled MPNet and trained at MPNet's rate)."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"encoders": tiny_paths[:2], "encoder_names": NAMES, "pooling": ["cls", "mean"],
                                      "encoder_learning_rates": [1e-3, 2e-3], "fusion": "dme", "train_file": "x.csv",
                                      "output_dir": str(tmp_path / "out")}))
    other = [tiny_paths[0], tiny_paths[2]]
    with pytest.raises(ValueError, match=r"per-member option\(s\) encoder_names, encoder_learning_rates, pooling"):
        run_glue_multi.parse_args([str(config), "--encoders", *other])
    mlm = tmp_path / "m.yaml"
    mlm.write_text(yaml.safe_dump({"encoders": tiny_paths[:2], "encoder_names": NAMES, "train_file": "x.txt",
                                   "output_dir": str(tmp_path / "o")}))
    with pytest.raises(ValueError, match=r"per-member option\(s\) encoder_names"):
        run_mlm_multi.parse_args([str(mlm), "--encoders", *other])
    # the same members, or the per-member options given too: accepted
    model_args = run_glue_multi.parse_args([str(config), "--encoders", *tiny_paths[:2]])[0]
    assert model_args.encoder_names == NAMES
    model_args = run_glue_multi.parse_args([str(config), "--encoders", *other, "--encoder_names", "b", "d",
                                            "--encoder_learning_rates", "1e-3", "1e-3", "--pooling", "mean"])[0]
    assert model_args.encoder_names == ["b", "d"] and model_args.encoder_learning_rates == [1e-3, 1e-3]


@pytest.mark.parametrize("weights, message", [
    ('{"ner": 0, "trec": 0}', "are all 0"),
    ('{"ner": NaN}', "must be finite numbers"),
    ('{"ner": -1}', "must be finite numbers"),
])
def test_multitask_loss_weights_that_train_nothing_are_refused(weights, message, tiny_paths, tmp_path):
    with pytest.raises(ValueError, match=message):
        run_multitask.parse_args(["--encoders", *tiny_paths[:2], "--tasks", json.dumps(MULTITASK), "--output_dir",
                                  str(tmp_path), "--loss_weights", weights])


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_non_finite_discriminator_weight_is_refused(value, tmp_path):
    with pytest.raises(ValueError, match="--discriminator_weight must be a finite number"):
        run_pretraining.parse_args(["--train_file", "x.txt", "--output_dir", str(tmp_path), "--discriminator_weight",
                                    value])


def test_a_discriminator_with_another_vocabulary_is_refused(tiny_paths):
    from transformers import AutoTokenizer

    from hf_multiencoder.pretraining.rtd import PretrainingArguments, build_mlm_model, build_rtd_model

    other = AutoTokenizer.from_pretrained(tiny_paths[2])  # DistilBERT: another vocabulary than the BERT member's
    assert other.get_vocab() != AutoTokenizer.from_pretrained(tiny_paths[0]).get_vocab()
    for build, objective in ((build_rtd_model, "rtd"), (build_mlm_model, "mlm")):
        with pytest.raises(ValueError, match="has another vocabulary than the discriminator"):
            build(PretrainingArguments(objective=objective, discriminator=tiny_paths[0], max_seq_length=16), other)


# ---- rule 3: the same guards everywhere -------------------------------------------------------------------------
@pytest.fixture
def nan_member(tiny_paths, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_paths[0])
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[:] = float("nan")
    model.save_pretrained(tmp_path / "nan_member")
    AutoTokenizer.from_pretrained(tiny_paths[0]).save_pretrained(tmp_path / "nan_member")
    return str(tmp_path / "nan_member")


@pytest.fixture
def corpus_file(tmp_path):
    from hf_multiencoder.testing_utils import WORDS

    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(" ".join(WORDS[(i + j) % 24] for j in range(10)) for i in range(40)) + "\n")
    return str(path)


COMMON = ["--max_seq_length", "16", "--per_device_train_batch_size", "8", "--max_steps", "2", "--warmup_steps", "0",
          "--use_cpu", "true", "--disable_tqdm", "true", "--report_to", "none"]


@pytest.mark.parametrize("script", ["run_mlm_multi", "run_pretraining"])
def test_non_finite_weights_are_never_saved_by_the_pretraining_scripts(script, nan_member, corpus_file, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FloatingPointError, match="non-finite weights"):
        if script == "run_mlm_multi":
            run_mlm_multi.main(["--encoders", nan_member, "--encoder_names", "nan", "--train_file", corpus_file,
                                "--output_dir", str(out), "--head_warmup", "never", *COMMON])
        else:
            run_pretraining.main(["--objective", "mlm", "--discriminator", nan_member, "--train_file", corpus_file,
                                  "--output_dir", str(out), *COMMON])
    assert not (out / "nan" / "model.safetensors").exists() and not (out / "model.safetensors").exists()


def test_a_held_out_split_with_no_masked_token_says_why(tiny_paths):
    from transformers import AutoTokenizer

    from hf_multiencoder.data.corpus import build_corpus, tokenize_corpus
    from hf_multiencoder.pretraining.adaptation import AdaptationArguments, MaskedLMObjective, mask_once

    tokenizer = AutoTokenizer.from_pretrained(tiny_paths[0])
    corpus = build_corpus(["the cat", "a dog", "he went", "she can"] * 2, deduplicate=False)
    held_out = tokenize_corpus(corpus, tokenizer, max_seq_length=16)["validation"]
    collator = MaskedLMObjective().data_collator(tokenizer, AdaptationArguments(mlm_probability=1e-6))
    with pytest.raises(ValueError, match="got no masked token .* cannot be computed"):
        mask_once(held_out, collator, seed=0)


@pytest.mark.slow  # one short training
def test_a_run_stopped_on_bad_arguments_does_not_block_the_corrected_rerun(tiny_paths, data, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError):  # found once the model is built: after the run folder was prepared
        run_glue_multi.main(glue_args(tiny_paths, data, out, "--freeze_encoders", "nobody"))
    table = run_glue_multi.main(glue_args(tiny_paths, data, out, "--save_strategy", "no"))
    assert table["runs"][0]["score"] is not None


def test_a_training_file_alone_says_how_to_evaluate_or_train_only(tiny_paths, data, tmp_path):
    argv = glue_args(tiny_paths, data, tmp_path / "out")
    i = argv.index("--validation_file")
    del argv[i:i + 2]
    with pytest.raises(ValueError, match="needs a validation split.*Add --validation_file, or pass --do_train alone"):
        run_glue_multi.main(argv)


def test_a_validation_file_alone_says_to_add_a_training_file(tiny_paths, tmp_path):
    with pytest.raises(ValueError, match="needs a training file: add --train_file, or pass --do_eval alone"):
        _glue_parse(tiny_paths, tmp_path, data_args=("--validation_file", "dev.csv"))


TASK_MODULE = '''
from datasets import Dataset, DatasetDict

from hf_multiencoder import TaskSpec, register_task

ROWS = {"sentence1": ["the cat sat", "a dog left", "she can go", "he went"] * 4, "label": [1, 0, 1, 0] * 4}


def read(spec, path):
    return DatasetDict({"train": Dataset.from_dict(ROWS), "validation": Dataset.from_dict(ROWS)})


register_task(TaskSpec("my_reviews", label_list=["neg", "pos"], reader=read, local_path="my_reviews"),
              overwrite=True)
'''


@pytest.mark.slow  # one short training
def test_a_registered_task_runs_with_task_module(tiny_paths, tmp_path, registry):
    module = tmp_path / "my_tasks.py"
    module.write_text(TASK_MODULE)
    (tmp_path / "data" / "my_reviews").mkdir(parents=True)
    argv = ["--encoders", *tiny_paths[:2], "--task_name", "my_reviews", "--data_dir", str(tmp_path / "data"),
            "--output_dir", str(tmp_path / "out"), "--num_train_epochs", "1", "--report_to", "none", "--use_cpu",
            "true", "--disable_tqdm", "true", "--max_seq_length", "16"]
    with pytest.raises(ValueError, match="Unknown task 'my_reviews'"):
        run_glue_multi.parse_args(argv)
    with pytest.raises(ValueError, match="--task_module nowhere.py: no such file"):
        run_glue_multi.parse_args(["--task_module", "nowhere.py", *argv])
    table = run_glue_multi.main(["--task_module", str(module), *argv])
    assert table["task"] == "my_reviews" and table["runs"][0]["score"] is not None
    task_args = run_multitask.parse_args(["--task_module", str(module), "--encoders", *tiny_paths[:2], "--tasks",
                                          '{"mine": "my_reviews", "trec": "trec"}', "--output_dir",
                                          str(tmp_path / "mt")])[1]
    assert task_args.tasks["mine"] == {"task_name": "my_reviews"}


# ---- rule 4: a model is loaded as what it is -------------------------------------------------------------------
@pytest.mark.parametrize("saved, loaded", [
    (MultiEncoderForTokenClassification, MultiEncoderForSequenceClassification),
    (MultiEncoderForSequenceClassification, MultiEncoderForTokenClassification),
])
def test_a_folder_saved_for_another_head_is_refused_naming_both(saved, loaded, tiny_paths, tmp_path):
    saved.from_encoders(tiny_paths[:2], num_labels=3).save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match=f"saved as a {saved.__name__}, not a {loaded.__name__}"):
        loaded.from_pretrained(tmp_path / "model")
    assert isinstance(saved.from_pretrained(tmp_path / "model"), saved)


# ---- rule 5: errors that say what to fix ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def heads(tiny_paths):
    from hf_multiencoder import MultiEncoderTokenizer

    torch.manual_seed(0)
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    return (MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], num_labels=2),
            MultiEncoderForTokenClassification.from_encoders(tiny_paths[:2], num_labels=3), tokenizer)


@pytest.mark.parametrize("case, message", [
    ("predict_tags with an empty string", r"Sentence\(s\) \[1\] have no words"),
    ("predict_tags batch_size 0", "`batch_size` must be a positive integer, got 0"),
    ("predict_with_fusion_weights batch_size 0", "`batch_size` must be a positive integer, got 0"),
])
def test_predict_helpers_say_what_to_fix(case, message, heads):
    sequence, token, tokenizer = heads
    with pytest.raises(ValueError, match=message):
        if case.startswith("predict_tags with"):
            token.predict_tags(tokenizer, ["the cat sat", "  "])
        elif case.startswith("predict_tags"):
            token.predict_tags(tokenizer, ["the cat sat"], batch_size=0)
        else:
            sequence.predict_with_fusion_weights(tokenizer, ["the cat sat"], batch_size=0)


def test_predict_helpers_take_a_generator(heads):
    sequence, token, tokenizer = heads
    texts = ["the cat sat", "a dog"]
    assert sequence.predict_with_fusion_weights(tokenizer, (t for t in texts))["Sentences"] == texts
    assert [r["words"] for r in token.predict_tags(tokenizer, (t for t in texts))] == [t.split() for t in texts]
