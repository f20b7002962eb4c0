"""Every bad input ends in a clear error naming the problem (or a correct result), never in a silently wrong run.

One parametrised table for the inputs (input -> exception type and a phrase of its message), then the runs a user
hit: rerunning into a used folder, a checkpoint cut off by a kill, an infinite label, label spaces, a tokenizer folder
swapped for another member's, a config edited after saving, padding without an attention mask.
"""

import json
import logging
import os
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification
from transformers.utils import logging as hf_logging

import run_glue_multi
from hf_multiencoder import (
    MultiEncoderConfig,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderTokenizer,
    load_task,
)
from hf_multiencoder.data.loading import load_conll_files, load_files, read_conll
from hf_multiencoder.training.runs import last_complete_checkpoint, resolve_resume

NAMES = ["bert", "roberta"]


@pytest.fixture(scope="module")
def pair(tiny_paths):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, num_labels=2)
    return model.eval(), MultiEncoderTokenizer.from_encoders(tiny_paths[:2], encoder_names=NAMES)


def member_configs(tiny_paths):
    return [AutoConfig.from_pretrained(p) for p in tiny_paths[:2]]


def write(path, text: str | bytes):
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return str(path)


# ---- the table ------------------------------------------------------------------------------------------------------
def _config(tiny_paths, **kwargs):
    return lambda: MultiEncoderConfig(encoders=member_configs(tiny_paths), **kwargs)


def _files(tmp_path, train: str | bytes, dev: str | None = None, name="train.csv", **kwargs):
    def load():
        dev_file = write(tmp_path / ("dev" + os.path.splitext(name)[1]), dev) if dev is not None else None
        return load_files(write(tmp_path / name, train), dev_file, cache_dir=str(tmp_path / "cache"), **kwargs)
    return load


def _conll(tmp_path, text: str | bytes, name="train.conll", dev: str | None = None):
    def load():
        dev_file = write(tmp_path / "dev.conll", dev) if dev is not None else None
        return load_conll_files(write(tmp_path / name, text), dev_file)
    return load


def _swap_members(pair):
    model, tokenizer = pair
    batch = tokenizer(["the cat sat on the mat", "he went"], padding=True, return_tensors="pt")
    return lambda: model(input_ids=batch["input_ids"][::-1], attention_mask=batch["attention_mask"][::-1])


def _too_long(pair):
    model, tokenizer = pair
    batch = tokenizer([" ".join(["cat"] * 100)], truncation=False, return_tensors="pt")
    return lambda: model(**batch)


def _missing_tokenizer_folder(pair, tmp_path):
    def load():
        pair[1].save_pretrained(tmp_path / "tok")
        shutil.rmtree(tmp_path / "tok" / "tokenizer_1")
        return MultiEncoderTokenizer.from_pretrained(str(tmp_path / "tok"))
    return load


def _no_model_type(tiny_paths):
    configs = [c.to_dict() for c in member_configs(tiny_paths)]
    del configs[1]["model_type"]
    return lambda: MultiEncoderConfig(encoders=configs)


