"""`encode` / `similarity` on tiny random members (BERT 32, RoBERTa 40, DistilBERT 24): shapes, the training-free
fusion against a hand computation from the standalone members, the seed's last-4 recipe, and the bad inputs."""

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_multiencoder import (
    MultiEncoderConfig,
    MultiEncoderForSequenceClassification,
    MultiEncoderForTokenClassification,
    MultiEncoderModel,
    MultiEncoderTokenizer,
)
from hf_multiencoder.models.embedding_multiencoder import normalized_concat

WIDTHS = [32, 40, 24]
SENTENCES = ["He can will go", "the cat sat on the mat quickly", "a dog", "Somebody just left new york."]


@pytest.fixture(scope="module")
def concat_model(tiny_paths):
    return MultiEncoderModel.from_encoders(tiny_paths, fusion="concat").eval()


def member_vectors(path, sentences, pooling):
    """Member `path` alone, as plain transformers: its own tokenizer, one sentence at a time (no padding)."""
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    vectors = []
    with torch.no_grad():
        for sentence in sentences:
            out = model(**tok(sentence, return_tensors="pt"), output_hidden_states=True)
            if pooling == "mean":
                vectors.append(out.last_hidden_state[0].mean(0))
            else:  # last4: the mean over tokens of each of the last four layers, concatenated
                vectors.append(torch.cat([h[0].mean(0) for h in out.hidden_states[-4:]]))
    return torch.stack(vectors)


def test_encode_shapes_and_types(concat_model, tokenizer):
    emb = concat_model.encode(SENTENCES, tokenizer=tokenizer)
    assert isinstance(emb, np.ndarray) and emb.shape == (4, sum(WIDTHS)) and emb.dtype == np.float32
    assert concat_model.get_embedding_dimension() == sum(WIDTHS)
    one = concat_model.encode(SENTENCES[0], tokenizer=tokenizer)
    assert one.shape == (sum(WIDTHS),)
    np.testing.assert_allclose(one, emb[0], atol=1e-5)
    as_tensor = concat_model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.device == concat_model.device
    cpu = concat_model.encode(SENTENCES, tokenizer=tokenizer, convert_to_numpy=False)
    assert isinstance(cpu, torch.Tensor)
    empty = concat_model.encode([], tokenizer=tokenizer)
    assert isinstance(empty, np.ndarray) and empty.shape == (0, sum(WIDTHS))


def test_normalized_concat_equals_standalone_members(tiny_paths, concat_model, tokenizer):
    """Each member's mean-pooled vector, L2-normalised, concatenated: computed here from the standalone members."""
    emb = concat_model.encode(SENTENCES, tokenizer=tokenizer, batch_size=3)  # padding and length sorting inside
    members = [torch.nn.functional.normalize(member_vectors(p, SENTENCES, "mean"), dim=-1) for p in tiny_paths]
    np.testing.assert_allclose(emb, torch.cat(members, dim=-1).numpy(), atol=1e-5)
    for i, width in enumerate(WIDTHS):  # each member's block has norm 1
        start = sum(WIDTHS[:i])
        np.testing.assert_allclose(np.linalg.norm(emb[:, start:start + width], axis=1), 1.0, atol=1e-5)
    # the cosine is the mean of the members' cosines
    cos = concat_model.similarity(emb[:1], emb[1:])[0]
    expected = torch.stack([m[0] @ m[1:].T for m in members]).mean(0)
    torch.testing.assert_close(cos, expected, atol=1e-5, rtol=0)


def test_last4_recipe_against_hand_computation(tiny_paths, tokenizer):
    model = MultiEncoderModel.from_encoders(tiny_paths, fusion="concat", pooling="last4").eval()
    emb = model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    assert emb.shape == (4, 4 * sum(WIDTHS))
    expected = torch.cat([torch.nn.functional.normalize(member_vectors(p, SENTENCES, "last4"), dim=-1)
                          for p in tiny_paths], dim=-1)
    torch.testing.assert_close(emb, expected, atol=1e-5, rtol=0)


