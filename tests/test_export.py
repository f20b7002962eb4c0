"""`export_encoder`: a member tuned inside the stack, saved back as a standalone Hugging Face model and tokenizer."""

import inspect
import json
import os

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer

NAMES = ["bert", "roberta", "distil"]
TEXTS = ["He can will go", "the cat sat on the mat , somebody just left"]


@pytest.fixture(scope="module")
def tuned(tiny_paths):
    """A stack whose members moved away from their checkpoints (as tuning moves them)."""
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme",
                                                                num_labels=2, encoder_dropout=0.0)
    with torch.no_grad():
        for p in model.multiencoder.encoders.parameters():
            p.add_(0.05 * torch.randn_like(p))
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=NAMES)
    return model.eval(), tokenizer


def member_states(member, tokenizer) -> torch.Tensor:
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    if "token_type_ids" not in inspect.signature(member.forward).parameters:
        batch.pop("token_type_ids", None)
    with torch.no_grad():
        return member(**batch).last_hidden_state


@pytest.mark.parametrize("key", [0, "roberta", 2])
def test_export_saves_a_standalone_model_and_tokenizer(tuned, tiny_paths, tmp_path, key):
    model, tokenizer = tuned
    i = model.config.encoder_index(key)
    folder = model.export_encoder(key, tmp_path / "member", tokenizer=tokenizer)
    assert folder == str(tmp_path / "member")
    files = set(os.listdir(folder))
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= files
    assert not any(f.endswith(".py") for f in files), "a standalone member needs no remote code"
    config = json.load(open(os.path.join(folder, "config.json")))
    assert "auto_map" not in config and config["model_type"] == model.config.encoders[i]["model_type"]

    inside = model.multiencoder.encoders[i]
    exported, info = AutoModel.from_pretrained(folder, output_loading_info=True)
    assert type(exported).__name__ == type(inside).__name__
    # the stack keeps the members' (unused, frozen) poolers: the exported member loads with nothing initialised afresh
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info

    exported_tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(exported_tokenizer).__name__ == type(tokenizer.tokenizers[i]).__name__
    for text in TEXTS:
        assert exported_tokenizer(text)["input_ids"] == tokenizer.tokenizers[i](text)["input_ids"]
    tuned_states = member_states(inside, tokenizer.tokenizers[i])
    torch.testing.assert_close(member_states(exported.eval(), exported_tokenizer), tuned_states, atol=1e-5, rtol=0)
    # the export is the tuned member, not the checkpoint it started from
    original = AutoModel.from_pretrained(tiny_paths[i]).eval()
    assert not torch.allclose(member_states(original, exported_tokenizer), tuned_states, atol=1e-3)


def test_exported_members_rebuild_the_same_stack(tuned, tmp_path):
    model, tokenizer = tuned
    folders = [model.export_encoder(name, tmp_path / name, tokenizer=tokenizer) for name in NAMES]
    torch.manual_seed(1)
    rebuilt = MultiEncoderForSequenceClassification.from_encoders(folders, encoder_names=NAMES, fusion="dme",
                                                                  num_labels=2, encoder_dropout=0.0)
    head = {k: v for k, v in model.state_dict().items() if not k.startswith("multiencoder.encoders.")}
    missing, unexpected = rebuilt.load_state_dict(head, strict=False)
    assert not unexpected and all(k.startswith("multiencoder.encoders.") for k in missing)
    rebuilt_tokenizer = MultiEncoderTokenizer.from_encoders(folders, encoder_names=NAMES)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    rebuilt_batch = rebuilt_tokenizer(TEXTS, padding=True, return_tensors="pt")
    for key in ("input_ids", "attention_mask"):
        for a, b in zip(batch[key], rebuilt_batch[key]):
            assert torch.equal(a, b)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(**rebuilt_batch).logits, model(**batch).logits, atol=1e-5, rtol=0)


def test_export_without_a_tokenizer_saves_the_model_only(tuned, tmp_path):
    model, _ = tuned
    folder = model.export_encoder("distil", tmp_path / "distil")
    assert set(os.listdir(folder)) == {"config.json", "model.safetensors"}


def test_export_rejects_unknown_members(tuned, tmp_path):
    model, tokenizer = tuned
    with pytest.raises(ValueError, match="No member named 'gpt'"):
        model.export_encoder("gpt", tmp_path / "x")
    with pytest.raises(ValueError, match="out of range"):
        model.export_encoder(3, tmp_path / "x")
    other = MultiEncoderTokenizer(tokenizer.tokenizers[:2], encoder_names=NAMES[:2])
    with pytest.raises(ValueError, match="member"):
        model.export_encoder(0, tmp_path / "x", tokenizer=other)
