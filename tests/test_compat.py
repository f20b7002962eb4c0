"""Other transformers versions, each in a virtual environment of its own (built once, cached in .venv-compat/):

- transformers 4.57 (many Hub users are still on 4.x): a model and tokenizer saved here (5.x) load with
  `trust_remote_code` where hf_multiencoder is not installed, give the same logits and run the pipeline;
- transformers 5.0.0, setup.py's floor: the package itself installs and runs (assemble, train a step, save, reload).

Building an environment needs PyPI (torch 2.13.0 comes from the local CPU wheel); without it the tests skip.
"""

import json
import os
import re
import subprocess
import textwrap

import compat_envs  # tests/compat_envs.py (pytest puts tests/ on sys.path)
import pytest
import torch
from compat_envs import COMPAT_ENVS, REPO_ROOT

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer

TEXTS = ["He can will go", "the cat sat on the mat , somebody just left"]
VERSIONS = dict((package, version) for version, package in COMPAT_ENVS)  # with the package -> version

pytestmark = pytest.mark.slow  # a virtual environment to build (once) and a fresh interpreter per test


def compat_python(transformers_version: str, with_package: bool) -> str:
    """The cached environment's interpreter (`make test` builds them first); skips the test, saying why, if it
    cannot be built (no PyPI)."""
    try:
        return compat_envs.compat_python(transformers_version, with_package)
    except RuntimeError as err:
        pytest.skip(str(err))


def run(python: str, code: str, cwd, env_extra=None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **(env_extra or {}))
    proc = subprocess.run([python, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_transformers_4_57_loads_what_5x_saved(tiny_paths, tmp_path):
    names = ["bert", "roberta", "distil"]
    torch.manual_seed(0)
    model = MultiEncoderForSequenceClassification.from_encoders(
        tiny_paths, encoder_names=names, fusion="dme", num_labels=2, id2label={0: "neg", 1: "pos"},
        label2id={"neg": 0, "pos": 1}).eval()
    tokenizer = MultiEncoderTokenizer.from_encoders(tiny_paths, encoder_names=names)
    tokenizer.check_model(model)
    folder = tmp_path / "saved"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with torch.no_grad():
        logits = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits

    python = compat_python(VERSIONS[False], with_package=False)
    result = run(python, f"""
        import json, torch, transformers
        try:
            import hf_multiencoder
            raise SystemExit("hf_multiencoder must not be importable here")
        except ImportError:
            pass
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline
        m = AutoModelForSequenceClassification.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        t = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        with torch.no_grad():
            logits = m(**t({TEXTS!r}, padding=True, return_tensors="pt")).logits.tolist()
        p = pipeline("text-classification", model={str(folder)!r}, trust_remote_code=True)({TEXTS!r}, batch_size=2)
        fused = m.predict_with_fusion_weights(t, {TEXTS!r})
        print(json.dumps({{"version": transformers.__version__, "logits": logits, "pipeline": p,
                          "weights": fused["fusion_weights"]}}))
    """, cwd=tmp_path, env_extra={"HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert result["version"] == VERSIONS[False]
    torch.testing.assert_close(torch.tensor(result["logits"]), logits, atol=1e-6, rtol=0)
    assert [r["label"] for r in result["pipeline"]] == ["pos" if row.argmax() == 1 else "neg" for row in logits]
    assert list(result["weights"][0]) == names


def test_package_runs_on_the_transformers_floor(tmp_path):
    """setup.py says transformers>=5.0: the package works on 5.0.0 itself."""
    with open(os.path.join(REPO_ROOT, "setup.py")) as f:
        floor = re.search(r'"transformers([^"]*)"', f.read()).group(1)
    assert floor.startswith(">=5.0,") and VERSIONS[True] == "5.0.0", floor  # the version this test installs
    python = compat_python(VERSIONS[True], with_package=True)
    result = run(python, """
        import json, os, tempfile, torch, transformers
        from datasets import Dataset
        from transformers import AutoModelForSequenceClassification, TrainingArguments
        from hf_multiencoder import (MultiEncoderDataCollator, MultiEncoderForSequenceClassification,
                                     MultiEncoderTokenizer, MultiEncoderTrainer)
        from hf_multiencoder.testing_utils import build_tiny_encoders
        root = tempfile.mkdtemp()
        paths = build_tiny_encoders(root)
        model = MultiEncoderForSequenceClassification.from_encoders(paths, fusion="dme", num_labels=2,
                                                                    encoder_dropout=0.2, fusion_dim=16)
        tok = MultiEncoderTokenizer.from_encoders(paths)
        ds = Dataset.from_dict({"s": ["the cat sat", "he went", "a dog", "she can go"] * 4, "label": [1, 0] * 8})
        ds = ds.map(lambda b: dict(tok(b["s"], truncation=True, max_length=16)), batched=True, remove_columns=["s"])
        args = TrainingArguments(output_dir=root + "/out", max_steps=2, per_device_train_batch_size=4, report_to=[],
                                 use_cpu=True, save_strategy="steps", save_steps=1, save_total_limit=1)
        MultiEncoderTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                            data_collator=MultiEncoderDataCollator(tok)).train()
        model.save_pretrained(root + "/m"); tok.save_pretrained(root + "/m")
        again = AutoModelForSequenceClassification.from_pretrained(root + "/m").eval(); model.eval()
        b = tok(["the cat sat"], return_tensors="pt")
        same = torch.allclose(again(**b).logits, model(**b).logits)
        errors = []  # the config's validation runs on the floor too (on 5.0-5.3 `__post_init__` never ran)
        for bad in ({"fusion_dim": 0}, {"fusion": "sum"}, {"fusion_dropout": 1.0}):
            try:
                type(model.config)(encoders=model.config.encoders, **bad)
                errors.append(None)
            except ValueError as err:
                errors.append(str(err))
        print(json.dumps({"version": transformers.__version__, "same": same, "fusion_dim": again.config.fusion_dim,
                          "dropout": again.multiencoder.encoders[0].config.hidden_dropout_prob, "errors": errors,
                          "checkpoints": sorted(os.listdir(root + "/out"))}))
    """, cwd=tmp_path)
    errors = result.pop("errors")
    # checkpoints appear whole (staged, renamed) and rotate on the floor's Trainer too
    assert result.pop("checkpoints") == ["checkpoint-2"]
    assert result == {"version": VERSIONS[True], "same": True, "fusion_dim": 16, "dropout": 0.2}
    assert "`fusion_dim` must be a positive" in errors[0] and "sum" in errors[1] and "`fusion_dropout`" in errors[2]
