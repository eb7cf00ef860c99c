#!/usr/bin/env bash
# The fast tier (`make check`): lint, types, and every test that needs no agent program, no
# second Python and no network (pytest -m "not agent and not py312 and not slow"), on two
# workers when pytest-xdist is installed (the dev extra has it). mypy runs beside the tests (one
# process, while they take the workers) and reports after them. `make test`
# (scripts/run-tests.sh) stays the full suite.
set -uo pipefail
# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, set on
# these machines): without it every pytest process, and every agenter process a test starts,
# compiles agenter and rewrites the tests' asserts again (35 s of collection instead of 11 s).
unset PYTHONDONTWRITEBYTECODE
status=0
.venv/bin/ruff check agenter tests benchmarks examples || status=$?

mypy_log=$(mktemp)
.venv/bin/mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null; rm -f "$mypy_log"' EXIT

. "$(dirname "$0")/pytest-workers.sh"
pytest_workers "${CHECK_WORKERS:-2}"
.venv/bin/python -m pytest -q -p no:cacheprovider -m "not agent and not py312 and not slow" "${WORKERS[@]}" "$@" \
  || status=$?

wait "$mypy_pid" || status=$?
cat "$mypy_log"
exit $status
