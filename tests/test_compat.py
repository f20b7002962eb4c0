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
import sys
import textwrap

import pytest
import torch

from hf_multiencoder import MultiEncoderForSequenceClassification, MultiEncoderTokenizer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT_ROOT = os.path.join(REPO_ROOT, ".venv-compat")
TEXTS = ["He can will go", "the cat sat on the mat , somebody just left"]

pytestmark = pytest.mark.slow  # a virtual environment to build (once) and a fresh interpreter per test


def compat_python(transformers_version: str, with_package: bool) -> str:
    """The interpreter of a cached venv with torch 2.13.0 and transformers==version (and this package with its
    dependencies, if asked); built on first use. Skips the test, with the reason, if it cannot be built."""
    name = f"transformers-{transformers_version}" + ("-package" if with_package else "")
    venv = os.path.join(COMPAT_ROOT, name)
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".installed")
    if not os.path.isfile(marker):
        requirements = ["torch==2.13.0", f"transformers=={transformers_version}"]
        if with_package:
            requirements += ["-e", REPO_ROOT]
        commands = [[sys.executable, "-m", "venv", "--clear", venv],
                    [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]]
        for command in commands:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
            if proc.returncode != 0:
                pytest.skip(f"could not build the transformers {transformers_version} environment "
                            f"({' '.join(command[:4])}...): {proc.stderr.strip().splitlines()[-1:]}")
        with open(marker, "w") as f:
            f.write(transformers_version)
    return python


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

    python = compat_python("4.57.6", with_package=False)
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
                          "weights": fused["DME scores"]}}))
    """, cwd=tmp_path, env_extra={"HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert result["version"] == "4.57.6"
    torch.testing.assert_close(torch.tensor(result["logits"]), logits, atol=1e-6, rtol=0)
    assert [r["label"] for r in result["pipeline"]] == ["pos" if row.argmax() == 1 else "neg" for row in logits]
    assert list(result["weights"][0]) == names


def test_package_runs_on_the_transformers_floor(tmp_path):
    """setup.py says transformers>=5.0: the package works on 5.0.0 itself."""
    with open(os.path.join(REPO_ROOT, "setup.py")) as f:
        floor = re.search(r'"transformers([^"]*)"', f.read()).group(1)
    assert floor.startswith(">=5.0,"), floor  # the version this test installs
    python = compat_python("5.0.0", with_package=True)
    result = run(python, """
        import json, tempfile, torch, transformers
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
                                 use_cpu=True, save_strategy="no")
        MultiEncoderTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                            data_collator=MultiEncoderDataCollator(tok)).train()
        model.save_pretrained(root + "/m"); tok.save_pretrained(root + "/m")
        again = AutoModelForSequenceClassification.from_pretrained(root + "/m").eval(); model.eval()
        b = tok(["the cat sat"], return_tensors="pt")
        same = torch.allclose(again(**b).logits, model(**b).logits)
        print(json.dumps({"version": transformers.__version__, "same": same, "fusion_dim": again.config.fusion_dim,
                          "dropout": again.multiencoder.encoders[0].config.hidden_dropout_prob}))
    """, cwd=tmp_path)
    assert result == {"version": "5.0.0", "same": True, "fusion_dim": 16, "dropout": 0.2}