CASES = {
    # texts
    "None among the texts": (lambda p, t, tmp: lambda: p[1](["a cat", None]), ValueError, r"`text\[1\]` is None"),
    "a number among the texts": (lambda p, t, tmp: lambda: p[1]([3, "a cat"]), ValueError, r"`text\[0\]` is 3"),
    "a number among the pairs": (lambda p, t, tmp: lambda: p[1](["a"], text_pair=[4.5]), ValueError,
                                 r"`text_pair\[0\]`"),
    "an empty batch": (lambda p, t, tmp: lambda: p[1]([]), ValueError, "batch is empty"),
    # config options
    "fusion_dim 0": (lambda p, t, tmp: _config(t, fusion_dim=0), ValueError, "`fusion_dim` must be a positive"),
    "fusion_dim negative": (lambda p, t, tmp: _config(t, fusion_dim=-8), ValueError, "`fusion_dim`"),
    "fusion_dim fractional": (lambda p, t, tmp: _config(t, fusion_dim=12.5), ValueError, "whole number"),
    "fusion_dropout 1": (lambda p, t, tmp: _config(t, fusion_dropout=1.0), ValueError,
                         r"`fusion_dropout` must be a probability in \[0, 1\)"),
    "classifier_dropout negative": (lambda p, t, tmp: _config(t, classifier_dropout=-0.1), ValueError,
                                    "`classifier_dropout`"),
    "encoder_dropout 1.5": (lambda p, t, tmp: _config(t, encoder_dropout=[0.1, 1.5]), ValueError,
                            "`encoder_dropout`"),
    "a member config without model_type": (lambda p, t, tmp: _no_model_type(t), ValueError,
                                           "Member encoder 1's config has no `model_type`"),
    # tokenizer folder, lengths, member order
    "a missing tokenizer_1/ folder": (lambda p, t, tmp: _missing_tokenizer_folder(p, tmp), OSError,
                                      "member 1's tokenizer folder tokenizer_1/ is missing"),
    "a text longer than a member's positions": (lambda p, t, tmp: _too_long(p), ValueError,
                                                r"Member 0 \(bert\) takes at most 64 tokens"),
    "members' inputs in the wrong order": (lambda p, t, tmp: _swap_members(p), ValueError,
                                           r"Member 0 \(bert\) got token id \d+ but its vocabulary has \d+ "
                                           r"tokens: the members' inputs are in another order"),
    # data files
    "an empty CSV": (lambda p, t, tmp: _files(tmp, ""), ValueError, r"Data file .*train\.csv is empty"),
    "a header-only CSV": (lambda p, t, tmp: _files(tmp, "sentence,label\n"), ValueError,
                          r"train\.csv holds only a header row \('sentence,label'\) and no data rows"),
    "a ragged CSV": (lambda p, t, tmp: _files(tmp, "sentence,label\na,1\nb,0,extra,cells\n"), ValueError,
                     "caused by|rows of different lengths|Error tokenizing"),
    "an empty text cell": (lambda p, t, tmp: _files(tmp, "sentence,label\na cat,1\n,0\n"), ValueError,
                           r"row 3 has no text in column 'sentence'"),
    "an inf regression label": (lambda p, t, tmp: _files(tmp, "sentence,label\na cat,1.5\na dog,inf\n"),
                                ValueError, r"row 3 has the label inf, not a finite number"),
    "a validation label unseen in training": (lambda p, t, tmp: _files(
        tmp, "sentence,label\na,pos\nb,neg\n", dev="sentence,label\nc,neutral\n"), ValueError,
        r"label\(s\) \['neutral'\] do not occur in .*train\.csv"),
    "labels differing in case": (lambda p, t, tmp: _files(
        tmp, "sentence,label\na,pos\nb,neg\n", dev="sentence,label\nc,Pos\n"), ValueError,
        r"Different case\? 'Pos' -> 'pos'"),
    "a text column that does not exist": (lambda p, t, tmp: _files(tmp, "id,text,label\n1,a,x\n",
                                                                   text_columns=["body"]), ValueError,
                                          r"no text column\(s\) \['body'\]"),
    # CoNLL files
    "a CoNLL dev tag unseen in training": (lambda p, t, tmp: _conll(tmp, "John B-PER\nlives O\n",
                                                                   dev="Paris B-LOC\n"), ValueError,
                                          r"dev\.conll: tag\(s\) \['B-LOC'\] do not occur in .*train\.conll"),
    "a token without a tag": (lambda p, t, tmp: _conll(tmp, "John B-PER\nlives\nhere O\n"), ValueError,
                              r"train\.conll:2: 1 column\(s\) where the file's first line has 2"),
    "a B_PER typo": (lambda p, t, tmp: _conll(tmp, "John B_PER\nlives O\n"), ValueError,
                     r"train\.conll:1: tag 'B_PER' is not an IOB tag"),
    "a stray extra column": (lambda p, t, tmp: _conll(tmp, "John B-PER\nlives O x\n"), ValueError,
                             r":2: 3 column\(s\)"),
    "mixed separators": (lambda p, t, tmp: _conll(tmp, "John\tB-PER\nNew York B-LOC\n"), ValueError,
                         r":2: 3 column\(s\) where the file's first line has 2"),
    "a CSV as a token task": (lambda p, t, tmp: _conll(tmp, "sentence,label\na,1\n", name="train.csv"), ValueError,
                              "is a CSV/JSON file, not a CoNLL file"),
    "an empty CoNLL file": (lambda p, t, tmp: _conll(tmp, ""), ValueError, "holds no sentences"),
    "a DOCSTART-only CoNLL file": (lambda p, t, tmp: _conll(tmp, "-DOCSTART- -X- O O\n\n"), ValueError,
                                   "holds no sentences"),
    "undecodable bytes": (lambda p, t, tmp: _conll(tmp, b"John B-PER\nM\xfcller B-PER\n"), ValueError,
                          r"train\.conll:2: not UTF-8"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_a_clear_error(case, pair, tiny_paths, tmp_path):
    make, error, phrase = CASES[case]
    with pytest.raises(error, match=phrase):
        make(pair, tiny_paths, tmp_path)()


def test_id_column_is_no_text_and_the_choice_is_logged(tmp_path, caplog):
    """`id,text,label` is one sentence (an integer column is no text), and the columns chosen are said."""
    path = write(tmp_path / "train.csv", "id,text,label\n1,a cat,x\n2,a dog,y\n")
    with caplog.at_level(logging.WARNING, logger="hf_multiencoder.data.loading"):
        dataset, spec = load_files(path, cache_dir=str(tmp_path / "cache"))
    assert spec.text_keys == ("sentence1",) and dataset["train"][0]["sentence1"] == "a cat"
    assert "Text column(s) ['text']" in caplog.text


def test_predict_default_length_fits_every_member(pair):
    """A text longer than every member's positions is truncated per member, never past a member's limit."""
    model, tokenizer = pair
    result = model.predict_with_fusion_weights(tokenizer, [" ".join(["cat"] * 200)])
    assert len(result["Predictions"]) == 1
    assert model.base_model.member_max_lengths() == [64, 78]  # RoBERTa's positions start after its padding index


# ---- the model: masks, tokenizers, edited configs ------------------------------------------------------------------
def test_padding_without_attention_mask_is_masked(pair, caplog):
    model, tokenizer = pair
    batch = tokenizer(["the cat sat on the mat quickly", "he went"], padding=True, return_tensors="pt")
    hf_logging.warning_once.cache_clear()  # said once per process: another test may have said it already
    with torch.no_grad():
        with_mask = model(**batch).logits
        with caplog.at_level(logging.WARNING):
            without = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"]).logits
    torch.testing.assert_close(without, with_mask)  # the padding is not attended nor pooled
    assert "attention_mask" in caplog.text


def test_a_swapped_tokenizer_folder_is_refused(pair, tiny_paths, tmp_path):
    """A tokenizer_1/ folder replaced by another member's tokenizer (smaller vocabulary) passes the size check: the
    fingerprints `from_encoders` records from each member's own tokenizer catch it, when the tokenizer is loaded from
    the model's folder (so `pipeline` refuses it too) and in `check_model`."""
    from transformers import pipeline

    model, tokenizer = pair
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, num_labels=2)
    assert model.config.tokenizer_fingerprints == tokenizer.member_fingerprints()  # recorded at assembly
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    assert json.load(open(tmp_path / "m" / "config.json"))["tokenizer_fingerprints"] == tokenizer.member_fingerprints()
    distil = MultiEncoderTokenizer.from_encoders([tiny_paths[2]]).tokenizers[0]  # same pad id, smaller vocabulary
    shutil.rmtree(tmp_path / "m" / "tokenizer_0")
    distil.save_pretrained(tmp_path / "m" / "tokenizer_0")
    swapped = r"tokenizer of member\(s\) \['bert'\] is not the one"
    with pytest.raises(ValueError, match=swapped):
        MultiEncoderTokenizer.from_pretrained(str(tmp_path / "m"))
    with pytest.raises(ValueError, match=swapped):
        pipeline("text-classification", model=str(tmp_path / "m"))
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    other = MultiEncoderTokenizer([distil, tokenizer.tokenizers[1]], encoder_names=NAMES)  # built elsewhere
    with pytest.raises(ValueError, match=swapped):
        loaded.predict_with_fusion_weights(other, ["a cat"])
    # a swap that changes the pad id is caught before the fingerprints
    other = MultiEncoderTokenizer([tokenizer.tokenizers[0], distil], encoder_names=NAMES)
    with pytest.raises(ValueError, match=r"Member 1 \('roberta'\): the tokenizer pads with id 0 but the member's"):
        loaded.predict_with_fusion_weights(other, ["a cat"])
    # a model whose members came without tokenizers records them the first time a tokenizer is checked
    unrecorded = MultiEncoderForSequenceClassification(loaded.config.__class__(
        encoders=loaded.config.encoders, encoder_names=NAMES, num_labels=2))
    assert unrecorded.config.tokenizer_fingerprints is None
    tokenizer.check_model(unrecorded)
    assert unrecorded.config.tokenizer_fingerprints == tokenizer.member_fingerprints()


def test_a_config_edited_after_saving_is_refused(pair, tmp_path):
    model, _ = pair
    model.save_pretrained(tmp_path / "m")
    config = json.load(open(tmp_path / "m" / "config.json"))
    config["fusion"] = "mean"  # dme -> mean: no scorer, and the projections would stay random
    json.dump(config, open(tmp_path / "m" / "config.json", "w"))
    with pytest.raises(ValueError, match=r"does not match .*unexpected weights \['multiencoder.fusion.scorer"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match=r"missing weights \['classifier"):  # a base model has no head to load
        MultiEncoderModel.save_pretrained(model.base_model, tmp_path / "base")
        MultiEncoderForSequenceClassification.from_pretrained(tmp_path / "base")


# ---- runs -----------------------------------------------------------------------------------------------------------
def args(tiny_paths, data, out, *extra):
    return ["--encoders", *tiny_paths[:2], "--encoder_names", *NAMES, "--train_file", data, "--validation_file",
            data, "--output_dir", str(out), "--num_train_epochs", "2", "--per_device_train_batch_size", "4",
            "--learning_rate", "1e-3", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
            "--max_seq_length", "16", *extra]


@pytest.fixture
def data(tmp_path):
    rows = ["the cat sat,pos", "a dog left,neg", "she can go,pos", "he went,neg"] * 4
    return write(tmp_path / "train.csv", "sentence,label\n" + "\n".join(rows) + "\n")


@pytest.mark.slow  # four short trainings
def test_rerun_into_a_used_folder_and_resume(tiny_paths, data, tmp_path, caplog):
    out = tmp_path / "run"
    run_glue_multi.main(args(tiny_paths, data, out, "--seed", "7", "--save_strategy", "epoch"))
    assert sorted(os.listdir(out)).count("checkpoint-4") == 1 and (out / "run_args.json").is_file()
    # a rerun with another seed is refused, naming the options (it used to train 0 steps and report seed 99)
    with pytest.raises(ValueError, match="not empty.*--overwrite_output_dir.*--resume_from_checkpoint"):
        run_glue_multi.main(args(tiny_paths, data, out, "--seed", "99"))
    # resuming with other model arguments is refused too
    with pytest.raises(ValueError, match=r"model.fusion: 'dme' -> 'mean'"):
        run_glue_multi.main(args(tiny_paths, data, out, "--seed", "7", "--fusion", "mean",
                                 "--resume_from_checkpoint", "true"))
    # a kill -9 during the last save left checkpoint-8 without a readable trainer_state.json (and the run without
    # its final model and metrics): resuming skips it
    (out / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": 8, "log_hi')
    for name in ("model.safetensors", "train_results.json", "trainer_state.json"):
        os.remove(out / name)
    assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-4")
    with caplog.at_level(logging.WARNING):
        table = run_glue_multi.main(args(tiny_paths, data, out, "--seed", "7", "--save_strategy", "epoch",
                                         "--resume_from_checkpoint", "true"))
    assert "Skipping the incomplete checkpoint" in caplog.text and "checkpoint-8" in caplog.text
    assert "Resuming from" in caplog.text and table["runs"][0]["seed"] == 7
    state = json.load(open(out / "trainer_state.json"))
    assert state["global_step"] == 8  # steps 5-8 trained again from checkpoint-4
    # --overwrite_output_dir starts afresh: the old checkpoints go (the new run saves only at its end)
    run_glue_multi.main(args(tiny_paths, data, out, "--seed", "99", "--overwrite_output_dir", "true",
                             "--save_strategy", "no"))
    assert not [d for d in os.listdir(out) if d.startswith("checkpoint-")]
    assert json.load(open(out / "run_args.json"))["training.seed"] == 99


KILLED_RUN = """
import os, signal, sys
import transformers
import run_glue_multi

where, step = sys.argv[1], int(sys.argv[2])
original = transformers.Trainer._save_rng_state if where == "checkpoint" else transformers.Trainer._save


def killed(self, output_dir, *args, **kwargs):  # kill -9 in the middle of a save: some files written, not all
    if self.state.global_step == step and (where == "checkpoint" or ".final.partial" in str(output_dir)):
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, output_dir, *args, **kwargs)


setattr(transformers.Trainer, "_save_rng_state" if where == "checkpoint" else "_save", killed)
run_glue_multi.main(sys.argv[3:])
"""


@pytest.mark.slow  # three short trainings, two of them in killed subprocesses
def test_kill_during_a_save_leaves_no_half_written_checkpoint_or_model(tiny_paths, data, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    run_args = args(tiny_paths, data, out, "--seed", "7", "--save_strategy", "epoch", "--save_only_model", "false")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # killed after the weights and optimizer of checkpoint-8 are written, before its RNG and trainer state
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, "checkpoint", "8", *run_args], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    staged = out / ".checkpoint.partial" / "checkpoint-8"
    assert (staged / "model.safetensors").is_file() and not (staged / "trainer_state.json").exists()
    assert sorted(d for d in os.listdir(out) if d.startswith("checkpoint-")) == ["checkpoint-4"]  # only complete
    assert not (out / "model.safetensors").exists()
    # resuming takes the complete checkpoint, trains steps 5-8 again, and the staging folder is gone
    table = run_glue_multi.main(args(tiny_paths, data, out, "--seed", "7", "--save_strategy", "epoch",
                                     "--save_only_model", "false", "--resume_from_checkpoint", "true"))
    assert table["runs"][0]["seed"] == 7 and json.load(open(out / "trainer_state.json"))["global_step"] == 8
    assert not (out / ".checkpoint.partial").exists() and (out / "checkpoint-8" / "trainer_state.json").is_file()
    # killed in the middle of the final save: the folder holds no half-written model, only checkpoints
    out2 = tmp_path / "run2"
    run_args = args(tiny_paths, data, out2, "--seed", "7", "--save_strategy", "no")
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, "final", "8", *run_args], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (out2 / "model.safetensors").exists() and not (out2 / "config.json").exists()


def test_a_checkpoint_with_weights_but_no_state_is_skipped(tmp_path, caplog):
    """What a plain Trainer leaves after a kill -9 in a save (weights, no trainer_state.json) is never resumed."""
    from safetensors.torch import save_file

    for step, files in ((4, ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json")),
                        (8, ("model.safetensors", "optimizer.pt", "scheduler.pt"))):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for name in files:  # whole files (a damaged one is skipped too: tests/test_resume_and_options.py)
            if name == "model.safetensors":
                save_file({"w": torch.zeros(4)}, str(folder / name))
            elif name.endswith(".pt"):
                torch.save({}, folder / name)
            else:
                (folder / name).write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-4")
    assert "checkpoint-8: no trainer_state.json (the save was interrupted)" in caplog.text
    with pytest.raises(ValueError, match="Cannot resume from .*checkpoint-8: no trainer_state.json"):
        resolve_resume(str(tmp_path), str(tmp_path / "checkpoint-8"))


def test_inf_label_run_stops_at_load(tiny_paths, tmp_path):
    data = write(tmp_path / "train.csv", "sentence,label\nthe cat,1.5\na dog,inf\nhe went,0.5\n")
    with pytest.raises(ValueError, match="row 3 has the label inf"):
        run_glue_multi.main(args(tiny_paths, data, tmp_path / "out"))
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_non_finite_loss_stops_training(pair, tiny_paths, tmp_path):
    """A NaN that reaches the loss by another way (here a label the loader never saw) stops training with an error
    naming the step, and nothing is saved as the result."""
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_multiencoder import MultiEncoderDataCollator, MultiEncoderTrainer

    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, num_labels=1)
    tokenizer = pair[1]
    ds = Dataset.from_dict({"s": ["the cat", "a dog"] * 4, "label": [0.5, float("nan")] * 4})
    ds = ds.map(lambda b: dict(tokenizer(b["s"])), batched=True, remove_columns=["s"])
    trainer = MultiEncoderTrainer(model=model, args=TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=3, report_to=[], use_cpu=True,
        save_strategy="no"), train_dataset=ds, data_collator=MultiEncoderDataCollator(tokenizer))
    with pytest.raises(FloatingPointError, match="training loss is nan at step 1"):
        trainer.train()