def test_member_weights_and_normalisation(tiny_paths, tokenizer, concat_model):
    model = MultiEncoderModel.from_encoders(tiny_paths, fusion="concat", embedding_weights=[1.0, 2.0, 0.5]).eval()
    emb = model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    plain = concat_model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    blocks = torch.split(emb, WIDTHS, dim=-1)
    torch.testing.assert_close(blocks[1], 2.0 * torch.split(plain, WIDTHS, dim=-1)[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(blocks[1].norm(dim=-1), torch.full((4,), 2.0), atol=1e-5, rtol=0)
    unit = model.encode(SENTENCES, tokenizer=tokenizer, normalize_embeddings=True, convert_to_tensor=True)
    torch.testing.assert_close(unit.norm(dim=-1), torch.ones(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(unit, emb / emb.norm(dim=-1, keepdim=True), atol=1e-6, rtol=0)
    # the raw fused vector (what a `concat` head sees) is still there
    raw = model.encode(SENTENCES, tokenizer=tokenizer, embedding_fusion="fused", convert_to_tensor=True)
    # the earlier name of "fused" still works, as an argument and in a config
    assert torch.equal(model.encode(SENTENCES, tokenizer=tokenizer, embedding_fusion="model", convert_to_tensor=True),
                       raw)
    assert MultiEncoderConfig.from_encoder_configs(
        [AutoConfig.from_pretrained(p) for p in tiny_paths[:2]], embedding_fusion="model").embedding_fusion == "fused"
    with torch.no_grad():
        batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
        torch.testing.assert_close(raw, model(**batch).pooler_output, atol=1e-5, rtol=0)


def test_heads_encode_with_their_members(tiny_paths, tokenizer, concat_model):
    """A classifier and a tagger embed with their base's members (the tagger's fusion fuses words, so its sentence
    embedding is the normalised concatenation)."""
    expected = concat_model.encode(SENTENCES, tokenizer=tokenizer)
    classifier = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, fusion="concat", num_labels=2)
    np.testing.assert_allclose(classifier.encode(SENTENCES, tokenizer=tokenizer), expected, atol=1e-5)
    tagger = MultiEncoderForTokenClassification.from_encoders(tiny_paths, fusion="dme", num_labels=3)
    np.testing.assert_allclose(tagger.encode(SENTENCES, tokenizer=tokenizer), expected, atol=1e-5)
    with pytest.raises(ValueError, match="fuses word vectors"):
        tagger.encode(SENTENCES, tokenizer=tokenizer, embedding_fusion="fused")


def test_order_and_batching_do_not_change_vectors(concat_model, tokenizer):
    batched = concat_model.encode(SENTENCES * 3, tokenizer=tokenizer, batch_size=5)
    one_by_one = np.stack([concat_model.encode(s, tokenizer=tokenizer) for s in SENTENCES * 3])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)


def test_similarity(concat_model, tokenizer):
    emb = concat_model.encode(SENTENCES, tokenizer=tokenizer)
    sim = concat_model.similarity(emb, emb)
    assert sim.shape == (4, 4)
    torch.testing.assert_close(sim.diagonal(), torch.ones(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(sim, sim.T)
    pairwise = concat_model.similarity_pairwise(emb[:2], emb[2:])
    torch.testing.assert_close(pairwise, torch.stack([sim[0, 2], sim[1, 3]]), atol=1e-6, rtol=0)
    assert concat_model.similarity(emb[0], torch.as_tensor(emb)).shape == (1, 4)  # 1-D and numpy/torch mixed
    with pytest.raises(ValueError, match="different widths"):
        concat_model.similarity(emb, emb[:, :10])
    with pytest.raises(ValueError, match="same shape"):
        concat_model.similarity_pairwise(emb, emb[:2])


def test_dme_embedding_is_the_fused_vector_and_warns_until_trained(tiny_paths, tokenizer, caplog):
    torch.manual_seed(0)
    model = MultiEncoderModel.from_encoders(tiny_paths, fusion="dme").eval()
    with caplog.at_level(logging.WARNING, logger="hf_multiencoder"):
        emb = model.encode(SENTENCES, tokenizer=tokenizer, convert_to_tensor=True)
    assert "random projection" in caplog.text
    assert emb.shape == (4, 40)
    with torch.no_grad():
        torch.testing.assert_close(emb, model(**tokenizer(SENTENCES, padding=True, return_tensors="pt")).pooler_output,
                                   atol=1e-5, rtol=0)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_multiencoder"):  # the training-free fusion: no warning
        assert model.encode(SENTENCES, tokenizer=tokenizer, embedding_fusion="normalized_concat").shape == (4, 96)
    assert "random projection" not in caplog.text
    model.train()  # one training step: the fusion is being trained now
    model.sentence_embedding(**tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")).sum().backward()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_multiencoder"):
        model.encode(SENTENCES, tokenizer=tokenizer)
    assert "random projection" not in caplog.text


def test_bad_inputs(tiny_paths, concat_model, tokenizer):
    with pytest.raises(ValueError, match="MultiEncoderTokenizer"):
        concat_model.encode(SENTENCES)
    other = MultiEncoderTokenizer.from_encoders(tiny_paths[:2])
    with pytest.raises(ValueError, match="2 member tokenizers"):
        concat_model.encode(SENTENCES, tokenizer=other)
    renamed = MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="built for members"):
        concat_model.encode(SENTENCES, tokenizer=renamed)
    with pytest.raises(ValueError, match="item 1 is a int"):
        concat_model.encode(["fine", 3], tokenizer=tokenizer)
    with pytest.raises(ValueError, match="batch_size"):
        concat_model.encode(SENTENCES, tokenizer=tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="Unknown embedding_fusion"):
        concat_model.encode(SENTENCES, tokenizer=tokenizer, embedding_fusion="whitened")
    configs = [m.config for m in concat_model.encoders]
    with pytest.raises(ValueError, match="one weight per member"):
        MultiEncoderConfig.from_encoder_configs(configs, embedding_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        MultiEncoderConfig.from_encoder_configs(configs, embedding_weights=[1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="embedding_fusion"):
        MultiEncoderConfig.from_encoder_configs(configs, embedding_fusion="mean")


def test_normalized_concat_function():
    a, b = torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    torch.testing.assert_close(normalized_concat([a, b]), torch.tensor([[0.6, 0.8, 0.0, 1.0, 0.0]]))
    torch.testing.assert_close(normalized_concat([a, b], [2.0, 1.0]), torch.tensor([[1.2, 1.6, 0.0, 1.0, 0.0]]))


@pytest.mark.slow  # a subprocess: run by `make test`, skipped by `make test-fast`
def test_works_without_sentence_transformers(tiny_paths, tmp_path):
    """Where sentence-transformers cannot be imported, `encode` works and the ST helpers say how to install it."""
    code = textwrap.dedent(f"""
        import sys
        sys.modules["sentence_transformers"] = None  # import sentence_transformers raises ImportError
        import hf_multiencoder
        from hf_multiencoder import MultiEncoderModel, MultiEncoderTokenizer
        model = MultiEncoderModel.from_encoders({tiny_paths!r}, fusion="concat")
        emb = model.encode(["the cat sat"], tokenizer=MultiEncoderTokenizer.from_encoders({tiny_paths!r}))
        assert emb.shape == (1, 96), emb.shape
        try:
            hf_multiencoder.to_sentence_transformer(model, None)
        except ImportError as err:
            assert "hf_multiencoder[sentence-transformers]" in str(err), err
            print("ok")
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok"
