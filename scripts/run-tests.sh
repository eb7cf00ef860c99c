#!/usr/bin/env bash
# The whole suite: main environment, then the Python 3.12 one for what is marked `py312`
# (openhands: its SDK needs Python >= 3.12 and pins that cannot share agenter's environment).
set -uo pipefail
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
# these machines): without it every pytest process, and every agenter process a test starts,
# compiles agenter and rewrites the tests' asserts again (35 s of collection instead of 11 s).
unset PYTHONDONTWRITEBYTECODE
export PATH="$PWD/node_modules/.bin:$PATH"
status=0
# Lint and types first: fast, and a failure is reported with the tests' result.
.venv/bin/ruff check agenter tests benchmarks examples || status=$?
.venv/bin/mypy || status=$?
# Two workers (pytest-xdist, in the dev extra), as in `make check`: measured on a 2-core machine,
# the main environment's 2,458 tests took 8.5 minutes this way and 29 serially, most of a test's time
# being spent waiting on an agent program or a model server. TEST_WORKERS=0 runs them serially.
. "$(dirname "$0")/pytest-workers.sh"
pytest_workers "${TEST_WORKERS:-2}"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 -m "not py312" "${WORKERS[@]}" "$@" || status=$?
if [ -x .venv312/bin/python ]; then
  # Only the folders that hold py312 tests: the others import packages this environment lacks.
  .venv312/bin/python -m pytest -q -p no:cacheprovider -m py312 \
    tests/backends/agents/openhands tests/backends/test_contract.py || status=$?
fi
exit $status