def test_non_finite_weights_are_never_saved_as_the_result(pair, tiny_paths, tmp_path):
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_multiencoder import MultiEncoderDataCollator, MultiEncoderTrainer

    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, num_labels=2)
    tokenizer = pair[1]
    ds = Dataset.from_dict({"s": ["the cat", "a dog"] * 4, "label": [1, 0] * 4})
    ds = ds.map(lambda b: dict(tokenizer(b["s"])), batched=True, remove_columns=["s"])
    training_args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=2,
                                      report_to=[], use_cpu=True, save_strategy="no")
    trainer = MultiEncoderTrainer(model=model, args=training_args, train_dataset=ds,
                                  data_collator=MultiEncoderDataCollator(tokenizer))

    def poison(trainer):  # weights that went non-finite without a non-finite loss (e.g. an overflow in a step)
        with torch.no_grad():
            trainer.model.classifier.weight[0, 0] = float("inf")

    with pytest.raises(FloatingPointError, match=r"non-finite weights \(\['classifier.weight'\]"):
        run_glue_multi.train_and_save(trainer, training_args, before_save=poison)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_no_do_flags_trains_and_evaluates(tiny_paths, data, tmp_path, capsys, recwarn):
    table = run_glue_multi.main([a for a in args(tiny_paths, data, tmp_path / "out") if a != "--do_train"])
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]  # no memory pinning warning on a CPU
    assert table["best_epoch"]["n"] == 1 and (tmp_path / "out" / "eval_results.json").is_file()
    printed = capsys.readouterr().out  # the summary at the default log level, fusion weights by member name
    assert "accuracy x100" in printed and "mean fusion weight: bert" in printed
    assert "2 labels ['neg', 'pos']" in printed  # the label list the model trains with


