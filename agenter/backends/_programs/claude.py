"""What agenter knows about Claude Code itself, shared by the claude-code backend (through the
SDK) and claude-cli (through `claude -p --output-format stream-json`): both read the same tool
blocks, tool_use_result payloads, usage objects and API stream events, so one set of pure rules
maps them to commands, exit codes, file edits, usage and redactable deltas; and both start the
same program, so where its credentials are, the CLI bundled with claude-agent-sdk, its OS
sandbox (settings, requirements, install hint) and its quiet environment are stated here once.
"""

from __future__ import annotations

import asyncio
import glob
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenter._types import Usage
from agenter.backends._deltas import DeltaBuffer
from agenter.backends.base import BackendMessage, BaseBackend, MessageType
from agenter.host import Program, Requirement
from agenter.host.requirements import Credentials

if TYPE_CHECKING:
    from agenter.store import ConversationStore

__all__ = ["CREDENTIALS", "FILE_WRITE_TOOLS", "QUIET_ENV", "SANDBOX_INSTALL", "SANDBOX_SETTINGS", "SESSION_KIND",
           "SHELL_TOOL", "StreamedBlocks", "bundled_cli", "call_target", "compacted", "config_dir", "denied_calls",
           "exit_code", "keep_session", "line_changes", "restore_session", "result_text", "sandbox_hint",
           "sandbox_requirements", "session_file", "usage_from"]

log = logging.getLogger("agenter.backends")

#: Where Claude Code's credentials may be (claude-code and claude-cli).
CREDENTIALS = Credentials(env=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                               "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
                          files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"))
#: Variables that keep a pipeline run of Claude Code quiet: no auto-update, telemetry or other
#: side traffic.
QUIET_ENV: dict[str, str] = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}

#: Claude Code's own sandbox for sandbox=True (its `sandbox` settings): shell commands run in it
#: without asking, it never falls back to an unsandboxed shell, and no command may leave it
#: (no dangerouslyDisableSandbox escape).
SANDBOX_SETTINGS: dict[str, bool] = {
    "enabled": True,
    "failIfUnavailable": True,
    "autoAllowBashIfSandboxed": True,
    "allowUnsandboxedCommands": False,
}
#: How to get what the sandbox needs on Linux, or do without it.
SANDBOX_INSTALL = ("apt-get install bubblewrap socat (Fedora: dnf install bubblewrap socat), or pass "
                   "sandbox=False to run Claude Code without its OS sandbox")

#: Claude Code's tools that write a file named in their input, and the input key holding the path.
FILE_WRITE_TOOLS: dict[str, str] = {
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
}

#: Claude Code's shell tool: its calls are commands in the event vocabulary.
SHELL_TOOL = "Bash"

# How Claude Code's Bash result says a command failed ("Exit code 4\n<output>").
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (-?\d+)")
#: The API's streamed block types whose deltas go out as they arrive: the message they become,
#: the delta's type and the key of its text.
_DELTAS = {"text": (MessageType.TEXT_DELTA, "text_delta", "text"),
           "thinking": (MessageType.THINKING_DELTA, "thinking_delta", "thinking")}


# ---------------------------------------------------------------------------------- the program
#: The `kind` of a Claude Code session transcript kept in agenter's store (backends/_stored_files.py).
SESSION_KIND = "claude-session"


def config_dir(env: Mapping[str, str]) -> Path:
    """Where Claude Code keeps its settings and sessions when started with `env` on top of this
    process's environment: $CLAUDE_CONFIG_DIR, else `.claude` in its HOME."""
    merged = {**os.environ, **env}
    if merged.get("CLAUDE_CONFIG_DIR"):
        return Path(merged["CLAUDE_CONFIG_DIR"]).expanduser()
    return Path(merged.get("HOME") or Path.home()) / ".claude"


def session_file(env: Mapping[str, str], session_id: str) -> Path | None:
    """Claude Code's transcript of a session (`projects/<the folder it ran in>/<id>.jsonl` under
    `config_dir`), which `--resume` reads; None when there is none."""
    found = sorted((config_dir(env) / "projects").glob(f"*/{glob.escape(session_id)}.jsonl"))
    return found[0] if found else None


