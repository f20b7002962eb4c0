import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from hf_multiencoder import MultiEncoderTokenizer
from hf_multiencoder.models.precision_multiencoder import FAST_PATH_ENV
from hf_multiencoder.testing_utils import build_tiny_encoders

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The suite's numeric references (hand computations, plain transformers, fp32 ONNX) are fp32, so the automatic bf16
# fast path is switched off for every test and for the scripts they start (they inherit the environment): on a CPU
# with bf16 units it would otherwise pick bf16 autocast and the same test would pass or fail by machine.
# tests/test_fast_path.py checks the automatic choice (capability mocked both ways) and runs bf16 for real.
os.environ[FAST_PATH_ENV] = "off"
SHARED_DATA = os.environ.get("HF_MULTIENCODER_DATA", os.path.join(REPO_ROOT, "..", "shared", "data"))


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory):
    """Folders of three tiny random members: BERT-32, RoBERTa-40, DistilBERT-24 (built once per session)."""
    return build_tiny_encoders(str(tmp_path_factory.mktemp("tiny_encoders")))


@pytest.fixture(scope="module")
def tokenizer(tiny_paths):
    """The multi-tokenizer of the three tiny members, one per test module (a module may override it)."""
    return MultiEncoderTokenizer.from_encoders(tiny_paths)


@pytest.fixture(scope="session")
def shared_data():
    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f"real data folder {SHARED_DATA} is missing (set HF_MULTIENCODER_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def run_script():
    """`run_script("benchmarks/x.py", *args, timeout=600, check=True, **env)`: a repository script in a fresh
    interpreter, from the repository root, offline (`env` adds variables). With `check`, a non-zero exit fails the
    test showing the tail of the script's output. Returns the `CompletedProcess`."""

    def run(script: str, *args, timeout: int = 600, check: bool = True, **env) -> subprocess.CompletedProcess:
        environ = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **env)
        proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, script), *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, env=environ, cwd=REPO_ROOT)
        if check:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    return run


@pytest.fixture(scope="session")
def torchrun():
    """`torchrun(script, *args, log_dir, timeout=900)`: `script` under `torchrun --standalone --nproc_per_node 2` (gloo
    on the CPU, one thread a process, offline), each rank's stdout and stderr kept in its own file under `log_dir`. A
    non-zero exit fails the test showing every rank's own output (torchrun's summary alone names the signal, not the
    abort message), then the tail of torchrun's."""

    def run(script: str, *args, log_dir, timeout: int = 900) -> subprocess.CompletedProcess:
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
                   HF_DATASETS_OFFLINE="1")
        # --standalone: the rendezvous binds a port the OS picks (no free port probed, then raced for)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               "--log-dir", str(log_dir), "--redirects", "3", str(script), *map(str, args)],
                              env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            logs = sorted(glob.glob(os.path.join(str(log_dir), "**", "std*.log"), recursive=True))
            ranks = "".join(f"\n--- {os.path.relpath(p, log_dir)} ---\n{open(p).read()[-3000:]}" for p in logs)
            pytest.fail(f"torchrun exited with {proc.returncode}{ranks}\n--- torchrun ---\n{proc.stderr[-2000:]}")
        return proc

    return run


@pytest.fixture(scope="session")
def script_main():
    """`script_main("scripts/x.py")`: that script's `main(argv)`, imported in this process (an error path is then
    checked without paying a fresh interpreter's torch + transformers import)."""
    import importlib.util

    def load(script: str):
        name = "script_" + os.path.splitext(os.path.basename(script))[0]
        spec = importlib.util.spec_from_file_location(name, os.path.join(REPO_ROOT, script))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # as an import does (dataclasses look their module up there)
        spec.loader.exec_module(module)
        return module.main

    return load


@pytest.fixture(scope="session")
def kill_after_first_checkpoint():
    """`kill_after_first_checkpoint(script, args, checkpoints)`: run a repository script that saves a Trainer
    checkpoint per epoch, and kill it (its whole process group, as a lost session would) once `checkpoints` holds a
    finished checkpoint (its `training_clock.json`, written last)."""

    def run(script: str, args, checkpoints) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
        proc = subprocess.Popen([sys.executable, os.path.join(REPO_ROOT, script), *map(str, args)], cwd=REPO_ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        pattern = os.path.join(str(checkpoints), "checkpoint-*", "training_clock.json")
        deadline = time.time() + 600
        while not glob.glob(pattern) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert glob.glob(pattern), "the run saved no checkpoint before it ended"

    return run


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
def registry():
    """Restore the task and reader registries after a test that registers tasks or readers."""
    from hf_multiencoder.data import tasks as tasks_module
    from hf_multiencoder.data.loading import READERS
    from hf_multiencoder.data.tasks import TASKS

    tasks, readers, aliases = dict(TASKS), dict(READERS), dict(tasks_module._ALIASES)
    yield
    TASKS.clear()
    TASKS.update(tasks)
    READERS.clear()
    READERS.update(readers)
    tasks_module._ALIASES.clear()
    tasks_module._ALIASES.update(aliases)