def test_load_best_model_does_not_rewrite_the_final_epoch(tiny_paths, data, tmp_path):
    """With load_best_model_at_end, the final-epoch score is the last epoch's evaluation, not the best model's."""
    out = tmp_path / "best"
    table = run_glue_multi.main(args(tiny_paths, data, out, "--num_train_epochs", "3", "--eval_strategy", "epoch",
                                     "--save_strategy", "epoch", "--load_best_model_at_end", "true",
                                     "--learning_rate", "5e-2"))
    state = json.load(open(out / "trainer_state.json"))
    epochs = [e["eval_accuracy"] for e in state["log_history"] if "eval_accuracy" in e and e.get("epoch")]
    run = table["runs"][0]
    assert run["epoch_scores"] == epochs[:3]
    assert run["final_epoch_score"] == epochs[2] and run["best_epoch_score"] == max(epochs[:3])


def test_real_task_loads_with_one_call(shared_data):
    dataset, spec = load_task("wnut17", data_dir=shared_data)
    assert read_conll(os.path.join(shared_data, "wnut17", "wnut17train.conll"))[0][0][0] == "@paulwalk"
    assert spec.kind == "token" and len(dataset["train"]) == 3394


# ---- rule 5 (second pass): errors from deep inside a library now name the problem ----------------------------------
def test_a_missing_local_member_folder_is_named(tiny_paths, tmp_path):
    missing = str(tmp_path / "no_such_member")
    for load in (lambda: MultiEncoderTokenizer.from_encoders([missing, tiny_paths[0]]),
                 lambda: MultiEncoderForSequenceClassification.from_encoders([tiny_paths[0], missing], num_labels=2),
                 lambda: MultiEncoderTokenizer.from_encoders(["./no_such_member"])):
        with pytest.raises(OSError, match="no such folder .*Give the folder of a saved model"):
            load()


