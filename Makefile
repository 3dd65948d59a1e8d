# Two commands a user needs: `make demo` and `make test` (each creates or reuses .venv).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The torch build to install first. CPU machines: 2.13.0 (the CPU build); GPU users install
# their CUDA build into .venv before running make, and set TORCH_SPEC to what they installed.
TORCH_SPEC ?= torch==2.13.0
# FAIRSEQ=ve (default, hash-pinned wheel) or FAIRSEQ=fallback (fairseq-fixed sdist build).
FAIRSEQ ?= ve
PKG_SOURCES := setup.py $(shell find lightcompress -name '*.py' 2>/dev/null)
RUNTIME_SOURCES := runtime/pyproject.toml $(shell find runtime -name '*.py' 2>/dev/null)

.PHONY: all install wheel web web-student demo test test-lab lint format clean

all: test

$(VENV)/.stamp-deps: requirements/lock.txt requirements/fairseq.txt requirements/fairseq-fallback.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -r requirements/lock.txt "$(TORCH_SPEC)"
ifeq ($(FAIRSEQ),fallback)
	$(PIP) install -q --no-deps --no-build-isolation -r requirements/fairseq-fallback.txt
else
	$(PIP) install -q --no-deps --require-hashes -r requirements/fairseq.txt
endif
	$(PY) -c "import torch, fairseq; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	touch $@

# A regular (non-editable) install, so that `--user-dir lightcompress` resolves from any
# directory (fairseq looks next to its own package); reinstalled whenever a source changes.
# The runtime (runtime/: numpy + onnxruntime, no torch) is its own distribution, installed
# first: the plugin depends on it.
$(VENV)/.stamp-pkg: $(VENV)/.stamp-deps $(PKG_SOURCES) $(RUNTIME_SOURCES) web/index.html web/lightcompress.mjs
	$(PIP) install -q --no-deps --no-build-isolation --force-reinstall ./runtime
	$(PIP) install -q --no-deps --no-build-isolation --force-reinstall .
	rm -rf build lightcompress.egg-info runtime/build runtime/*.egg-info
	touch $@

install: $(VENV)/.stamp-pkg

# The runtime's wheel (dist/lightcompress_runtime-*.whl), to serve exports without torch
# (pip install dist/lightcompress_runtime-*.whl numpy onnxruntime)
wheel: $(VENV)/.stamp-deps
	$(PIP) wheel -q --no-deps --no-build-isolation -w dist ./runtime
	rm -rf runtime/build runtime/*.egg-info

# The page's npm packages (web/package-lock.json: ONNX Runtime Web and sentencepiece, which
# lightcompress-export-web copies into every page; onnxruntime-node and playwright-core, which
# tests/test_web.py runs the page's module and Debian's Chromium with). Without npm this says so
# and those tests skip, except in CI (.ci/run), where they fail.
WEB_MODULES := web/node_modules/.package-lock.json
$(WEB_MODULES): web/package.json web/package-lock.json
	cd web && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The shipped default student's page (examples/translation/results/web-student, committed without
# its engine): the engine from web/node_modules (make web), checked against the page's web.json.
WEB_STUDENT := examples/translation/results/web-student
web-student: install web
	$(PY) -c "from lightcompress.deploy.web_export import restore_engine; restore_engine('$(WEB_STUDENT)')"
	@echo "open it: python -m http.server -d $(WEB_STUDENT) 8000   # then http://localhost:8000/"

web:
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory $(WEB_MODULES); \
	else echo "make web: npm not found: install Node.js 20 and npm for the page's tests (tests/test_web.py)"; fi

demo: install
	PATH="$(abspath $(VENV))/bin:$$PATH" bash examples/translation/demo.sh

# Run from the checkout root: in-process imports and `--user-dir <checkout>/lightcompress` use the
# sources; one test checks the installed copy with a bare `--user-dir lightcompress`.
# pytest-xdist, one worker per core (at most 8; TEST_WORKERS=0 runs serially in one process):
# tests/conftest.py's scheduler keeps a module with module fixtures (trained models) on one
# worker and sends the slowest work first; the slowest tests and modules are printed at the end.
# The tests' fairseq and plugin commands are forked from a server per worker that has imported
# torch once (tests/forkserver.py; LC_TEST_NO_FORK=1: each a fresh interpreter;
# LC_TEST_FORK_LOG=FILE: which commands ran as fresh interpreters and why).
TEST_WORKERS ?= auto
test: install web
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -ra --durations=15 \
	  -n $(TEST_WORKERS) --maxprocesses 8 tests

# The lab's tests (lab/: the project's own experiments, apart from the product. lab/tests: the
# results harness of lab/results, the corpus builders, the device scripts; lab/bench/tests: the
# benchmark scripts).
test-lab: install web
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pytest -q -ra --durations=15 \
	  -n $(TEST_WORKERS) --maxprocesses 8 lab/tests lab/bench/tests

lint: install
	$(VENV)/bin/ruff check lightcompress runtime tests scripts examples lab
	$(VENV)/bin/ruff format --check lightcompress runtime tests scripts examples lab

format: install
	$(VENV)/bin/ruff format lightcompress runtime tests scripts examples lab
	$(VENV)/bin/ruff check --fix lightcompress runtime tests scripts examples lab

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache dist runtime/build runtime/*.egg-info
