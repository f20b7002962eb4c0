"""The CPU fast path: bf16 only where the hardware computes it (the capability check mocked both ways), the fused
AdamW honoured from `--optim`, the opt-out switch, the record in run_args.json and the card, fp32-loadable weights."""

import json
import os

import pytest
import torch
from safetensors import safe_open
from transformers import Trainer, TrainingArguments

import run_glue_multi
from hf_multiencoder import (
    MultiEncoderDataCollator,
    MultiEncoderForSequenceClassification,
    MultiEncoderTokenizer,
    create_multiencoder_optimizer,
)
from hf_multiencoder.data.feature_cache import add_member_features
from hf_multiencoder.models import precision_multiencoder
from hf_multiencoder.models.precision_multiencoder import (
    FAST_PATH_ENV,
    auto_bf16,
    bf16_pays,
    cpu_bf16_units,
    cpu_model,
)
from hf_multiencoder.pretraining.adaptation import default_training_arguments
from hf_multiencoder.training.fast_path import (
    apply_fast_path,
    auto_training_kwargs,
    describe,
    given_options,
    pin_memory,
)
from hf_multiencoder.training.model_card import MultiEncoderModelCardData
from hf_multiencoder.training.runs import run_arguments, setup_run


@pytest.fixture
def cpu_units(monkeypatch):
    """`cpu_units(amx=..., avx512_bf16=...)`: what torch's CPU capability checks answer, for this test only."""
    def set_units(amx: bool = False, avx512_bf16: bool = False) -> None:
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.delenv(FAST_PATH_ENV, raising=False)

    return set_units


def cpu_args(tmp_path, **kwargs):
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kwargs)


