"""Test helpers, as `transformers.testing_utils`: tiny random member encoders of different types, widths and
vocabularies, saved as HF folders (no download), for tests, benchmarks' smoke runs and examples; and
`run_without_package`, a fresh interpreter that cannot import this package (remote-code loading). Imports only
torch and transformers. (The virtual environments with other transformers versions live in `tests/compat_envs.py`.)

BERT (hidden 32, WordPiece, uses token_type_ids), RoBERTa (hidden 40, byte-level BPE, no token types in use),
DistilBERT (dim 24, another WordPiece vocabulary, takes no token_type_ids).
"""

from __future__ import annotations

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
