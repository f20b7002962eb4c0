"""The multi-encoder as a SentenceTransformer (tiny random members): the saved folder loads with
`SentenceTransformer(path, trust_remote_code=True)`, also where hf_multiencoder cannot be imported, gives the vectors
of `model.encode`, trains with SentenceTransformerTrainer and its losses and evaluates with
EmbeddingSimilarityEvaluator."""

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderModel, MultiEncoderTokenizer

pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed: pip install "
                    "'hf_multiencoder[sentence-transformers]' (make install does)")
from datasets import Dataset  # noqa: E402
from sentence_transformers import (  # noqa: E402
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402
from sentence_transformers.sentence_transformer.losses import (  # noqa: E402
    CosineSimilarityLoss,
    MultipleNegativesRankingLoss,
)

from hf_multiencoder.testing_utils import run_without_package  # noqa: E402
from hf_multiencoder.training.sentence_embeddings import (  # noqa: E402
    save_sentence_transformer,
    sts_spearman,
    to_sentence_transformer,
)

NAMES = ["bert", "roberta", "distil"]
SENTENCES = ["He can will go", "the cat sat on the mat quickly", "a dog", "Somebody just left new york."]
MODULE_TYPE = "sentence_transformers_multiencoder.MultiEncoderTransformer"
PAIRS = {"sentence1": ["the cat sat", "a dog runs", "he went to paris", "she left", "john smith is new", "it was"],
         "sentence2": ["the dog sat", "a cat runs", "she went to york", "he left new york", "john is", "a mat"],
         "score": [0.9, 0.6, 0.5, 0.3, 0.7, 0.0]}


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    return MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=NAMES)


@pytest.fixture(scope="module")
def saved(tiny_paths, tokenizer, tmp_path_factory):
    """A `concat` model saved as a SentenceTransformer folder, and its `encode` vectors."""
    folder = str(tmp_path_factory.mktemp("fused-st"))
    model = MultiEncoderModel.from_encoders(tiny_paths, encoder_names=NAMES, fusion="concat")
    save_sentence_transformer(model, folder, tokenizer)
    return folder, model.encode(SENTENCES, tokenizer=tokenizer)


def test_saved_folder(saved):
    folder, _ = saved
    files = set(os.listdir(folder))
    assert {"modules.json", "config_sentence_transformers.json", "config.json", "model.safetensors",
            "sentence_transformers_multiencoder.py", "modeling_multiencoder.py", "embedding_multiencoder.py",
            "tokenizer_config.json", "tokenizer_0", "tokenizer_2"} <= files
    modules = json.load(open(os.path.join(folder, "modules.json")))
    assert [(m["path"], m["type"]) for m in modules] == [("", MODULE_TYPE)]
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["auto_map"]["AutoModel"] == "modeling_multiencoder.MultiEncoderModel"


