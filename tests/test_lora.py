"""LoRA on the members through peft: per-member targets, what trains, optimizer groups, adapters saved and loaded,
merging into an ordinary checkpoint that loads where neither peft nor hf_multiencoder is installed, the script."""

import json
import os
import re
import textwrap

import pytest
import torch
import transformers

import run_glue_multi
from hf_multiencoder import (
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderTokenizer,
    create_multiencoder_optimizer,
)
from hf_multiencoder.testing_utils import run_without_package
from hf_multiencoder.training.lora import get_multiencoder_lora_model, lora_target_modules, modules_to_save

peft = pytest.importorskip("peft", reason="LoRA needs the optional extra: pip install 'hf_multiencoder[peft]'")

NAMES = ["bert", "roberta", "distil"]
TEXTS = ["the cat sat on the mat", "he went to paris", "somebody just left", "a dog runs quickly"]


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=NAMES)


def build(tiny_paths, cls=MultiEncoderForSequenceClassification, **kwargs):
    torch.manual_seed(0)
    return cls.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme", num_labels=2, **kwargs)


def train_steps(model, tokenizer, steps=3):
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    optimizer = create_multiencoder_optimizer(model, learning_rate=1e-2)
    model.train()
    for _ in range(steps):
        model(**batch, labels=torch.tensor([1, 0, 0, 1])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return batch


def test_targets_per_member_architecture(tiny_paths):
    model = build(tiny_paths)
    pattern = re.compile(lora_target_modules(model))
    matched = [n for n, _ in model.named_modules() if pattern.fullmatch(n)]
    # BERT and RoBERTa name the projections query/value, DistilBERT q_lin/v_lin; 4 layers each
    assert len(matched) == 3 * 4 * 2
    assert "multiencoder.encoders.0.encoder.layer.0.attention.self.query" in matched
    assert "multiencoder.encoders.2.transformer.layer.3.attention.v_lin" in matched
    assert not any("key" in n or "k_lin" in n or "dense" in n for n in matched)
    # one regex per member, members by index or name
    custom = re.compile(lora_target_modules(model, members=[0, "distil"],
                                            target_modules=[r".*\.attention\.output\.dense", r".*\.ffn\.lin1"]))
    matched = [n for n, _ in model.named_modules() if custom.fullmatch(n)]
    assert len(matched) == 8 and all(".encoders.0." in n or ".encoders.2." in n for n in matched)
    assert modules_to_save(model) == ["multiencoder.fusion", "classifier"]
    assert modules_to_save(build(tiny_paths, fusion_layer_norm=True)) == [
        "multiencoder.fusion", "multiencoder.fusion_norm", "classifier"]


def test_bad_targets_name_the_member(tiny_paths):
    model = build(tiny_paths)
    with pytest.raises(ValueError, match=r"matches no linear layer of member 1 \(roberta, roberta\).*attention"):
        lora_target_modules(model, members=[0, 1], target_modules=[r".*\.query", r".*\.q_lin"])
    with pytest.raises(ValueError, match="2 LoRA target regexes for 3 LoRA members"):
        lora_target_modules(model, target_modules=[r".*query", r".*value"])
    with pytest.raises(ValueError, match="is not a regular expression"):
        lora_target_modules(model, target_modules="(query")
    with pytest.raises(ValueError, match="name a member twice"):
        lora_target_modules(model, members=[0, "bert"])
    with pytest.raises(ValueError, match="positive integer"):
        get_multiencoder_lora_model(model, r=0)


def test_only_lora_fusion_and_head_train_with_per_member_groups(tiny_paths, tokenizer):
    model = get_multiencoder_lora_model(build(tiny_paths), r=4, members=[0, "distil"])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or ".modules_to_save." in n for n in trainable)
    assert not any(".encoders.1." in n for n in trainable)  # no LoRA member: frozen
    assert {n.split(".modules_to_save.")[0] for n in trainable if ".modules_to_save." in n} == {
        "base_model.model.multiencoder.fusion", "base_model.model.classifier"}
    optimizer = create_multiencoder_optimizer(model, encoder_learning_rates=[1e-3, 2e-3, 3e-3],
                                              head_learning_rate=1e-2)
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert list(groups) == ["encoder_0.decay", "encoder_2.decay", "head.decay", "head.no_decay"]
    assert [groups[k]["lr"] for k in groups] == [1e-3, 3e-3, 1e-2, 1e-2]
    assert len(groups["encoder_0.decay"]["params"]) == len(groups["encoder_2.decay"]["params"]) == 4 * 2 * 2
    grouped = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert grouped == {id(p) for p in model.parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_steps(model, tokenizer)
    for name, p in model.named_parameters():
        changed = not torch.equal(p.detach(), before[name])
        assert changed == (name in trainable), name
    token_model = get_multiencoder_lora_model(build(tiny_paths, MultiEncoderForTokenClassification), r=2)
    assert token_model.peft_config["default"].modules_to_save == ["multiencoder.fusion", "classifier"]


def test_adapters_save_load_and_merge(tiny_paths, tokenizer, tmp_path):
    model = get_multiencoder_lora_model(build(tiny_paths), r=4)
    batch = train_steps(model, tokenizer)
    model.eval()
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    # the adapters and the trained fusion + head load onto freshly assembled members (another random head)
    torch.manual_seed(1)
    fresh = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme",
                                                                num_labels=2)
    loaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, expected, atol=1e-5, rtol=0)
    merged = model.merge_and_unload()
    assert type(merged) is MultiEncoderForSequenceClassification
    assert not any("lora_" in n or "modules_to_save" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=0)
    merged.save_pretrained(tmp_path / "merged")
    again = MultiEncoderForSequenceClassification.from_pretrained(tmp_path / "merged").eval()  # strict: no stray keys
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, expected, atol=1e-5, rtol=0)


