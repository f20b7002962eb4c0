"""The multi-encoder model on tiny random members of different types and widths (BERT 32, RoBERTa 40,
DistilBERT 24)."""

import copy
import os

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

from hf_multiencoder import (
    FUSION_MAPPING,
    MultiEncoderConfig,
    MultiEncoderForSequenceClassification,
    MultiEncoderModel,
    MultiEncoderTokenizer,
    mean_fusion_weights,
)
from hf_multiencoder.models.modeling_multiencoder import fusion_weights_per_example

FUSIONS = ["concat", "dme", "cdme", "mean"]
POOLINGS = ["cls", "mean", "last4", "last4_mean"]
WIDTHS = [32, 40, 24]
SENTENCES = ["He can will go", "Somebody just left the new york cat.", "the dog sat"]


@pytest.fixture(scope="module")
def dme_model(tiny_paths):
    torch.manual_seed(0)
    return MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="dme", num_labels=3)


@pytest.fixture
def batch(tokenizer):
    return tokenizer(SENTENCES, padding=True, truncation=True, max_length=32, return_tensors="pt")


def build(tiny_paths, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("num_labels", 3)
    return MultiEncoderForSequenceClassification.from_encoders(tiny_paths, **kwargs)


@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("pooling", POOLINGS)
def test_shapes_for_every_fusion_and_pooling(tiny_paths, tokenizer, batch, fusion, pooling):
    model = build(tiny_paths, fusion=fusion, pooling=pooling).eval()
    out = model(**batch)
    assert out.logits.shape == (3, 3)
    pooled = [w * 4 if pooling == "last4" else w for w in WIDTHS]
    expected_width = sum(pooled) if fusion == "concat" else max(pooled)
    assert model.config.hidden_size == expected_width
    assert out.pooler_output.shape == (3, expected_width)
    if fusion in ("dme", "cdme"):
        assert out.fusion_weights.shape == (3, 3)
        torch.testing.assert_close(out.fusion_weights.sum(-1), torch.ones(3))
        assert (out.fusion_weights > 0).all()
    else:
        assert out.fusion_weights is None


def test_pooling_per_member_and_fusion_dim(tiny_paths, batch):
    model = build(tiny_paths, fusion="dme", pooling=["cls", "last4", "mean"], fusion_dim=16).eval()
    out = model.multiencoder(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    assert [e.shape[-1] for e in out.member_embeddings] == [32, 160, 24]
    assert out.pooler_output.shape == (3, 16)
    assert model.classifier.in_features == 16


def test_sigmoid_gating_weights_are_independent_gates(tiny_paths, batch):
    model = build(tiny_paths, fusion="dme", fusion_gating="sigmoid").eval()
    w = model(**batch).fusion_weights
    assert ((w > 0) & (w < 1)).all()
    assert not torch.allclose(w.sum(-1), torch.ones(3))


def test_pooling_values(tiny_paths, tokenizer):
    """cls is the first token, mean the masked mean; last4 concatenates the last four layers' means."""
    model = build(tiny_paths, fusion="concat", pooling=["cls", "mean", "last4"]).eval()
    b = tokenizer(["the cat sat", "a dog"], padding=True, return_tensors="pt")
    out = model.multiencoder(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                             token_type_ids=b["token_type_ids"])
    with torch.no_grad():
        h0 = model.multiencoder.encoders[0](input_ids=b["input_ids"][0], attention_mask=b["attention_mask"][0],
                                            token_type_ids=b["token_type_ids"][0]).last_hidden_state
        h1 = model.multiencoder.encoders[1](input_ids=b["input_ids"][1],
                                            attention_mask=b["attention_mask"][1]).last_hidden_state
        hs2 = model.multiencoder.encoders[2](input_ids=b["input_ids"][2], attention_mask=b["attention_mask"][2],
                                             output_hidden_states=True).hidden_states
    torch.testing.assert_close(out.member_embeddings[0], h0[:, 0])
    m1 = b["attention_mask"][1]
    n_real = int(m1[1].sum())
    torch.testing.assert_close(out.member_embeddings[1][1], h1[1, :n_real].mean(0))
    m2 = b["attention_mask"][2]
    n2 = int(m2[1].sum())
    expected = torch.cat([h[1, :n2].mean(0) for h in hs2[-4:]])
    torch.testing.assert_close(out.member_embeddings[2][1], expected)


@pytest.mark.parametrize("fusion,gating",
                         [(f, "softmax") for f in FUSIONS] + [("dme", "sigmoid"), ("cdme", "sigmoid")])
def test_gradients_reach_every_trainable_parameter(tiny_paths, batch, fusion, gating):
    model = build(tiny_paths, fusion=fusion, pooling="last4" if fusion == "cdme" else "mean",
                  fusion_layer_norm=True, fusion_gating=gating).train()
    out = model(**batch, labels=torch.tensor([0, 1, 2]))
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert missing == []
    names = [n for n, _ in model.named_parameters()]
    assert any(n.startswith("multiencoder.fusion.") for n in names) or fusion == "concat"
    assert any(n.startswith("classifier.") for n in names)
    # unused member poolers are kept (an exported member loads clean) and frozen (no trainable parameter unused)
    poolers = [p for n, p in model.named_parameters() if ".pooler." in n]
    assert poolers and not any(p.requires_grad for p in poolers)
    # a scorer bias shared by all members cancels in a softmax: it exists only where it can train
    assert ("multiencoder.fusion.scorer.bias" in names) == (fusion in ("dme", "cdme") and gating == "sigmoid")


def test_problem_types(tiny_paths, batch):
    reg = build(tiny_paths, num_labels=1).eval()
    labels = torch.tensor([0.5, 2.0, 4.5])
    out = reg(**batch, labels=labels)
    assert reg.config.problem_type == "regression"
    torch.testing.assert_close(out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), labels))

    single = build(tiny_paths, num_labels=3).eval()
    labels = torch.tensor([0, 2, 1])
    out = single(**batch, labels=labels)
    assert single.config.problem_type == "single_label_classification"
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, labels))

    multi = build(tiny_paths, num_labels=3, problem_type="multi_label_classification").eval()
    labels = torch.tensor([[1.0, 0, 1], [0, 0, 0], [0, 1, 1]])
    out = multi(**batch, labels=labels)
    torch.testing.assert_close(out.loss, torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels))


