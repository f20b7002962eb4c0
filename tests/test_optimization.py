"""The optimizer factory: groups, learning rates, weight decay, freezing; the invariant the prior art broke."""

import pytest
import torch
from transformers import TrainingArguments

from hf_multiencoder import MultiEncoderForSequenceClassification
from hf_multiencoder.training.optimization import create_multiencoder_optimizer, freeze_encoders


@pytest.fixture
def model(tiny_paths):
    torch.manual_seed(0)
    return MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths, encoder_names=["bert", "roberta", "distil"], fusion="cdme", fusion_layer_norm=True, num_labels=2)


def groups_by_name(optimizer):
    return {g["name"]: g for g in optimizer.param_groups}


def param_names(model, group):
    ids = {id(p) for p in group["params"]}
    return [n for n, p in model.named_parameters() if id(p) in ids]


def test_every_trainable_parameter_in_exactly_one_group_fusion_included(model):
    opt = create_multiencoder_optimizer(model, encoder_learning_rates=[1e-5, 2e-5, 3e-5], head_learning_rate=1e-3)
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in model.parameters() if p.requires_grad}
    # the only parameters out of every group: the members' unused (frozen) poolers
    assert {n for n, p in model.named_parameters() if not p.requires_grad} == {
        n for n, _ in model.named_parameters() if ".pooler." in n}
    head = [n for g in opt.param_groups if g["name"].startswith("head") for n in param_names(model, g)]
    fusion = [n for n, _ in model.named_parameters() if n.startswith("multiencoder.fusion")]
    assert fusion and set(fusion) <= set(head), "DME/CDME layers must be trained at the head rate"
    assert {n for n, _ in model.named_parameters() if n.startswith("classifier.")} <= set(head)


def test_group_count_rates_and_decay(model):
    opt = create_multiencoder_optimizer(model, encoder_learning_rates=[1e-5, 2e-5, 3e-5], head_learning_rate=1e-3,
                                        weight_decay=0.01)
    groups = groups_by_name(opt)
    assert list(groups) == ["encoder_0.decay", "encoder_0.no_decay", "encoder_1.decay", "encoder_1.no_decay",
                            "encoder_2.decay", "encoder_2.no_decay", "head.decay", "head.no_decay"]
    for i, lr in enumerate([1e-5, 2e-5, 3e-5]):
        assert groups[f"encoder_{i}.decay"]["lr"] == lr == groups[f"encoder_{i}.no_decay"]["lr"]
    assert groups["head.decay"]["lr"] == 1e-3
    for name, g in groups.items():
        assert g["weight_decay"] == (0.01 if name.endswith(".decay") else 0.0)
        names = param_names(model, g)
        if name.endswith("no_decay"):
            allowed = ("bias", "LayerNorm", "layer_norm", "fusion_norm")
            assert all(any(a in n for a in allowed) for n in names), names
        else:
            assert not any(n.endswith(".bias") or "LayerNorm" in n for n in names)
    member_1 = param_names(model, groups["encoder_1.decay"]) + param_names(model, groups["encoder_1.no_decay"])
    assert all(n.startswith("multiencoder.encoders.1.") for n in member_1)


def test_defaults_come_from_training_args(model, tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=3e-4, weight_decay=0.05, adam_beta2=0.98)
    opt = create_multiencoder_optimizer(model, args)
    assert {g["lr"] for g in opt.param_groups} == {3e-4}
    assert {g["weight_decay"] for g in opt.param_groups} == {0.0, 0.05}
    assert opt.defaults["betas"] == (0.9, 0.98)
    assert isinstance(opt, torch.optim.AdamW)
    sgd = create_multiencoder_optimizer(model, learning_rate=0.1, optimizer_cls=torch.optim.SGD, momentum=0.9)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.9


def test_layerwise_lr_decay(model):
    opt = create_multiencoder_optimizer(model, encoder_learning_rates=[1e-4, 1e-4, 1e-4], head_learning_rate=1e-3,
                                        layerwise_lr_decay=0.5)
    groups = groups_by_name(opt)
    # 4 layers: embeddings 0.5**5, layer k 0.5**(4-k) (top layer k=3 -> 0.5)
    assert groups["encoder_0.decay.depth_0"]["lr"] == pytest.approx(1e-4 * 0.5 ** 5)
    assert groups["encoder_0.decay.depth_1"]["lr"] == pytest.approx(1e-4 * 0.5 ** 4)
    assert groups["encoder_0.decay.depth_4"]["lr"] == pytest.approx(1e-4 * 0.5)
    names = param_names(model, groups["encoder_2.decay.depth_2"])  # DistilBERT: transformer.layer.1
    assert names and all(".transformer.layer.1." in n for n in names)
    assert groups["head.decay"]["lr"] == 1e-3
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters() if p.requires_grad)  # all but the poolers


def test_frozen_members_are_in_no_group(model):
    assert freeze_encoders(model, ["roberta", 0]) == [0, 1]
    opt = create_multiencoder_optimizer(model, learning_rate=1e-4)
    assert not [g for g in opt.param_groups if g["name"].startswith(("encoder_0", "encoder_1"))]
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert ids == {id(p) for p in model.parameters() if p.requires_grad}
    assert not any(id(p) in ids for p in model.multiencoder.encoders[0].parameters())


def test_groups_are_deterministic(tiny_paths):
    names = []
    for _ in range(2):
        torch.manual_seed(0)
        m = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=2)
        opt = create_multiencoder_optimizer(m, encoder_learning_rates=[1e-5, 2e-5, 3e-5], layerwise_lr_decay=0.9)
        names.append([(g["name"], g["lr"], [p.shape for p in g["params"]]) for g in opt.param_groups])
    assert names[0] == names[1]


def test_bad_options(model):
    with pytest.raises(ValueError, match="`encoder_learning_rates` has 2 rates but the model has 3 member encoders"):
        create_multiencoder_optimizer(model, encoder_learning_rates=[1e-5, 2e-5])
    with pytest.raises(ValueError, match="layerwise_lr_decay"):
        create_multiencoder_optimizer(model, layerwise_lr_decay=1.5)
    with pytest.raises(ValueError, match="No member named 'xlnet'"):
        freeze_encoders(model, ["xlnet"])
    with pytest.raises(ValueError, match="out of range"):
        freeze_encoders(model, [7])


def test_the_training_side_is_importable_from_the_top_level():
    """`from hf_multiencoder import ...` gives what a user expects (as peft exports `get_peft_model`): lazily, the
    same objects as their modules', and every name in `__all__` resolves."""
    import hf_multiencoder
    from hf_multiencoder import MultiEncoderTrainer
    from hf_multiencoder import create_multiencoder_optimizer as top_optimizer
    from hf_multiencoder import freeze_encoders as top_freeze
    from hf_multiencoder.training.trainer import MultiEncoderTrainer as hub_trainer

    assert top_optimizer is create_multiencoder_optimizer and top_freeze is freeze_encoders
    assert MultiEncoderTrainer is hub_trainer
    for name in hf_multiencoder.__all__:
        assert getattr(hf_multiencoder, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        hf_multiencoder.not_a_name  # noqa: B018