@pytest.mark.slow  # a subprocess
def test_merged_model_loads_without_peft_and_the_package(tiny_paths, tokenizer, tmp_path):
    model = get_multiencoder_lora_model(build(tiny_paths), r=4)
    batch = train_steps(model, tokenizer)
    merged = model.merge_and_unload().eval()
    with torch.no_grad():
        expected = merged(**batch).logits
    merged.save_pretrained(tmp_path / "merged")
    tokenizer.save_pretrained(tmp_path / "merged")
    # site-packages as it would be without peft and hf_multiencoder installed (python -S: no .pth files either)
    site_packages = os.path.dirname(os.path.dirname(transformers.__file__))
    bare = tmp_path / "site-packages"
    bare.mkdir()
    for entry in os.listdir(site_packages):
        if not entry.lower().startswith(("peft", "hf_multiencoder", "__editable__")):
            os.symlink(os.path.join(site_packages, entry), bare / entry)
    code = textwrap.dedent(f"""
        import importlib.util, json, sys
        importable = [name for name in ("peft", "hf_multiencoder") if importlib.util.find_spec(name)]
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        folder = {str(tmp_path / "merged")!r}
        m = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        with torch.no_grad():
            logits = m(**t({TEXTS!r}, padding=True, return_tensors="pt")).logits.tolist()
        print(json.dumps({{"importable": importable, "loaded": [n for n in ("peft", "hf_multiencoder")
                                                                 if n in sys.modules],
                          "module": type(m).__module__, "logits": logits}}))
    """)
    result = run_without_package(code, tmp_path, site_packages=str(bare))
    assert result["importable"] == [] and result["loaded"] == []
    assert result["module"].startswith("transformers_modules.")
    torch.testing.assert_close(torch.tensor(result["logits"]), expected, atol=1e-5, rtol=0)


def test_script_lora_run_holds_the_merged_model_and_the_adapters(tiny_paths, tmp_path):
    rows = [(t, int("cat" in t or "dog" in t)) for t in TEXTS] * 4
    for name in ("train.csv", "dev.csv"):
        (tmp_path / name).write_text("sentence,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    out = tmp_path / "run"
    args = ["--encoders", *tiny_paths, "--encoder_names", *NAMES, "--output_dir", str(out),
            "--train_file", str(tmp_path / "train.csv"), "--validation_file", str(tmp_path / "dev.csv"),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-2", "--num_train_epochs", "2",
            "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "true", "--max_seq_length", "32",
            "--lora_r", "4", "--lora_alpha", "4", "--lora_members", "0", "distil", "--freeze_encoders", "roberta"]
    table = run_glue_multi.main(args)
    assert os.path.isfile(out / "model.safetensors") and os.path.isfile(out / "adapter" / "adapter_model.safetensors")
    adapter_config = json.load(open(out / "adapter" / "adapter_config.json"))
    assert adapter_config["r"] == 4 and adapter_config["lora_alpha"] == 4
    assert ".encoders.1." not in adapter_config["target_modules"]
    # output_dir holds an ordinary multi-encoder, and the evaluation scored it
    model = MultiEncoderForSequenceClassification.from_pretrained(out)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    assert table["runs"][0]["eval"]["eval_accuracy"] == json.load(open(out / "eval_results.json"))["eval_accuracy"]
    assert "peft: LoraConfig r=4, alpha=4" in (out / "README.md").read_text()


def test_script_lora_arguments(tiny_paths, tmp_path):
    base = ["--encoders", *tiny_paths[:2], "--task_name", "cola", "--output_dir", str(tmp_path)]
    with pytest.raises(ValueError, match="--lora_alpha is a LoRA option: give --lora_r too"):
        run_glue_multi.parse_args(base + ["--lora_alpha", "16"])
    with pytest.raises(ValueError, match="--lora_r must be a positive rank"):
        run_glue_multi.parse_args(base + ["--lora_r", "0"])
    model_args, _, training_args = run_glue_multi.parse_args(base + ["--lora_r", "2", "--lora_members", "0",
                                                                     "--freeze_encoders", "0"])
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths[:2], num_labels=2)
    with pytest.raises(ValueError, match=r"both frozen \(--freeze_encoders\) and given LoRA"):
        run_glue_multi.add_lora(model, model_args, training_args, frozen=[0])
    # LoRA with FSDP is refused, when the run starts and when the adapters would be merged
    training_args.fsdp = "full_shard"
    with pytest.raises(ValueError, match="--lora_r with FSDP is not supported"):
        run_glue_multi.add_lora(model, model_args, training_args, frozen=[])


def test_merging_adapters_of_an_fsdp_model_is_refused(tiny_paths, tmp_path):
    from types import SimpleNamespace

    from hf_multiencoder.training.lora import merge_lora_after_training

    model = get_multiencoder_lora_model(build(tiny_paths), r=2)
    trainer = SimpleNamespace(accelerator=SimpleNamespace(unwrap_model=lambda m: m), model=model,
                              is_fsdp_enabled=True, args=SimpleNamespace(output_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="Merging LoRA adapters of an FSDP-sharded model is not supported"):
        merge_lora_after_training(trainer)
    assert not (tmp_path / "adapter").exists()