def test_from_encoders_keeps_pretrained_member_weights(tiny_paths, dme_model):
    for i, path in enumerate(tiny_paths):
        reference = AutoModel.from_pretrained(path).state_dict()
        member = dme_model.multiencoder.encoders[i].state_dict()
        for key, value in member.items():
            torch.testing.assert_close(value, reference[key], msg=f"member {i} {key} was re-initialised")


def test_config_stores_members_and_rebuilds_without_checkpoints(dme_model, tiny_paths, tmp_path):
    config = dme_model.config
    assert config.model_type == "multiencoder"
    assert [c["model_type"] for c in config.encoders] == ["bert", "roberta", "distilbert"]
    assert config.encoder_names == [str(p) for p in tiny_paths]
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(reloaded, MultiEncoderConfig)
    assert reloaded.encoders == config.encoders
    model = MultiEncoderModel(reloaded)  # no checkpoint needed
    assert [type(m).__name__ for m in model.encoders] == ["BertModel", "RobertaModel", "DistilBertModel"]


def test_half_precision_members_load_in_float32(tiny_paths, tmp_path):
    """A member checkpoint stored in fp16 (common on the Hub) trains with fp32 weights: transformers 5 would load it
    as stored, and fp16 weights without loss scaling lose small updates and turn the gradients to NaN."""
    half = str(tmp_path / "half-bert")
    AutoModel.from_pretrained(tiny_paths[0]).half().save_pretrained(half)
    model = MultiEncoderForSequenceClassification.from_encoders([half, tiny_paths[1]], num_labels=2)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # asked for, another dtype is honoured
    model = MultiEncoderForSequenceClassification.from_encoders([half], num_labels=2,
                                                                encoder_kwargs={"dtype": torch.float16})
    assert {p.dtype for p in model.base_model.encoders[0].parameters()} == {torch.float16}


def test_encoder_dropout_override(tiny_paths):
    model = build(tiny_paths, encoder_dropout=[0.3, None, 0.5])
    members = model.multiencoder.encoders
    assert members[0].config.hidden_dropout_prob == 0.3
    assert members[1].config.hidden_dropout_prob == 0.1  # the member's own
    assert members[2].config.dropout == 0.5  # DistilBERT calls it `dropout`
    # the live members were built with the override: their dropout modules use it
    assert members[0].embeddings.dropout.p == 0.3 and members[2].embeddings.dropout.p == 0.5
    assert members[1].embeddings.dropout.p == 0.1


def test_live_members_are_used_as_they_are(tiny_paths):
    """`from_encoders` loads each member once and hands it over (no random copy, no weight copying)."""
    members = [AutoModel.from_pretrained(p) for p in tiny_paths[:2]]
    config = MultiEncoderConfig.from_encoder_configs([m.config for m in members], encoder_names=["a", "b"],
                                                     fusion="dme", num_labels=2)
    before = members[0].embeddings.word_embeddings.weight.detach().clone()
    model = MultiEncoderForSequenceClassification(config, encoders=members)
    assert model.multiencoder.encoders[0] is members[0] and model.multiencoder.encoders[1] is members[1]
    torch.testing.assert_close(members[0].embeddings.word_embeddings.weight, before)  # post_init left it alone
    with pytest.raises(ValueError, match="1 live member models for a config with 2 members"):
        MultiEncoderModel(config, encoders=members[:1])


def test_save_load_round_trip_safetensors_only(dme_model, tokenizer, batch, tmp_path):
    model = copy.deepcopy(dme_model).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    files = os.listdir(tmp_path)
    assert "model.safetensors" in files
    assert not [f for f in files if f.endswith((".bin", ".pt", ".pkl", ".pth", ".ckpt"))]
    weights = load_file(os.path.join(tmp_path, "model.safetensors"))
    assert any(k.startswith("multiencoder.fusion.scorer") for k in weights), "DME weights must be saved"
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert isinstance(reloaded, MultiEncoderForSequenceClassification)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(reloaded(**batch).fusion_weights, model(**batch).fusion_weights, atol=1e-5,
                                   rtol=0)


