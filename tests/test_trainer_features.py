"""The Trainer features a user expects keep working through run_glue_multi.py: gradient accumulation, bf16, eval and
save strategies with load_best_model_at_end, early stopping, report_to tensorboard, torch_compile, the length-grouped
sampler and progress bars. Tiny members on a small CSV written here, so nothing is skipped."""

import glob
import json
import os

import pytest
import torch

import run_glue_multi
from hf_multiencoder import MultiEncoderForSequenceClassification
from hf_multiencoder.models import modeling_multiencoder

POS = ["the cat sat on the mat", "a cat runs", "the cat likes the dog", "she can go to the cat",
       "the dog sat on the cat and the mat"]
NEG = ["somebody just left", "he went to paris", "john smith is new", "it was 2024 in york",
       "somebody went to new york quickly"]


@pytest.fixture(scope="module")
def csv_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("csv")
    rows = [(s, 1) for s in POS] + [(s, 0) for s in NEG]
    for name, reps in (("train.csv", 4), ("dev.csv", 1)):
        with open(folder / name, "w") as f:
            f.write("sentence,label\n" + "".join(f"{s},{y}\n" for s, y in rows * reps))
    return str(folder / "train.csv"), str(folder / "dev.csv")


def args_for(tiny_paths, csv_files, out, *extra):
    train, dev = csv_files
    return ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--output_dir", str(out),
            "--train_file", train, "--validation_file", dev, "--per_device_train_batch_size", "8",
            "--per_device_eval_batch_size", "16", "--learning_rate", "1e-3", "--report_to", "none",
            "--disable_tqdm", "true", "--use_cpu", "true", "--do_train", "--do_eval", "--max_seq_length", "32",
            "--logging_steps", "1", *extra]


def state(out) -> dict:
    return json.load(open(os.path.join(out, "trainer_state.json")))


def test_accumulation_bf16_best_checkpoint_and_tensorboard(tiny_paths, csv_files, tmp_path):
    out = tmp_path / "run"
    run_glue_multi.main(args_for(tiny_paths, csv_files, out, "--num_train_epochs", "3",
                                 "--gradient_accumulation_steps", "2", "--bf16", "true", "--eval_strategy", "epoch",
                                 "--save_strategy", "epoch", "--save_total_limit", "1",
                                 "--load_best_model_at_end", "true", "--report_to", "tensorboard"))
    s = state(out)
    # 40 examples, batches of 8, 2 batches per optimizer step -> 3 steps per epoch (the last one has one batch)
    assert s["global_step"] == 9 and s["max_steps"] == 9
    evals = [e for e in s["log_history"] if "eval_accuracy" in e]
    assert len(evals) == 3
    best = max(evals, key=lambda e: e["eval_accuracy"])
    assert s["best_metric"] == best["eval_accuracy"]
    assert s["best_model_checkpoint"].endswith(f"checkpoint-{best['step']}")
    # load_best_model_at_end: the final evaluation (after training) scores what the best checkpoint scored
    final = json.load(open(out / "eval_results.json"))
    assert final["eval_accuracy"] == pytest.approx(best["eval_accuracy"])
    assert glob.glob(str(out / "runs" / "**" / "events.out.tfevents.*"), recursive=True), "no tensorboard events"
    config = json.load(open(out / "config.json"))
    assert config["architectures"] == ["MultiEncoderForSequenceClassification"]
    card = (out / "README.md").read_text()  # a model card at the end, as run_glue.py writes one
    assert "library_name: transformers" in card and "- gradient_accumulation_steps: 2" in card
    assert "- mixed_precision_training: bf16" in card


def test_early_stopping(tiny_paths, csv_files, tmp_path):
    """Nothing can improve at learning rate 0: patience 1 stops training after the second evaluation."""
    out = tmp_path / "early"
    run_glue_multi.main(args_for(tiny_paths, csv_files, out, "--num_train_epochs", "6", "--learning_rate", "0",
                                 "--head_learning_rate", "0", "--eval_strategy", "epoch", "--save_strategy", "epoch",
                                 "--load_best_model_at_end", "true", "--early_stopping_patience", "1"))
    s = state(out)
    assert len([e for e in s["log_history"] if "eval_accuracy" in e]) == 2
    assert s["epoch"] == pytest.approx(2.0) and s["global_step"] == 10


