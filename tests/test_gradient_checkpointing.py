"""Gradient checkpointing of the members (`--gradient_checkpointing`, transformers' switch): the members' layers
recompute their activations in the backward pass, with the same loss and gradients as without; members whose
architecture has none are named in a warning. Peak memory is measured in benchmarks/bench_scale.py."""

import logging

import pytest
import torch
from transformers import BertConfig, MPNetConfig

from hf_multiencoder import MultiEncoderConfig, MultiEncoderForSequenceClassification, MultiEncoderTokenizer

TEXTS = ["the cat sat on the mat", "he went to paris", "somebody just left", "a dog runs quickly"]
LABELS = torch.tensor([1, 0, 0, 1])


def loss_and_grads(model, batch, checkpointing: bool, seed: int = 0):
    """One training-mode step (dropout on: checkpointing replays the same dropout masks)."""
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    model.zero_grad()
    torch.manual_seed(seed)
    loss = model(**batch, labels=LABELS).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def count_layer_calls(model):
    calls = []
    for member in model.multiencoder.encoders:
        for name, module in member.named_modules():
            if name.endswith("layer.0.attention"):  # inside the layer: transformers checkpoints its `forward`
                module.register_forward_pre_hook(lambda *a: calls.append(1))
    return calls


def test_same_loss_and_gradients_and_layers_recomputed(tiny_paths):
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths)
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2,
                                                                pooling=["mean", "last4", "cls"])
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    calls = count_layer_calls(model)
    loss, grads = loss_and_grads(model, batch, checkpointing=False)
    assert len(calls) == 3  # the first layer's attention in each member, once
    calls.clear()
    loss_gc, grads_gc = loss_and_grads(model, batch, checkpointing=True)
    assert len(calls) == 6  # ... and once more in the backward pass: checkpointing is on in every member
    assert model.is_gradient_checkpointing
    torch.testing.assert_close(loss_gc, loss, atol=1e-6, rtol=0)
    assert set(grads_gc) == set(grads) and len(grads) > 50
    for name, grad in grads.items():
        torch.testing.assert_close(grads_gc[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_with_lora(tiny_paths):
    """LoRA freezes the embeddings: transformers makes the members' embedding outputs require grads."""
    pytest.importorskip("peft", reason="LoRA needs the optional extra: pip install 'hf_multiencoder[peft]'")
    from hf_multiencoder.training.lora import get_multiencoder_lora_model

    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths)
    torch.manual_seed(0)
    model = get_multiencoder_lora_model(
        MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2), r=4,
        init_lora_weights=False)  # random B: the LoRA path contributes to the gradients from the first step
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    loss, grads = loss_and_grads(model, batch, checkpointing=False)
    loss_gc, grads_gc = loss_and_grads(model, batch, checkpointing=True)
    torch.testing.assert_close(loss_gc, loss, atol=1e-6, rtol=0)
    assert set(grads_gc) == set(grads) and any("lora_A" in n for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_gc[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_members_without_checkpointing_are_named(caplog):
    bert = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37)
    mpnet = MPNetConfig(vocab_size=99, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37)
    config = MultiEncoderConfig.from_encoder_configs([bert, mpnet], encoder_names=["bert", "mpnet"], num_labels=2)
    model = MultiEncoderForSequenceClassification(config)
    assert model._no_split_modules >= {"BertLayer", "MPNetLayer"}  # MPNet declares none: its repeated layer
    with caplog.at_level(logging.WARNING):
        model.gradient_checkpointing_enable()
    assert "members ['mpnet (MPNetModel)'] do not support it" in caplog.text
    batch = {"input_ids": [torch.randint(5, 99, (4, 7)), torch.randint(5, 99, (4, 9))]}
    loss, grads = loss_and_grads(model, batch, checkpointing=True)
    loss_plain, grads_plain = loss_and_grads(model, batch, checkpointing=False)
    torch.testing.assert_close(loss, loss_plain, atol=1e-6, rtol=0)
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)
