# Entry points on a fresh machine: `make demo`, `make check` (the fast tier) and `make test` (everything).
comma := ,
PYTHON ?= python3
PYTHON312 ?= python3.12
VENV := .venv
VENV312 := .venv312
UV := $(VENV)/bin/uv

.PHONY: demo check test install install-core install-python install-npm install-system install-py312 install-aider bench clean

# The demo needs only the core package (the anthropic-sdk backend and the scripted model server).
demo: install-core
	$(VENV)/bin/python examples/demo.py

# Lint, types and every test that needs no agent program: needs only the dev extra (minutes).
check: install-python
	bash scripts/check.sh

# The whole suite, CI's command: installs the agent programs, the aider and Python 3.12 venvs.
test: install
	bash scripts/run-tests.sh

install: install-system install-python install-npm install-py312 install-aider

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip uv

install-core: $(VENV)/bin/python
	$(UV) pip install --python $(VENV)/bin/python -q -e . pytest

install-python: $(VENV)/bin/python
	$(UV) pip install --python $(VENV)/bin/python -q -e '.[dev]'

# Pinned agent programs (Codex, ACP agents) from npm, into ./node_modules.
install-npm:
	npm install --no-audit --no-fund --loglevel=error

# bubblewrap + socat: Claude Code's OS sandbox needs them (tests prove both with and without).
install-system:
	bash scripts/install-system-deps.sh

# openhands-sdk needs Python >= 3.12: its tests run in a second environment.
install-py312: $(VENV)/bin/python
	bash scripts/install-py312.sh

# aider-chat in an environment of its own (its exact pins never touch agenter's).
install-aider: $(VENV)/bin/python
	bash scripts/install-aider.sh

bench: install-python
	$(VENV)/bin/python benchmarks/run_all.py $(subst $(comma), ,$(NAMES))

clean:
	rm -rf $(VENV) $(VENV312) .venv-aider node_modules .pytest_cache