def test_round_trip_gives_the_vectors_of_encode(saved):
    folder, expected = saved
    st = SentenceTransformer(folder, trust_remote_code=True, device="cpu")
    assert type(st[0]).__module__.startswith("transformers_modules.")  # the folder's own code
    assert st.get_embedding_dimension() == expected.shape[1] == 96
    np.testing.assert_allclose(st.encode(SENTENCES), expected, atol=1e-5)
    np.testing.assert_allclose(st.encode(SENTENCES, batch_size=1), expected, atol=1e-5)
    unit = st.encode(SENTENCES, normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    torch.testing.assert_close(st.similarity(expected, expected), torch.as_tensor(expected @ expected.T / np.outer(
        np.linalg.norm(expected, axis=1), np.linalg.norm(expected, axis=1))), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(folder, device="cpu")


def test_features_are_top_level_tensors_per_member(saved):
    """sentence-transformers moves only top-level tensors to the device: every member's are top-level."""
    st = SentenceTransformer(saved[0], trust_remote_code=True, device="cpu")
    features = st.preprocess(SENTENCES)
    assert {"input_ids", "input_ids_1", "input_ids_2", "attention_mask", "attention_mask_2"} <= set(features)
    assert all(isinstance(v, torch.Tensor) for v in features.values())
    assert features["input_ids_1"][0, 0].item() == 0  # RoBERTa's <s>, the second member's own ids
    with pytest.raises(ValueError, match="not a string"):
        st.preprocess([["a", "b", "c"]])


def test_dme_round_trip_and_head_models(tiny_paths, tokenizer, tmp_path):
    """A classifier's members and trained-or-not fusion go into the SentenceTransformer; its head does not."""
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(tiny_paths, encoder_names=NAMES, fusion="dme",
                                                                 num_labels=2)
    expected = model.encode(SENTENCES, tokenizer=tokenizer)
    save_sentence_transformer(model, str(tmp_path), tokenizer)
    st = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu")
    assert st.get_embedding_dimension() == 40
    np.testing.assert_allclose(st.encode(SENTENCES), expected, atol=1e-5)


def test_bad_inputs(tiny_paths, tokenizer, tmp_path):
    model = MultiEncoderModel.from_encoders(tiny_paths, encoder_names=NAMES, fusion="concat")
    with pytest.raises(ValueError, match="2 member tokenizers"):
        to_sentence_transformer(model, MultiEncoderTokenizer.from_encoders(tiny_paths[:2]))
    with pytest.raises(ValueError, match="max_seq_length"):
        to_sentence_transformer(model, tokenizer, max_seq_length=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        save_sentence_transformer(model, str(tmp_path / "file"), tokenizer)


@pytest.mark.slow  # a subprocess or a compile: run by `make test`, skipped by `make test-fast`
def test_loads_without_the_package(saved, tmp_path):
    """A fresh interpreter that cannot import hf_multiencoder loads the folder with sentence-transformers."""
    folder, expected = saved
    result = run_without_package(f"""
        import json
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer({folder!r}, trust_remote_code=True, device="cpu")
        print(json.dumps({{"module": type(st[0]).__module__, "embeddings": st.encode({SENTENCES!r}).tolist()}}))
    """, tmp_path)
    assert result["module"].startswith("transformers_modules.")
    np.testing.assert_allclose(np.array(result["embeddings"]), expected, atol=1e-5)


@pytest.mark.slow  # trains: a few seconds per loss
def test_trainer_losses_and_evaluator(tiny_paths, tokenizer, tmp_path):
    """One step of CosineSimilarityLoss moves every member, MultipleNegativesRankingLoss trains too, the evaluator
    scores the model, and the saved checkpoint is a folder that loads with remote code."""
    torch.manual_seed(0)
    model = MultiEncoderModel.from_encoders(tiny_paths, encoder_names=NAMES, fusion="concat")
    st = to_sentence_transformer(model, tokenizer, device="cpu")
    before = {n: p.detach().clone() for n, p in st.named_parameters()}
    data = Dataset.from_dict(PAIRS)
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "run"), max_steps=1,
                                                per_device_train_batch_size=6, learning_rate=1e-2, report_to=[],
                                                save_strategy="steps", save_steps=1, use_cpu=True, seed=0)
    trainer = SentenceTransformerTrainer(model=st, args=args, train_dataset=data, loss=CosineSimilarityLoss(st))
    trainer.train()
    for i in range(3):
        moved = [n for n, p in st.named_parameters() if f".encoders.{i}." in n and not torch.equal(p, before[n])]
        assert len(moved) > 10, f"member {i} did not train"
    # the trained module is the model itself: model.encode sees the trained members
    np.testing.assert_allclose(st.encode(SENTENCES), model.encode(SENTENCES, tokenizer=tokenizer), atol=1e-5)
    checkpoint = tmp_path / "run" / "checkpoint-1"
    assert json.load(open(checkpoint / "modules.json"))[0]["type"] == MODULE_TYPE
    reloaded = SentenceTransformer(str(checkpoint), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(reloaded.encode(SENTENCES), st.encode(SENTENCES), atol=1e-5)

    evaluator = EmbeddingSimilarityEvaluator(PAIRS["sentence1"], PAIRS["sentence2"], PAIRS["score"], name="tiny")
    metrics = evaluator(st)
    assert -1.0 <= metrics["tiny_spearman_cosine"] <= 1.0
    # the library's STS score (what scripts/sts_embeddings.py reports) is the evaluator's
    assert sts_spearman(st.encode, "stsb", PAIRS["sentence1"], PAIRS["sentence2"], PAIRS["score"]) == pytest.approx(
        metrics["tiny_spearman_cosine"], abs=1e-6)

    before = {n: p.detach().clone() for n, p in st.named_parameters()}
    args = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "mnrl"), max_steps=1,
                                                per_device_train_batch_size=6, learning_rate=1e-2, report_to=[],
                                                save_strategy="no", use_cpu=True, seed=0)
    pairs = data.select_columns(["sentence1", "sentence2"])
    SentenceTransformerTrainer(model=st, args=args, train_dataset=pairs,
                               loss=MultipleNegativesRankingLoss(st)).train()
    assert any(not torch.equal(p, before[n]) for n, p in st.named_parameters() if ".encoders.1." in n)


