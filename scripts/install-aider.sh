#!/usr/bin/env bash
# Aider (pypi aider-chat) in an environment of its own, .venv-aider, so its many exact pins never
# touch agenter's. The aider-cli backend's tests find it at .venv-aider/bin/aider; users install
# it the same way (or with `pipx install aider-chat`) and pass program_path= when it is not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

AIDER_VERSION="${AIDER_VERSION:-0.86.2}"

# aider-chat supports Python 3.10 to 3.12. A pyenv shim may exist yet fail when its version is
# not selected, so each candidate must actually run.
find_python() {
  local candidate
  for candidate in ${AIDER_PYTHON:-} python3.12 python3.11 python3.10 \
      "$(command -v pyenv >/dev/null && pyenv root 2>/dev/null)"/versions/3.1[012]*/bin/python3 \
      /usr/bin/python3.12 /usr/bin/python3.11 /usr/local/bin/python3.12 /usr/local/bin/python3.11; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 12)' >/dev/null 2>&1; then
      command -v "$candidate" 2>/dev/null || echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ -x .venv-aider/bin/aider ] && .venv-aider/bin/aider --version 2>/dev/null | grep -q "$AIDER_VERSION"; then
  exit 0
fi
if ! PY=$(find_python); then
  echo "install-aider: no Python 3.10-3.12 found; the aider-cli tests will be skipped" >&2
  exit 0
fi
[ -x .venv-aider/bin/python ] || "$PY" -m venv .venv-aider
if [ -x .venv/bin/uv ]; then
  .venv/bin/uv pip install --python .venv-aider/bin/python -q "aider-chat==$AIDER_VERSION"
else
  .venv-aider/bin/python -m pip install -q "aider-chat==$AIDER_VERSION"
fi
