#!/usr/bin/env bash
# System packages the tests need. Idempotent; skips apt when everything is present.
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v socat >/dev/null || need+=(socat)
command -v git >/dev/null || need+=(git)
command -v tmux >/dev/null || need+=(tmux)  # openhands backend, terminal_type='tmux'
# RedisConversationStore's tests start their own server on a free port (never a system service).
command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || need+=(redis-server)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "install-system-deps: please install: ${need[*]}" >&2
  fi
fi