@pytest.fixture
def sts_script(monkeypatch):
    """scripts/sts_embeddings.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("sts_embeddings", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "sts_embeddings.py"))
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "sts_embeddings", script)  # its dataclasses look their module up
    spec.loader.exec_module(script)
    return script


def test_sts_script_eval_sets_with_their_own_limit(sts_script, shared_data):
    """`task:split:N` takes the first N pairs of that set, whatever `--max_eval_samples` says; malformed entries are
    errors naming the expected form."""
    spec, (s1, s2, scores) = sts_script.load_pairs("sick_relatedness:test:30", shared_data, limit=1000)
    assert len(s1) == len(s2) == len(scores) == 30
    assert sts_script.eval_name("sick_relatedness:test:30") == f"{spec.name}/test (first 30)"
    assert len(sts_script.load_pairs("stsb:validation", shared_data, limit=12)[1][0]) == 12
    for bad in ("stsb", "stsb:validation:many"):
        with pytest.raises(ValueError, match="task:split or task:split:N"):
            sts_script.StsArguments(eval_sets=[bad])


@pytest.mark.slow  # trains and scores real STS slices: about a minute
def test_sts_script_zero_shot_fine_tune_and_resume(tiny_paths, shared_data, tmp_path, sts_script):
    """scripts/sts_embeddings.py on tiny members and slices of real STS-B / SICK: the zero-shot rows (a member's row is
    the member alone), the member weights picked on the selection set, one fine-tuning run per model, the tables,
    and a resumed run that reuses finished runs."""
    from hf_multiencoder.training.sentence_embeddings import sts_pairs

    script = sts_script
    out = tmp_path / "sts"
    common = ["--encoders", *tiny_paths[:2], "--encoder_names", "bert", "roberta", "--data_dir", shared_data,
              "--max_eval_samples", "40", "--max_seq_length", "32", "--output_dir", str(out)]
    results = script.main([*common, "--poolings", "mean", "--max_selection_samples", "30", "--do_train",
                           "--train_models", "bert", "fused", "--max_train_samples", "8", "--train_batch_size", "4",
                           "--seeds", "1"])
    rows = {row["model"]: row for row in results["zero_shot"]["rows"]}
    assert {"bert", "roberta", "concat (raw)", "normalized concat", "normalized concat, weights 1/3",
            "normalized concat of whitened members"} <= set(rows)
    assert sum(bool(row.get("selected")) for row in rows.values()) == 1
    selected = next(row for row in rows.values() if row.get("selected"))
    assert selected["selection"] == max(row["selection"] for name, row in rows.items()
                                        if name.startswith("normalized concat") and "members" not in name)
    # a member's row is that member alone, embedded by itself
    member = MultiEncoderModel.from_encoders(tiny_paths[:1], encoder_names=["bert"], fusion="concat")
    member_tok = MultiEncoderTokenizer.from_encoders(tiny_paths[:1], encoder_names=["bert"])
    s1, s2, gold = (c[:40] for c in sts_pairs("stsb", "validation", data_dir=shared_data))
    alone = sts_spearman(lambda batch: member.encode(batch, tokenizer=member_tok, max_length=32), "stsb", s1, s2, gold)
    assert rows["bert"]["stsb/validation"] == pytest.approx(100 * alone, abs=1e-3)
    tuned = {entry["model"]: entry for entry in results["fine_tuned"]["models"]}
    assert set(tuned) == {"bert", "fused"} and tuned["fused"]["stsb/validation"]["n"] == 1
    table = (out / "results.md").read_text()
    assert "| normalized concat | mean |" in table and "(*)" in table and "| fused | median" in table
    assert json.loads((out / "results.json").read_text())["data"]["stsb/validation"] == os.path.relpath(
        os.path.join(shared_data, "glue", "STS-B"), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # resumed: the finished runs are read back, the zero-shot rows kept
    again = script.main([*common, "--skip_zero_shot", "--do_train", "--train_models", "bert", "fused",
                         "--max_train_samples", "8", "--train_batch_size", "4", "--seeds", "1"])
    assert again["fine_tuned"]["models"] == results["fine_tuned"]["models"]
    assert again["zero_shot"] == results["zero_shot"]


@pytest.mark.slow  # the real pair, three fresh interpreters
@pytest.mark.real_encoders
def test_readme_embedding_example_runs_verbatim(tmp_path):
    """The README's sentence-embedding example with the real MiniLM + MPNet: it prints what it claims, and the saved
    folder gives the same vectors in sentence-transformers where hf_multiencoder is not installed."""
    from test_real_encoders import _missing_encoders, readme_block

    if _missing_encoders():
        pytest.skip(f"real encoders {_missing_encoders()} are not in the Hugging Face cache: run `make encoders`")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    code = readme_block("embeddings") + "\nprint(json.dumps(emb.tolist()))\n"
    proc = subprocess.run([sys.executable, "-c", "import json\n" + code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "(3, 1152)"
    similarity = torch.tensor(ast.literal_eval(lines[1].removeprefix("tensor(").removesuffix(")")))
    assert similarity.shape == (1, 2) and similarity[0, 0] > similarity[0, 1]  # "Hi!" is nearer than the weather
    emb = np.array(json.loads(lines[-1]))
    elsewhere = run_without_package("import json\n" + readme_block("embeddings-elsewhere") +
                                    "\nprint(json.dumps(st.encode(['Well, hello there']).tolist()))\n", tmp_path)
    np.testing.assert_allclose(np.array(elsewhere), emb[:1], atol=1e-5)