async def keep_session(backend: BaseBackend[Any], env: Mapping[str, str], session: str | None,
                       store: ConversationStore | None) -> None:
    """Keep Claude Code's session file in the pause store of a backend whose run paused
    (claude-code; acp with claude-agent-acp), so that a process on another host, or with another
    HOME, can resume the session (`restore_session`); `store` is the one the pause record went to.
    A failure is logged: this host can still approve."""
    from agenter.backends._stored_files import keep_file
    from agenter.store import StoreError

    if session is None:
        return
    try:
        path = await asyncio.to_thread(session_file, env, session)
        if path is None or store is None or not await asyncio.to_thread(
                keep_file, store, session, SESSION_KIND, config_dir(env), path):
            log.warning("%s: Claude Code's file of session %s was not found; only this host (with the same HOME) "
                        "can approve the paused run", backend.name, session)
    except (StoreError, OSError) as exc:
        log.warning("%s: the paused session could not be kept in the store (only this host can approve it): %s",
                    backend.name, backend.redact(str(exc)))


async def restore_session(backend: BaseBackend[Any], env: Mapping[str, str], session: str) -> None:
    """Write back Claude Code's file of a paused session the pause store keeps, when this host
    has none (another host paused it, or another HOME); a file that is here stays as it is."""
    from agenter.backends._pauses import backend_store
    from agenter.backends._stored_files import restore_file
    from agenter.store import StoreError

    try:
        store = await backend_store(backend)
        if store is not None and await asyncio.to_thread(session_file, env, session) is None:
            await asyncio.to_thread(restore_file, store, session, SESSION_KIND, config_dir(env), "projects",
                                    replace=False)
    except (StoreError, OSError) as exc:
        log.warning("%s: the paused session kept in the store could not be restored: %s", backend.name,
                    backend.redact(str(exc)))


def bundled_cli() -> str | None:
    """The `claude` that claude-agent-sdk bundles, when that package is installed (found, not
    imported, so asking costs no import)."""
    try:
        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "_bundled" / "claude"
        if candidate.is_file():
            return str(candidate)
    return None


def sandbox_requirements(sandbox: bool, env_path: str | None) -> list[Requirement]:
    """What Claude Code's OS sandbox needs on this machine: on Linux bubblewrap and socat, looked
    for on the CLI's PATH (`env_path`; None: ours). Nothing elsewhere, or with sandbox=False."""
    if not sandbox or not sys.platform.startswith("linux"):
        return []
    return [Program(name=name, install=SANDBOX_INSTALL, env_path=env_path) for name in ("bwrap", "socat")]


def sandbox_hint(message: str) -> str:
    """`message`, with what to do added when it says that Claude Code's sandbox is unavailable."""
    lowered = message.lower()
    if "sandbox" in lowered and "unavailable" in lowered:
        return f"{message} — Claude Code's sandbox needs bubblewrap and socat on Linux: {SANDBOX_INSTALL}."
    return message


# ---------------------------------------------------------------------------------- what it says
def usage_from(raw: Any) -> Usage:
    """Usage from the Messages API's usage object, as Claude Code forwards it (cache reads and
    writes apart from input, as agenter counts them); anything but an object counts nothing."""
    figures = raw if isinstance(raw, dict) else {}

    def number(key: str) -> int:
        value = figures.get(key)
        return int(value) if isinstance(value, int | float) else 0

    return Usage(input_tokens=number("input_tokens"), output_tokens=number("output_tokens"),
                 cache_read_tokens=number("cache_read_input_tokens"),
                 cache_write_tokens=number("cache_creation_input_tokens"))


def call_target(name: str, tool_input: Any) -> str:
    """What a tool call acts on, for a denial: a Bash call's command, else the path its input
    names (a file tool's, Read's, Glob's or Grep's), else the tool's name."""
    arguments = tool_input if isinstance(tool_input, dict) else {}
    command = arguments.get("command")
    if name == SHELL_TOOL and isinstance(command, str):
        return command
    path = arguments.get(FILE_WRITE_TOOLS.get(name, "file_path")) or arguments.get("path")
    return path if isinstance(path, str) and path else name


def denied_calls(denials: Any) -> list[tuple[str, str, str]]:
    """(tool_use_id, tool name, target) of each call a result's `permission_denials` lists: the
    calls Claude Code's permission system refused (its deny rules, its permission mode, a
    can_use_tool deny). Anything but a list of objects lists none."""
    out = []
    for denied in denials if isinstance(denials, list) else []:
        if isinstance(denied, dict):
            name = str(denied.get("tool_name") or "tool")
            out.append((str(denied.get("tool_use_id") or ""), name, call_target(name, denied.get("tool_input"))))
    return out


