#!/usr/bin/env bash
# A Python 3.12 environment for the openhands backend's tests (openhands-sdk needs Python >= 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

# A pyenv shim named python3.12 may exist yet fail when 3.12 is not the selected version, so
# each candidate must actually run.
find_python312() {
  local candidate
  for candidate in ${PYTHON312:-} python3.12 \
      "$(command -v pyenv >/dev/null && pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
      /usr/bin/python3.12 /usr/local/bin/python3.12; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      command -v "$candidate" 2>/dev/null || echo "$candidate"
      return 0
    fi
  done
  return 1
}

if ! PY312=$(find_python312); then
  echo "install-py312: no working Python 3.12 found; openhands tests will be skipped" >&2
  exit 0
fi
[ -x .venv312/bin/python ] || "$PY312" -m venv .venv312
# Only what the tests marked py312 (tests/backends/agents/openhands/) need: the openhands extra
# cannot share an environment with the codex extra (openhands-sdk needs mcp < 2, codex needs
# mcp >= 2), so not '.[dev,openhands]'.
packages=(-e '.[openhands]' 'pytest>=8' 'pytest-asyncio>=0.24' 'pytest-timeout>=2.3')
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install --python .venv312/bin/python -q "${packages[@]}"
else
  .venv312/bin/python -m pip install -q "${packages[@]}"
fi
