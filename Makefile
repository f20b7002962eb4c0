# Everything a fresh machine needs lives here: `make test` and `make demo` create .venv themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# No HF_HOME here: `make encoders` seeds the standard Hugging Face cache ($HF_HOME if you set one, else
# ~/.cache/huggingface), so every later command, script and notebook finds the members by name.

# Debian's chromium for the demo page's browser test (tests/test_demo_app.py); where it cannot be installed (no
# root, no apt-get) that test skips and says why
browser:
	@command -v chromium >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1) || \
	  echo "[browser] chromium is not installed: the demo page's browser test will skip"

.PHONY: browser install test test-fast demo encoders compat quality docs docs-install benchmark clean

$(VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: 2.13.0 is the local CPU wheel; anything else pulls GBs of CUDA wheels.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[dev,plot,peft,sentence-transformers,onnx,demo]" torch==2.13.0
	touch $@

install: $(VENV)/.installed

# one pytest worker per core (pytest-xdist), each test file whole in one worker, one OpenMP thread per worker: two
# workers with several threads each on a small machine spin against each other and run far slower
TEST_ENV := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
XDIST := -n auto --dist loadfile

test: install encoders compat browser
	$(TEST_ENV) $(PY) -m pytest -q -ra $(XDIST)

# the inner loop: everything but the tests marked slow (subprocesses, compiles, end-to-end scripts)
test-fast: install
	$(TEST_ENV) $(PY) -m pytest -q -ra $(XDIST) -m "not slow"

encoders: install
	$(PY) scripts/install_encoders.py --python $(PY)

# the cached venvs of tests/test_compat.py (transformers 4.57.6 for the shipped code, 5.0.0 = setup.py's floor);
# rebuilt only when their requirements or setup.py change; one that cannot be built makes its test skip, saying why
compat: install
	$(PY) tests/compat_envs.py

demo: install encoders
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false $(PY) scripts/demo.py

benchmark: install encoders
	HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false $(PY) benchmarks/bench_train.py

quality: install
	$(PY) -m ruff check hf_multiencoder tests run_glue_multi.py run_mlm_multi.py run_multitask.py run_pretraining.py run_distill.py benchmarks scripts space

# the manual (docs/, mkdocs Material + mkdocstrings) into site/; --strict fails on a broken link or reference
$(VENV)/.docs-installed: $(VENV)/.installed
	$(PIP) install -q -e ".[docs]" torch==2.13.0
	touch $@

docs-install: $(VENV)/.docs-installed

docs: docs-install
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .venv-compat build site *.egg-info
