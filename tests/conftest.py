import os

import pytest

from hf_multiencoder.testing_utils import build_tiny_encoders

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.environ.get("HF_MULTIENCODER_DATA", os.path.join(REPO_ROOT, "..", "shared", "data"))


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory):
    """Folders of three tiny random members: BERT-32, RoBERTa-40, DistilBERT-24 (built once per session)."""
    return build_tiny_encoders(str(tmp_path_factory.mktemp("tiny_encoders")))


@pytest.fixture(scope="session")
def shared_data():
    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f"real data folder {SHARED_DATA} is missing (set HF_MULTIENCODER_DATA)")
    return SHARED_DATA


@pytest.fixture
def hub_offline(monkeypatch):
    """`hub_offline(True/False)`: Hugging Face offline mode as the libraries read it (the constants `huggingface_hub`
    and `datasets` set from HF_HUB_OFFLINE at import), for this test only."""
    import datasets
    from huggingface_hub import constants

    def set_mode(offline: bool) -> None:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", offline)

    return set_mode


@pytest.fixture
def python_without_package(tmp_path):
    """`run(code)`: run `code` in a fresh interpreter that sees the installed libraries but cannot import
    hf_multiencoder (site-packages without its .pth files, `-S`), offline, with its own module cache; returns the JSON
    object the code prints last. What a user without the package gets from a saved folder and remote code."""
    import json
    import subprocess
    import sys
    import textwrap

    import transformers

    site_packages = os.path.dirname(os.path.dirname(transformers.__file__))
    preamble = textwrap.dedent(f"""
        import json, sys
        sys.path.append({site_packages!r})
        try:
            import hf_multiencoder
            raise SystemExit("hf_multiencoder is importable: the check would prove nothing")
        except ImportError:
            pass
    """)

    def run(code: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        proc = subprocess.run([sys.executable, "-S", "-c", preamble + textwrap.dedent(code)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