def test_cpu_model(tmp_path, monkeypatch):
    """The CPU's name for run records: the `model name` line of /proc/cpuinfo, else what `platform` knows."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\nflags\t: fpu\n")
    assert cpu_model(str(cpuinfo)) == "AMD EPYC 9R14"
    monkeypatch.setattr(precision_multiencoder.platform, "processor", lambda: "arm")
    assert cpu_model(str(tmp_path / "missing")) == "arm"  # not Linux: the platform module's answer


def test_capability_check(cpu_units, monkeypatch):
    cpu_units(amx=True, avx512_bf16=True)
    assert cpu_bf16_units() == ["amx_bf16", "avx512_bf16"]
    assert bf16_pays("cpu")[0] and auto_bf16("cpu")
    cpu_units(avx512_bf16=True)
    assert bf16_pays("cpu") == (True, "this CPU has bf16 matrix units (avx512_bf16)")
    cpu_units()
    pays, why = bf16_pays("cpu")
    assert not pays and "emulated" in why and not auto_bf16("cpu")
    assert not bf16_pays("mps")[0]
    cpu_units(amx=True)
    for off in ("off", "0", "false", "No"):
        monkeypatch.setenv(FAST_PATH_ENV, off)
        assert not auto_bf16("cpu") and bf16_pays("cpu")[0]  # the switch, not the hardware, says no


def test_auto_picks_bf16_only_where_the_cpu_computes_it(cpu_units, tmp_path):
    cpu_units(amx=True)
    args = cpu_args(tmp_path, optim="adamw_torch")
    choice = apply_fast_path(args, [], "auto")
    assert args.bf16 and args.mixed_precision == "bf16" and args.optim == "adamw_torch_fused"
    assert choice == {"fast_path": "auto", "bf16": True, "fp16": False, "optim": "adamw_torch_fused",
                      "reason": "bf16 autocast: this CPU has bf16 matrix units (amx_bf16)"}
    assert args.fast_path_choice is choice
    cpu_units()
    args = cpu_args(tmp_path, optim="adamw_torch")
    choice = apply_fast_path(args, [], "auto")
    assert not args.bf16 and args.mixed_precision == "no" and args.optim == "adamw_torch_fused"
    assert choice["reason"].startswith("fp32: this CPU has no bf16 matrix units")
    assert describe(choice).startswith("fp32, adamw_torch_fused (fast path auto: fp32: this CPU has no bf16")


def test_explicit_options_and_the_switches_win(cpu_units, tmp_path, monkeypatch, caplog):
    cpu_units(amx=True)
    args = cpu_args(tmp_path, optim="adamw_torch")
    choice = apply_fast_path(args, ["--bf16", "false", "--optim=adamw_torch"], "auto")
    assert not args.bf16 and args.optim == "adamw_torch" and choice["reason"] == "precision as given (--bf16/--fp16)"
    args = cpu_args(tmp_path, optim="adamw_torch")
    choice = apply_fast_path(args, [], "off")
    assert not args.bf16 and args.optim == "adamw_torch" and choice["fast_path"] == "off"
    monkeypatch.setenv(FAST_PATH_ENV, "off")
    args = cpu_args(tmp_path, optim="adamw_torch")
    choice = apply_fast_path(args, [], "auto")
    assert not args.bf16 and args.optim == "adamw_torch" and choice["fast_path"] == f"off ({FAST_PATH_ENV})"
    with pytest.raises(ValueError, match="`fast_path` must be one of auto, off"):
        apply_fast_path(cpu_args(tmp_path), [], "fast")
    # asking for bf16 on a CPU that emulates it is honoured, with a warning that says what it costs
    cpu_units()
    args = cpu_args(tmp_path, bf16=True)
    with caplog.at_level("WARNING", logger="hf_multiencoder.training.fast_path"):
        apply_fast_path(args, ["--bf16", "true"], "auto")
    assert args.bf16 and "emulated" in caplog.text
    assert given_options(["a.yaml", "--bf16=true", "--optim", "x", "-v"]) == {"bf16", "optim"}


def test_library_defaults_take_the_fast_path(cpu_units, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu_units(avx512_bf16=True)
    assert auto_training_kwargs() == {"optim": "adamw_torch_fused", "bf16": True, "use_cpu": True}
    args = default_training_arguments(str(tmp_path))
    assert args.bf16 and args.use_cpu and args.optim == "adamw_torch_fused"
    assert not default_training_arguments(str(tmp_path), bf16=False).bf16  # the caller's choice wins
    assert default_training_arguments(str(tmp_path), optim="adamw_torch").optim == "adamw_torch"
    cpu_units()
    assert auto_training_kwargs() == {"optim": "adamw_torch_fused"}
    assert not default_training_arguments(str(tmp_path)).bf16


def test_memory_is_pinned_only_for_a_gpu_the_run_uses(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pin_memory() and not pin_memory(use_cpu=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not pin_memory()
    assert not default_training_arguments(str(tmp_path)).dataloader_pin_memory
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.dataloader_pin_memory  # TrainingArguments unpins only for `use_cpu`
    setup_run(args)
    assert not args.dataloader_pin_memory


def test_script_records_the_choice(cpu_units, tmp_path):
    base = ["--encoders", "a", "b", "--task_name", "cola", "--output_dir", str(tmp_path), "--use_cpu", "true"]
    cpu_units(amx=True)
    model_args, data_args, training_args = run_glue_multi.parse_args(base)
    assert model_args.fast_path == "auto" and training_args.bf16
    run_args = run_arguments(model_args, data_args, training_args)
    assert run_args["training.bf16"] is True and run_args["training.optim"] == "adamw_torch_fused"
    assert run_args["training.fast_path"]["reason"].startswith("bf16 autocast")
    json.dumps(run_args)  # run_args.json takes it as it is
    _, _, training_args = run_glue_multi.parse_args(base + ["--fast_path", "off", "--optim", "adamw_torch"])
    assert not training_args.bf16 and training_args.optim == "adamw_torch"
    with pytest.raises(ValueError, match="`fast_path` must be one of auto, off"):
        run_glue_multi.parse_args(base + ["--fast_path", "always"])


def test_optimizer_follows_optim(tiny_paths, tmp_path):
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], num_labels=2)
    fused = create_multiencoder_optimizer(model, cpu_args(tmp_path, optim="adamw_torch_fused"),
                                          encoder_learning_rates=[1e-5, 2e-5])
    assert isinstance(fused, torch.optim.AdamW) and fused.defaults["fused"]
    assert {g["name"]: g["lr"] for g in fused.param_groups}["encoder_1.decay"] == 2e-5
    plain = create_multiencoder_optimizer(model, cpu_args(tmp_path, optim="adamw_torch"))
    assert isinstance(plain, torch.optim.AdamW) and not plain.defaults.get("fused")
    sgd = create_multiencoder_optimizer(model, cpu_args(tmp_path, optim="sgd", learning_rate=0.1))
    assert isinstance(sgd, torch.optim.SGD) and {g["lr"] for g in sgd.param_groups} == {0.1}
    # a class given here wins over --optim
    assert isinstance(create_multiencoder_optimizer(model, cpu_args(tmp_path, optim="sgd"),
                                                    optimizer_cls=torch.optim.AdamW), torch.optim.AdamW)


def test_bf16_training_saves_fp32_weights_and_the_card_says_how(cpu_units, tiny_paths, tokenizer, tmp_path):
    cpu_units(amx=True)  # the emulated bf16 of a CPU without matrix units is slow, not wrong: tiny members are fine
    args = cpu_args(tmp_path / "run", max_steps=2, per_device_train_batch_size=4, save_strategy="no",
                    disable_tqdm=True, learning_rate=1e-3)
    apply_fast_path(args, [], "auto")
    assert args.bf16
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, num_labels=2)
    texts = ["the cat sat", "he can will go", "a dog ran", "she left"] * 2
    features = [dict(tokenizer(t), labels=i % 2) for i, t in enumerate(texts)]
    trainer = Trainer(model=model, args=args, train_dataset=features,
                      data_collator=MultiEncoderDataCollator(tokenizer),
                      optimizers=(create_multiencoder_optimizer(model, args), None))
    assert trainer.accelerator.mixed_precision == "bf16"
    trainer.train()
    out = tmp_path / "saved"
    trainer.save_model(str(out))
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float32}
    loaded = MultiEncoderForSequenceClassification.from_pretrained(str(out)).eval()
    batch = tokenizer(["the cat sat"], return_tensors="pt")
    assert torch.isfinite(loaded(**batch).logits).all()
    card = MultiEncoderModelCardData()
    card.set_training_info(args, model, trainer.optimizer)
    assert card.hyperparameters["precision"].startswith("bf16 autocast, adamw_torch_fused (fast path auto")
    assert card.hyperparameters["optimizer"].endswith("fused")


def test_feature_cache_and_encode_follow_the_capability(cpu_units, tiny_paths, tmp_path):
    from datasets import Dataset

    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], num_labels=2, fusion="concat").eval()
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    for p in model.parameters():
        p.requires_grad_(False)
    texts = ["the cat sat on the mat", "he can will go", "a dog"]
    ds = Dataset.from_dict(dict(tokenizer(texts)))
    cpu_units()
    fp32 = add_member_features(ds, model, [0, 1], cache_dir=tmp_path)
    explicit = add_member_features(ds, model, [0, 1], cache_dir=tmp_path, autocast_dtype=None)
    assert fp32._fingerprint == explicit._fingerprint and fp32["encoder_features"] == explicit["encoder_features"]
    cpu_units(amx=True)
    bf16 = add_member_features(ds, model, [0, 1], cache_dir=tmp_path)
    assert bf16._fingerprint != fp32._fingerprint  # another cache file, never the fp32 one
    a, b = torch.tensor(bf16["encoder_features"][0][0]), torch.tensor(fp32["encoder_features"][0][0])
    assert not torch.equal(a, b) and torch.allclose(a, b, atol=0.1)
    with pytest.raises(ValueError, match="`autocast_dtype` must be a torch dtype, None or 'auto'"):
        add_member_features(ds, model, [0, 1], autocast_dtype="bf16")
    # encode: bf16 where the CPU computes it, float32 vectors either way; bf16=False forces fp32
    auto = model.encode(texts, tokenizer=tokenizer, convert_to_tensor=True)
    forced_fp32 = model.encode(texts, tokenizer=tokenizer, convert_to_tensor=True, bf16=False)
    assert auto.dtype == forced_fp32.dtype == torch.float32
    assert not torch.equal(auto, forced_fp32) and torch.allclose(auto, forced_fp32, atol=0.1)
    cpu_units()
    assert torch.equal(model.encode(texts, tokenizer=tokenizer, convert_to_tensor=True), forced_fp32)


@pytest.mark.parametrize("fusion", ["dme", "cdme"])
def test_fusion_weights_stay_float32_under_bf16_autocast(tiny_paths, tokenizer, fusion):
    """The per-sentence weights users read ("0.66 of ELECTRA") are a float32 softmax even when the members and the
    projections run in bf16: they sum to 1 to float32 precision, and the fused vector keeps the autocast dtype."""
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, num_labels=2, fusion=fusion).eval()
    batch = tokenizer(["the cat sat on the mat", "he can will go", "a dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        fp32 = model(**batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(**batch)
    assert bf16.fusion_weights.dtype == torch.float32 and bf16.logits.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.fusion_weights.sum(-1), torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(bf16.fusion_weights, fp32.fusion_weights, atol=0.02, rtol=0)