def _ner_folder(pair, tiny_paths, tmp_path):
    model = MultiEncoderForTokenClassification.from_encoders(tiny_paths[:2], encoder_names=NAMES, num_labels=3,
                                                             id2label={0: "O", 1: "B-x", 2: "I-x"})
    folder = str(tmp_path / "ner")
    model.save_pretrained(folder)
    pair[1].save_pretrained(folder)  # the multi-tokenizer
    return folder


def test_stock_pipelines_on_a_tagger_fail_naming_the_right_way(pair, tiny_paths, tmp_path):
    from transformers import pipeline

    folder = _ner_folder(pair, tiny_paths, tmp_path)
    tagger = pipeline("token-classification", model=folder, trust_remote_code=True)
    with pytest.raises(ValueError, match=r"To tag words, use `pipeline\(\"multiencoder-ner\".*`model.predict_tags"):
        tagger("Paris is in France")
    # rule 4: a text classifier is never built from a tagger (no tag returned as a label)
    with pytest.raises(ValueError, match="saved as a MultiEncoderForTokenClassification, not a "
                                         "MultiEncoderForSequenceClassification"):
        pipeline("text-classification", model=folder, trust_remote_code=True)


@pytest.mark.parametrize("name", ["corpus.txt", "corpus.csv"])
def test_a_corpus_that_is_not_utf8_names_the_file_and_line(tmp_path, name):
    from hf_multiencoder.data.corpus import read_text_file

    path = tmp_path / name
    header = b"text\n" if name.endswith(".csv") else b""
    path.write_bytes(header + b"good line\ncaf\xe9 au lait\n")
    line = 3 if header else 2
    with pytest.raises(ValueError, match=rf"{name}, line {line}: not UTF-8 .*Save the file as UTF-8"):
        read_text_file(str(path))


@pytest.mark.parametrize("labels, message", [
    (torch.tensor([0, 5]), "Label 5 is out of range for a model with 2 labels"),
    (torch.tensor([-3, 1]), "Label -3 is out of range"),
    (torch.tensor([0.0, 1.0]), "must be class ids .*got floats"),
])
def test_out_of_range_or_float_class_labels_say_what_to_fix(pair, labels, message, monkeypatch):
    model, tok = pair
    batch = tok(["a short text", "another"], padding=True, return_tensors="pt")
    monkeypatch.setattr(model.config, "problem_type", "single_label_classification")
    with pytest.raises(ValueError, match=message):
        model(**batch, labels=labels)


def test_a_mistyped_discriminator_preset_says_which_one(tiny_paths):
    from transformers import AutoTokenizer

    from hf_multiencoder.pretraining.rtd import discriminator_config

    tok = AutoTokenizer.from_pretrained(tiny_paths[0])
    with pytest.raises(ValueError, match="Unknown preset 'electra-smal': did you mean 'electra-small'"):
        discriminator_config("electra-smal", tok)
