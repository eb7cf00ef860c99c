#!/usr/bin/env bash
# The whole suite: main environment, then the Python 3.12 one for openhands.
set -uo pipefail
export PATH="$PWD/node_modules/.bin:$PATH"
status=0
# Lint and types first: fast, and a failure is reported with the tests' result.
.venv/bin/ruff check agenter tests benchmarks examples || status=$?
.venv/bin/mypy || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/py312 "$@" || status=$?
if [ -x .venv312/bin/python ] && [ -d tests/py312 ]; then
  .venv312/bin/python -m pytest -q -p no:cacheprovider tests/py312 || status=$?
fi
exit $status
