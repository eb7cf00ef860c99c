#!/usr/bin/env bash
# The fast tier (`make check`): lint, types, and every test that needs no agent program, no
# second Python and no network, on two workers when pytest-xdist is installed (the dev extra
# has it). `make test` (scripts/run-tests.sh) stays the full suite.
set -uo pipefail
status=0
.venv/bin/ruff check agenter tests benchmarks examples || status=$?
.venv/bin/mypy || status=$?
workers=()
if .venv/bin/python -c "import xdist" 2>/dev/null; then
  workers=(-n "${CHECK_WORKERS:-2}")
fi
.venv/bin/python -m pytest -q -p no:cacheprovider -m "not agent and not py312 and not slow" "${workers[@]}" "$@" \
  || status=$?
exit $status
