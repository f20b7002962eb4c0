import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from tiny_encoders import build_tiny_encoders  # noqa: E402

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
