import json
import os
import subprocess
import sys
import textwrap

import pytest
import transformers

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
def run_without_package():
    """`run(code, cwd) -> dict`: run `code` in a fresh interpreter that cannot import hf_multiencoder (site-packages
    without its .pth files, so no editable install; its own module cache) and return the JSON object its last
    output line prints."""

    def run(code: str, cwd) -> dict:
        site_packages = os.path.dirname(os.path.dirname(transformers.__file__))
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
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
