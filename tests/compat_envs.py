"""The cached virtual environments with other transformers versions that `tests/test_compat.py` runs in
(`compat_python`), built by `make compat` (part of `make test`): `python tests/compat_envs.py`.

Not part of the package: building environments is the test suite's business, not the library's.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/ is one level down
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


if __name__ == "__main__":
    build_compat_venvs()