def result_text(content: Any) -> str:
    """Text of a tool result's content (a string or a list of MCP-style blocks; a block that is
    not text shows as its type, e.g. "[image]")."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                parts.append(str(block.get("text", "")) if block.get("type") == "text" else f"[{block.get('type')}]")
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return str(content)


def exit_code(text: str, is_error: bool, tool_use_result: Any) -> int | None:
    """A Bash result's exit code: 0 when it succeeded, the code its error text names, else None
    (interrupted, denied, timed out)."""
    if not is_error:
        interrupted = isinstance(tool_use_result, dict) and tool_use_result.get("interrupted")
        return None if interrupted else 0
    match = _EXIT_CODE.match(text.lstrip())
    return int(match.group(1)) if match else None


def line_changes(name: str, tool_input: dict[str, Any], tool_use_result: Any) -> tuple[int, int]:
    """Lines added and removed by a file tool: from the patch Claude Code reports, else (a new
    file, an older CLI) from the tool's input."""
    patch = tool_use_result.get("structuredPatch") if isinstance(tool_use_result, dict) else None
    if patch:
        lines = [line for hunk in patch if isinstance(hunk, dict) for line in hunk.get("lines") or []
                 if isinstance(line, str)]
        return sum(line.startswith("+") for line in lines), sum(line.startswith("-") for line in lines)

    def count(value: Any) -> int:
        return len(value.splitlines()) if isinstance(value, str) else 0

    if name == "Write":
        before = tool_use_result.get("originalFile") if isinstance(tool_use_result, dict) else None
        return count(tool_input.get("content")), count(before)
    edits = tool_input.get("edits") if name == "MultiEdit" else [tool_input]
    pairs = [e for e in edits if isinstance(e, dict)] if isinstance(edits, list) else []
    return (sum(count(e.get("new_string", e.get("new_source"))) for e in pairs),
            sum(count(e.get("old_string")) for e in pairs))


def compacted(event: dict[str, Any]) -> BackendMessage:
    """Claude Code's `compact_boundary` system message (the data of the SDK's SystemMessage, or
    the stream-json event) as COMPACTED, with the context size before and after when it says."""
    metadata = event.get("compact_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    before, after = metadata.get("pre_tokens"), metadata.get("post_tokens")
    return BackendMessage(MessageType.COMPACTED, "Claude Code compacted its context", raw=event,
                          details={"tokens_before": before if isinstance(before, int) else None,
                                   "tokens_after": after if isinstance(after, int) else None,
                                   "trigger": metadata.get("trigger")})


class StreamedBlocks:
    """The main agent's streamed blocks: the Messages API's stream events, which Claude Code
    forwards with partial messages on, as TEXT_DELTA (and THINKING_DELTA) messages. Each block's
    text is held back to whitespace (DeltaBuffer), so a key split over deltas is redacted whole.
    Tool calls, usage and the stop reason are left to the whole messages that follow.

    `open_text`: TEXT_DELTAs went out that no whole TEXT has closed yet; the backend clears it
    when it sends the whole text. Limit: a subagent's stream events must not be fed (its texts
    stay whole).
    """

    def __init__(self, redact: Callable[[str], str], *, thinking: bool = True):
        self._redact = redact
        self._kinds = ("text", "thinking") if thinking else ("text",)
        # Streamed blocks of the current API message by index: their type and unsent rest.
        self._open: dict[int, tuple[str, DeltaBuffer]] = {}
        self.open_text = False

    def event(self, event: Any) -> list[BackendMessage]:
        """Messages for one stream event (a new message first ends every block still open)."""
        event = event if isinstance(event, dict) else {}
        kind, index = event.get("type"), event.get("index")
        if kind == "message_start":
            return self.flush()
        if not isinstance(index, int):
            return []
        if kind == "content_block_start":
            block = event.get("content_block")
            block_type = block.get("type") if isinstance(block, dict) else None
            if isinstance(block_type, str) and block_type in self._kinds:
                self._open[index] = (block_type, DeltaBuffer(self._redact))
            return []
        if kind == "content_block_stop":
            return self.flush(index)
        opened, delta = self._open.get(index), event.get("delta")
        if kind != "content_block_delta" or opened is None or not isinstance(delta, dict):
            return []
        block_type, buffer = opened
        message_type, delta_type, key = _DELTAS[block_type]
        piece = delta.get(key) if delta.get("type") == delta_type else None
        if not isinstance(piece, str) or not piece:
            return []
        return self._delta(message_type, buffer.feed(piece))

    def flush(self, index: int | None = None) -> list[BackendMessage]:
        """The held-back rest of one streamed block (all of them when `index` is None), ending it."""
        out: list[BackendMessage] = []
        for i in list(self._open) if index is None else [index]:
            opened = self._open.pop(i, None)
            if opened is not None:
                out += self._delta(_DELTAS[opened[0]][0], opened[1].flush())
        return out

    def _delta(self, kind: MessageType, text: str) -> list[BackendMessage]:
        if not text:
            return []
        if kind is MessageType.TEXT_DELTA:
            self.open_text = True
        return [BackendMessage(kind, text)]