def test_the_script_records_the_fingerprints_from_encoders_would(tiny_paths, csv_files, tmp_path, monkeypatch):
    """The script hands its tokenizer's fingerprints to from_encoders, which then loads no member tokenizer again."""
    model_args, data_args, _ = run_glue_multi.parse_args(args_for(tiny_paths, csv_files, tmp_path / "fp"))
    raw, spec = run_glue_multi.load_data(data_args)
    tokenizer = run_glue_multi.build_tokenizer(model_args)
    expected = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], num_labels=2).config

    def load_again(*args, **kwargs):
        pytest.fail("from_encoders loaded a member tokenizer again")

    monkeypatch.setattr(modeling_multiencoder.AutoTokenizer, "from_pretrained", load_again)
    model = run_glue_multi.build_model(model_args, spec, tokenizer)
    assert len(expected.tokenizer_fingerprints) == 2
    assert model.config.tokenizer_fingerprints == expected.tokenizer_fingerprints


def test_group_by_length_groups_by_the_longest_member(tiny_paths, csv_files, tmp_path):
    """The length-grouped sampler must see each example's length, not len(input_ids) = the number of members."""
    model_args, data_args, training_args = run_glue_multi.parse_args(
        args_for(tiny_paths, csv_files, tmp_path / "gbl", "--num_train_epochs", "1"))
    if hasattr(training_args, "train_sampling_strategy"):
        training_args.train_sampling_strategy = "group_by_length"
    else:
        training_args.group_by_length = True
    raw, spec = run_glue_multi.load_data(data_args)
    tokenizer = run_glue_multi.build_tokenizer(model_args)
    tokenized = run_glue_multi.tokenize_dataset(raw, spec, tokenizer, data_args, training_args)
    model = run_glue_multi.build_model(model_args, spec, tokenizer)
    trainer = run_glue_multi.build_trainer(model_args, data_args, training_args, spec, tokenizer, tokenized, model)
    loader = trainer.get_train_dataloader()
    lengths = tokenized["train"]["length"]
    assert len(set(lengths)) > 3
    assert loader.batch_sampler.sampler.lengths == lengths  # the real lengths, not [2, 2, ...]
    batches = list(loader)
    assert all("length" not in b for b in batches)
    model.eval()
    with torch.no_grad():
        assert model(**batches[0]).logits.shape[0] == len(batches[0]["labels"])


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_torch_compile(tiny_paths, csv_files, tmp_path):
    """--torch_compile: the Trainer compiles the model (its forward takes lists of per-member tensors) and trains.
    The `aot_eager` backend traces with dynamo and AOTAutograd like inductor does, without its C++ build (minutes
    on a 2-core CPU); the benchmarks measure inductor itself."""
    out = tmp_path / "compiled"
    run_glue_multi.main(args_for(tiny_paths, csv_files, out, "--num_train_epochs", "1", "--torch_compile", "true",
                                 "--torch_compile_backend", "aot_eager", "--eval_strategy", "epoch"))
    s = state(out)
    assert s["global_step"] == 5
    losses = [e["loss"] for e in s["log_history"] if "loss" in e]
    assert losses and all(x == x for x in losses)  # finite, not NaN
    assert "eval_accuracy" in json.load(open(out / "eval_results.json"))


def test_progress_bars(tiny_paths, csv_files, tmp_path, capsys):
    run_glue_multi.main(args_for(tiny_paths, csv_files, tmp_path / "bars", "--num_train_epochs", "1",
                                 "--disable_tqdm", "false"))
    err = capsys.readouterr().err
    assert "5/5" in err  # tqdm's training bar reached its last step
