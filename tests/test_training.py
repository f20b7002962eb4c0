"""Short runs of the stock Trainer on tiny members: the loss falls, every trainable parameter moves, frozen ones don't,
and a run resumes from its checkpoint with the optimizer state restored."""

import os

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from hf_multiencoder import MultiEncoderDataCollator, MultiEncoderForSequenceClassification
from hf_multiencoder.training.optimization import create_multiencoder_optimizer, freeze_encoders

POS = ["the cat sat on the mat", "a cat runs", "the cat likes the dog", "she can go to the cat"]
NEG = ["somebody just left", "he went to paris", "john smith is new", "it was 2024 in york"]


@pytest.fixture(scope="module")
def dataset(tokenizer):
    texts = (POS + NEG) * 4
    labels = ([1] * len(POS) + [0] * len(NEG)) * 4
    ds = Dataset.from_dict({"sentence": texts, "label": labels})
    return ds.map(lambda b: dict(tokenizer(b["sentence"], truncation=True, max_length=32)), batched=True)


def make_trainer(model, tokenizer, dataset, out, optimizer=None, **kwargs):
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=8, learning_rate=1e-3,
                             num_train_epochs=kwargs.pop("epochs", 4), logging_steps=1, report_to=[], seed=0,
                             save_strategy=kwargs.pop("save_strategy", "no"), use_cpu=True, **kwargs)
    optimizer = optimizer or create_multiencoder_optimizer(model, args, head_learning_rate=3e-3)
    return Trainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                   data_collator=MultiEncoderDataCollator(tokenizer), optimizers=(optimizer, None))


def test_trainer_lowers_loss_and_moves_every_trainable_parameter(tiny_paths, tokenizer, dataset, tmp_path):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2)
    freeze_encoders(model, [2])
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    # frozen: member 2 and the members' unused poolers, nothing else
    assert {n for n in before if n not in trainable} == {
        n for n in before if n.startswith("multiencoder.encoders.2.") or ".pooler." in n}
    trainer = make_trainer(model, tokenizer, dataset, tmp_path, epochs=10)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert sum(losses[-4:]) < 0.5 * sum(losses[:4]), losses
    # the stock Trainer kept our per-member columns (nested lists) instead of dropping them
    for name, p in model.named_parameters():
        moved = not torch.equal(p.detach(), before[name])
        if name not in trainable:
            assert not moved, f"frozen {name} changed"
        elif "word_embeddings" in name or "position_embeddings" in name or "token_type" in name:
            continue  # rows of unused tokens/positions legitimately stay; the tensor as a whole is checked below
        else:
            assert moved, f"{name} did not train"
    for name in ("multiencoder.encoders.0.embeddings.word_embeddings.weight",
                 "multiencoder.fusion.scorer.weight", "multiencoder.fusion.projections.0.weight", "classifier.weight"):
        assert not torch.equal(dict(model.named_parameters())[name].detach(), before[name])


def test_resume_from_checkpoint_restores_optimizer_state(tiny_paths, tokenizer, dataset, tmp_path):
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2)
    full = make_trainer(model, tokenizer, dataset, tmp_path / "full", epochs=2, save_strategy="epoch")
    full.train()
    checkpoints = sorted(d for d in os.listdir(tmp_path / "full") if d.startswith("checkpoint-"))
    assert len(checkpoints) == 2
    first = tmp_path / "full" / checkpoints[0]
    assert "modeling_multiencoder.py" in os.listdir(first), "checkpoints must carry the code files"

    torch.manual_seed(0)
    fresh = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2)
    resumed = make_trainer(fresh, tokenizer, dataset, tmp_path / "resumed", epochs=2)
    resumed.train(resume_from_checkpoint=str(first))
    state = resumed.optimizer.state_dict()
    assert [g["name"] for g in resumed.optimizer.param_groups] == [g["name"] for g in full.optimizer.param_groups]
    assert state["state"], "optimizer state was restored and stepped"
    for (n, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters()):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3, msg=f"{n} differs after resuming")
