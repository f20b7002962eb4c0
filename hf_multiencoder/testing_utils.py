"""Test helpers, as `transformers.testing_utils`: tiny random member encoders of different types, widths and
vocabularies, saved as HF folders (no download), for tests, benchmarks' smoke runs and examples; and the cached
virtual environments with other transformers versions that the compatibility tests run in (`compat_python`,
built by `make test` through `build_compat_venvs`).

BERT (hidden 32, WordPiece, uses token_type_ids), RoBERTa (hidden 40, byte-level BPE, no token types in use),
DistilBERT (dim 24, another WordPiece vocabulary, takes no token_type_ids).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import torch
import transformers
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizer,
    DistilBertConfig,
    DistilBertModel,
    RobertaConfig,
    RobertaModel,
    RobertaTokenizer,
)
from transformers.convert_slow_tokenizer import bytes_to_unicode

WORDS = ("the a an cat dog sat on mat he she can will go went left somebody just new york john smith paris "
         "is was in of and to it likes runs quickly 2024 12 , . ! ?").split()


def _wordpiece_vocab(pieces: list[str]) -> dict[str, int]:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for p in pieces:
        if p not in vocab:
            vocab.append(p)
    return {t: i for i, t in enumerate(vocab)}


def bert_vocab() -> dict[str, int]:
    # Whole words, plus characters and ##characters so that every other word splits into several subwords.
    chars = sorted(set("".join(WORDS)))
    return _wordpiece_vocab(WORDS[:30] + chars + ["##" + c for c in chars] + ["##ing", "##s"])


def distil_vocab() -> dict[str, int]:
    # A different, smaller vocabulary: only a few whole words, so most words split differently from BERT's.
    chars = sorted(set("".join(WORDS)))
    return _wordpiece_vocab(["the", "cat", "on", "go", ","] + chars + ["##" + c for c in chars])


def roberta_vocab_and_merges():
    byte_chars = list(bytes_to_unicode().values())
    vocab = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] + byte_chars
    merges = [("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e"), ("Ġ", "c"), ("Ġc", "a"), ("Ġca", "t"), ("i", "n"), ("in", "g")]
    for a, b in merges:
        if a + b not in vocab:
            vocab.append(a + b)
    return {t: i for i, t in enumerate(vocab)}, merges


def build_tiny_encoders(root: str, seed: int = 0) -> list[str]:
    """Save the three tiny members under ``root``; returns their folders (usable as ``from_encoders`` names)."""
    torch.manual_seed(seed)
    paths = []

    bert_tok = BertTokenizer(vocab=bert_vocab(), do_lower_case=True)
    bert = BertModel(BertConfig(vocab_size=len(bert_tok), hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                intermediate_size=37, max_position_embeddings=64, type_vocab_size=2))
    paths.append(_save(root, "tiny-bert", bert, bert_tok))

    vocab, merges = roberta_vocab_and_merges()
    rob_tok = RobertaTokenizer(vocab=vocab, merges=merges, add_prefix_space=True)
    rob = RobertaModel(RobertaConfig(vocab_size=len(rob_tok), hidden_size=40, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=80,
                                     pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1))
    paths.append(_save(root, "tiny-roberta", rob, rob_tok))

    dis_tok = BertTokenizer(vocab=distil_vocab(), do_lower_case=True)
    dis = DistilBertModel(DistilBertConfig(vocab_size=len(dis_tok), dim=24, n_layers=4, n_heads=4, hidden_dim=37,
                                           max_position_embeddings=64))
    paths.append(_save(root, "tiny-distilbert", dis, dis_tok))
    return paths


def _save(root, name, model, tokenizer) -> str:
    path = os.path.join(root, name)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def run_without_package(code: str, cwd, site_packages: str | None = None) -> dict:
    """Run `code` in a fresh `python -S` (no `.pth` files, so no editable install; no PYTHONPATH) that sees
    `site_packages` (default: this interpreter's) and refuses to go on if `hf_multiencoder` is importable, with its own
    remote-code module cache in `cwd`, and return the JSON object its last output line prints. For tests of what
    loads where `hf_multiencoder` is not installed."""
    site_packages = site_packages or os.path.dirname(os.path.dirname(transformers.__file__))
    prelude = textwrap.dedent(f"""
        import sys
        sys.path.append({site_packages!r})
        try:
            import hf_multiencoder
        except ImportError:
            pass
        else:
            raise SystemExit("the subprocess must not see hf_multiencoder")
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = os.path.join(str(cwd), "modules")
    proc = subprocess.run([sys.executable, "-S", "-c", prelude + textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"The package-free process failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- other transformers versions ------------------------------------------------------------------------------------
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT_ROOT = os.path.join(REPO_ROOT, ".venv-compat")
# (transformers version, with this package installed): 4.57 loads the shipped remote code only; 5.0.0 is setup.py's
# floor, where the package itself must work
COMPAT_ENVS = (("4.57.6", False), ("5.0.0", True))


def _compat_requirements(transformers_version: str, with_package: bool) -> list[str]:
    requirements = ["torch==2.13.0", f"transformers=={transformers_version}"]
    return requirements + (["-e", REPO_ROOT] if with_package else [])


def _compat_stamp(requirements: list[str], with_package: bool) -> str:
    """What a cached environment was built from: its requirements and, with the package, setup.py's content (a
    changed dependency list rebuilds it)."""
    digest = hashlib.sha256(" ".join(requirements).encode())
    if with_package:
        with open(os.path.join(REPO_ROOT, "setup.py"), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def compat_python(transformers_version: str, with_package: bool) -> str:
    """The interpreter of a cached venv (`.venv-compat/`) with torch 2.13.0 (the local CPU wheel) and
    `transformers==transformers_version`, plus this package and its dependencies if `with_package`. Built on first
    use and rebuilt when its requirements or setup.py change. Raises `RuntimeError` naming the failed step (e.g. no
    PyPI) if it cannot be built."""
    name = f"transformers-{transformers_version}" + ("-package" if with_package else "")
    venv = os.path.join(COMPAT_ROOT, name)
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".installed")
    requirements = _compat_requirements(transformers_version, with_package)
    stamp = _compat_stamp(requirements, with_package)
    if os.path.isfile(marker) and open(marker).read().strip() == stamp:
        return python
    commands = [[sys.executable, "-m", "venv", "--clear", venv],
                [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]]
    for command in commands:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise RuntimeError(f"could not build the transformers {transformers_version} environment "
                               f"({' '.join(command[:4])}...): {proc.stderr.strip().splitlines()[-1:]}")
    with open(marker, "w") as f:
        f.write(stamp)
    return python


def build_compat_venvs() -> None:
    """Build (or reuse) every environment of `COMPAT_ENVS`; one that cannot be built is reported, not fatal (its
    test then skips, saying why)."""
    for version, with_package in COMPAT_ENVS:
        try:
            print(f"[compat] transformers {version}: {compat_python(version, with_package)}")
        except RuntimeError as err:
            print(f"[compat] {err}", file=sys.stderr)