def test_predict_with_fusion_weights(tiny_paths, tokenizer):
    model = build(tiny_paths, num_labels=2, id2label={0: "unacceptable", 1: "acceptable"},
                  label2id={"unacceptable": 0, "acceptable": 1})
    result = model.predict_with_fusion_weights(tokenizer, ["He can will go", "Somebody just left."], batch_size=1)
    assert result["Sentences"] == ["He can will go", "Somebody just left."]
    assert set(result["Predictions"]) <= {"unacceptable", "acceptable"}
    assert len(result["fusion_weights"]) == 2
    with pytest.warns(FutureWarning, match="now called"):  # the original project's key still reads
        assert result["DME scores"] == result["fusion_weights"]
    for scores in result["fusion_weights"]:
        assert list(scores) == [str(p) for p in tiny_paths]
        assert abs(sum(scores.values()) - 1) < 1e-3


def test_fusion_registry_is_the_single_source_of_names():
    assert set(FUSION_MAPPING) == set(FUSIONS)
    with pytest.raises(ValueError, match="allowed values are: concat, dme, cdme, mean"):
        MultiEncoderConfig(encoders=[], fusion="attention")


# ---- bad input ----------------------------------------------------------------------------------------------------
def test_unknown_fusion_and_pooling_names(tiny_paths):
    with pytest.raises(ValueError, match="Unknown fusion 'sum'.*concat, dme, cdme, mean"):
        build(tiny_paths, fusion="sum")
    with pytest.raises(ValueError, match="Unknown pooling 'max'.*cls, mean, last4, last4_mean"):
        build(tiny_paths, pooling="max")
    with pytest.raises(ValueError, match="Unknown fusion_gating"):
        build(tiny_paths, fusion_gating="tanh")


def test_per_member_option_of_wrong_length(tiny_paths):
    with pytest.raises(ValueError, match="`pooling` has 2 values but the model has 3 member encoders"):
        build(tiny_paths, pooling=["cls", "mean"])
    with pytest.raises(ValueError, match="`encoder_dropout` has 4 values"):
        build(tiny_paths, encoder_dropout=[0.1, 0.1, 0.1, 0.1])


def test_batch_missing_one_members_inputs(dme_model, batch):
    partial = {k: v[:2] for k, v in batch.items()}
    with pytest.raises(ValueError, match="inputs for 2 member encoders but the model has 3"):
        dme_model(**partial)
    with pytest.raises(ValueError, match="must be a list with one tensor per member"):
        dme_model(input_ids=batch["input_ids"][0], attention_mask=batch["attention_mask"][0])
    with pytest.raises(ValueError, match="`input_ids` is required"):
        dme_model(attention_mask=batch["attention_mask"])


def test_tokenizer_built_for_other_members(tiny_paths, dme_model):
    two = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    with pytest.raises(ValueError, match="2 member tokenizers .* but the model has 3 members"):
        two.check_model(dme_model)
    swapped = MultiEncoderTokenizer.from_encoders([tiny_paths[1], tiny_paths[0], tiny_paths[2]])
    with pytest.raises(ValueError, match="built for members"):
        swapped.check_model(dme_model)
    with pytest.raises(ValueError, match="built for members"):
        dme_model.predict_with_fusion_weights(swapped, ["a"])


def test_empty_member_list_is_an_error():
    with pytest.raises(ValueError, match="no member encoders"):
        MultiEncoderModel(MultiEncoderConfig())
    with pytest.raises(ValueError, match="non-empty list"):
        MultiEncoderForSequenceClassification.from_encoders("bert-base-uncased")


def test_mean_fusion_weights_and_per_example():
    weights = torch.tensor([[0.25, 0.75], [0.75, 0.25], [0.5, 0.5]])
    assert mean_fusion_weights(weights, ["a", "b"]) == pytest.approx({"a": 0.5, "b": 0.5})
    assert mean_fusion_weights(weights.numpy(), ["a", "b"], mask=[True, False, False]) == {"a": 0.25, "b": 0.75}
    words = weights.reshape(1, 3, 2)  # word level: rows counted where the mask is true
    assert mean_fusion_weights(words, ["a", "b"], mask=[[1, 1, 0]]) == pytest.approx({"a": 0.5, "b": 0.5})
    assert fusion_weights_per_example(weights[:1], ["a", "b"]) == [{"a": 0.25, "b": 0.75}]
    assert fusion_weights_per_example(words, ["a", "b"], lengths=[2]) == [[{"a": 0.25, "b": 0.75},
                                                                          {"a": 0.75, "b": 0.25}]]
    with pytest.raises(ValueError, match="2 members but 3 member names"):
        mean_fusion_weights(weights, ["a", "b", "c"])
