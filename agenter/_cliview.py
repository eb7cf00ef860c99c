"""What the `agenter` command shows: the live display of `agenter run`, its --json stream, and
`agenter show` / `agenter runs` for transcripts.

`EventText` is the one renderer of events as readable lines: `agenter show` prints its lines for
a transcript, and the live display prints the same lines as the events arrive (a shell command
as `$ pytest -q`, its exit, validation starting and each validator's verdict, the agent's text),
keeping a status line (on a terminal) with the running tokens and cost. Output that is not a
terminal is never wrapped at a fixed width: a line is one line, as print() would write it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INTERRUPTED = "interrupted by the user"

#: Characters of one rendered line (a tool's input, a command's output, the agent's text).
LINE_LIMIT = 160
#: Problems shown per validator.
PROBLEMS_SHOWN = 5
#: Lines of the agent's final summary the live display prints.
SUMMARY_LINES = 20

# The live display's heading colour per final status; the heading itself is the status.
_COLOURS = {"completed": "green", "completed_with_limit_exceeded": "yellow", "refused": "yellow",
            "paused": "yellow"}
# The live display's colour of a line's mark.
_TONES = {"ok": "green", "bad": "red", "warn": "yellow"}


def one_line(text: str, limit: int = LINE_LIMIT) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass(frozen=True)
class Line:
    """One rendered line: `mark` (✓, ✗, $ ...) coloured by `tone` on a terminal, then `text`.
    `kind` is the event's kind, so a display can leave some out; `depth` indents details."""

    text: str
    kind: str = ""
    mark: str = ""
    tone: str = ""
    depth: int = 0

    def plain(self) -> str:
        return f"{self.mark} {self.text}".rstrip() if self.mark else self.text


class EventText:
    """Events as readable lines. Streamed text pieces are joined and become one line when
    anything else happens (or at flush())."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        #: The last text shown, whole (the live display does not repeat it as the summary).
        self.last_text = ""

    def flush(self) -> list[Line]:
        if not self.pending:
            return []
        text, self.pending = "".join(self.pending), []
        return self._text(text)

    def _text(self, text: str) -> list[Line]:
        if not text.strip():
            return []
        self.last_text = text
        return [Line(f"text: {one_line(text)}", kind="text")]

    def message(self, data: dict[str, Any]) -> list[Line]:
        """A backend message (`data.kind`, or the older `message_type`)."""
        kind = str(data.get("kind") or data.get("message_type"))
        content = str(data.get("content") or "")
        if kind == "text_delta":
            self.pending.append(content)
            return []
        lines = self.flush()
        if kind in ("thinking_delta", "thinking"):
            return lines
        if kind == "text":
            return lines + self._text(content)
        return lines + [self._message(kind, data, content)]

    @staticmethod
    def _message(kind: str, data: dict[str, Any], content: str) -> Line:
        tool = str(data.get("tool_name") or "")
        if kind in ("tool_call_started", "tool_call"):
            return Line(f"{tool} {one_line(json.dumps(data.get('tool_input'), default=str))}", kind, "tool")
        if kind in ("tool_call_finished", "tool_result"):
            failed = bool(data.get("is_error"))
            return Line(f"{tool} {one_line(content)}".rstrip(), kind, "✗" if failed else "✓", "bad" if failed else "")
        if kind in ("command_started", "command_start"):
            command = data.get("command") or (data.get("tool_input") or {}).get("command") or content
            return Line(one_line(str(command)), "command_started", "$")
        if kind in ("command_finished", "command_end"):
            code = data.get("exit_code")
            failed = code not in (0, None) or bool(data.get("is_error"))
            text = f"exit {'?' if code is None else code} {one_line(content)}".rstrip()
            return Line(text, "command_finished", "$", "bad" if failed else "")
        if kind in ("file_edited", "file_edit"):
            return Line(f"edited {data.get('path')} (+{data.get('lines_added', '?')} "
                        f"-{data.get('lines_removed', '?')})", "file_edited")
        if kind in ("permission_decision", "permission"):
            denied = bool(data.get("is_error"))
            deferred = (data.get("tool_input") or {}).get("decision") == "defer"
            verdict = "deferred" if deferred else "denied" if denied else "allowed"
            return Line(f"permission {verdict}: {tool} {one_line(content)}".rstrip(),
                        "permission_decision", tone="warn" if denied or deferred else "")
        if kind in ("usage_updated", "usage"):
            usage = data.get("usage") or {}
            return Line(f"usage {usage.get('total_tokens', 0)} tokens, ${usage.get('cost_usd', 0) or 0:.4f}",
                        "usage_updated")
        return Line(f"{kind}: {one_line(content)}", kind, tone="warn" if kind == "error" else "")

    def validation_start(self, data: dict[str, Any]) -> list[Line]:
        lines = self.flush()
        names = [str(name) for name in data.get("validators") or []]
        if not names:
            return lines
        files = data.get("file_count")
        count = f" ({plural(files, 'file')})" if isinstance(files, int) else ""
        return lines + [Line(f"validating: {', '.join(names)}{count}", "validation_start")]

    def validation_result(self, data: dict[str, Any]) -> list[Line]:
        """✓ passed, ✗ failed, ! an advisory (non-blocking) failure, – skipped (nothing to check)."""
        lines = self.flush()
        name = str(data.get("validator"))
        if data.get("skipped"):
            return lines + [Line(f"{name} skipped", "validation_result", "–", "dim")]
        errors = [str(error) for error in data.get("errors") or []]
        if data.get("passed"):
            return lines + [Line(name, "validation_result", "✓", "ok")]
        advisory = data.get("blocking") is False
        lines.append(Line(f"{name}: {plural(len(errors), 'problem')}", "validation_result",
                          "!" if advisory else "✗", "warn" if advisory else "bad"))
        lines += [Line(one_line(error, 200), "validation_result", depth=1) for error in errors[:PROBLEMS_SHOWN]]
        if len(errors) > PROBLEMS_SHOWN:
            lines.append(Line(f"… {len(errors) - PROBLEMS_SHOWN} more", "validation_result", depth=1))
        return lines


def paused_lines(data: dict[str, Any]) -> list[str]:
    """A paused run's calls (what each would do, and the rule that asked) and how to continue."""
    pending = [call for call in data.get("pending") or [] if isinstance(call, dict)]
    lines = []
    for call in pending:
        target = call.get("command") or ", ".join(str(p) for p in call.get("paths") or []) or one_line(
            json.dumps(call.get("input"), default=str), 100)
        why = f" ({call.get('rule')})" if call.get("needs_approval") and call.get("rule") else ""
        mark = "waits for approval" if call.get("needs_approval") else "then, after it"
        lines.append(f"{mark}: {call.get('tool')} {one_line(str(target), 120)}{why}  [call {call.get('id')}]")
    handle = data.get("resume_handle")
    if handle:
        lines.append(f"continue: agenter approve {handle}   (or --deny; --always; --call ID for one call)")
    return lines


def final_summary(data: dict[str, Any], status: str, last_text: str) -> list[str]:
    """The agent's own final words, when it wrote some that were not the last line shown whole."""
    summary = str(data.get("summary") or "").strip()
    if not summary or summary.startswith(f"{status}:"):  # the session's stand-in, not the agent's
        return []
    if one_line(summary) == one_line(last_text) and len(one_line(summary)) < LINE_LIMIT:
        return []
    lines = summary.splitlines()
    shown = lines[:SUMMARY_LINES]
    if len(lines) > SUMMARY_LINES:
        shown.append(f"… ({len(lines) - SUMMARY_LINES} more lines: see --json or the transcript)")
    return shown


class Progress:
    """What the events so far say: enough for the status line, and to end an interrupted stream
    truthfully. Tokens and cost follow every usage update, not only the end of an iteration."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.iteration = 0
        self.tokens = 0
        self.cost = 0.0
        self.files: set[str] = set()
        self.status: str | None = None  # set by session_end

    def update(self, event: Any) -> None:
        kind, data = event.type.value, event.data
        if kind == "iteration_start":
            self.iteration = data["iteration"]
        elif kind == "backend_message" and data.get("kind") == "usage_updated" and isinstance(data.get("usage"), dict):
            usage = data["usage"]
            self.tokens = int(usage.get("total_tokens") or self.tokens)
            self.cost = float(usage.get("cost_usd") or self.cost)
        elif kind == "iteration_end":
            self.tokens, self.cost = data.get("tokens", 0), data.get("cost", 0.0)
            self.files.update(data.get("files_modified", []))
        elif kind == "session_end":
            self.status = data.get("status")


class NdjsonDisplay:
    """--json: one event per line on stdout; the last line is always session_end."""

    def __init__(self) -> None:
        self.progress = Progress()

    def show(self, event: Any) -> None:
        self.progress.update(event)
        sys.stdout.write(event.to_json() + "\n")
        sys.stdout.flush()

    def interrupted(self) -> None:
        """End the stream as a session would: an outcome event, then session_end."""
        from agenter import CodingEvent, CodingEventType

        progress = self.progress
        if progress.status is not None:
            return  # the session had already ended
        common = dict(iterations=progress.iteration, tokens=progress.tokens, cost=progress.cost)
        # files: what the finished iterations changed; the interrupted turn may have changed more.
        self.show(CodingEvent(type=CodingEventType.FAILED, data=dict(
            status="error", error=INTERRUPTED, exceeded_limit=None, files=sorted(progress.files),
            summary="", **common)))
        # result is null: the session did not finish, so there is no verified result.
        self.show(CodingEvent(type=CodingEventType.SESSION_END, data=dict(
            status="error", error=INTERRUPTED, interrupted=True,
            duration=round(time.monotonic() - progress.started, 3), result=None, **common)))

    def close(self) -> None:
        pass


def stderr_console() -> Any:
    """A rich console on stderr that wraps nothing when stderr is not a terminal (a pipe, a CI
    log): rich would otherwise cut lines at 80 columns, in the middle of a path or JSON."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


#: Backend messages the live display keeps to its status line instead of printing (unless they
#: report a failure or a denial): usage, a tool's successful answer, a permission granted.
_STATUS_ONLY = frozenset({"usage_updated", "tool_call_finished", "permission_decision"})


class LiveDisplay:
    """A status line that follows the run (on a terminal: iteration, tokens and cost as usage
    arrives, what the agent is doing), with the notable events printed above it as
    `agenter show` renders them. `cost_note` qualifies the cost (a local model server bills
    nothing itself)."""

    def __init__(self, console: Any = None, *, cost_note: str = "") -> None:
        self.console = console or stderr_console()
        self.status = self.console.status("starting…")
        self.status.start()
        self.progress = Progress()
        self.text = EventText()
        self.cost_note = cost_note
        self.activity = "starting…"

    def _status_line(self) -> str:
        progress = self.progress
        if progress.iteration == 0:
            return self.activity
        return (f"iteration {progress.iteration} · {progress.tokens} tokens · ${progress.cost:.4f} · "
                f"{self.activity}")

    def _print(self, lines: list[Line], indent: int = 2) -> None:
        from rich.markup import escape

        for line in lines:
            if line.kind in _STATUS_ONLY and line.tone not in ("bad", "warn"):
                continue
            pad = " " * (indent + 4 * line.depth)
            mark = ""
            if line.mark:
                style = _TONES.get(line.tone, "dim" if line.mark in ("tool", "$", "–") else "")
                mark = f"[{style}]{escape(line.mark)}[/] " if style else f"{escape(line.mark)} "
            text = escape(line.text)
            if line.tone == "dim" or line.depth or line.kind in ("text", "validation_start"):
                text = f"[dim]{text}[/]"
            self.console.print(f"{pad}{mark}{text}", highlight=False)

    def show(self, event: Any) -> None:
        from rich.markup import escape

        self.progress.update(event)
        kind, data = event.type.value, event.data
        if kind == "backend_message":
            self._message(data)
        elif kind == "validation_start":
            lines = self.text.validation_start(data)
            self._print(lines)
            if lines and lines[-1].kind == "validation_start":
                self.activity = lines[-1].text.split(" (")[0]
        elif kind == "validation_result":
            self._print(self.text.validation_result(data))
        else:
            self._print(self.text.flush())
            self._lifecycle(kind, data)
        self.status.update(escape(self._status_line()))

    def _message(self, data: dict[str, Any]) -> None:
        kind = str(data.get("kind") or data.get("message_type"))
        lines = self.text.message(data)
        self._print(lines)
        if kind in ("thinking_delta", "thinking"):
            self.activity = "thinking…"
        elif kind == "text_delta":
            self.activity = "writing: " + one_line("".join(self.text.pending)[-80:], 80)
        elif lines and kind not in ("usage_updated", "usage", "permission_decision", "permission"):
            last = lines[-1]
            self.activity = last.plain()[:100]

    def _lifecycle(self, kind: str, data: dict[str, Any]) -> None:
        from rich.markup import escape

        if kind == "session_start":
            model = data.get("model") or "agent default"
            self.console.print(f"[bold]agenter[/] {escape(str(data.get('backend')))} · model: {escape(str(model))}"
                               f" · {escape(str(data.get('cwd')))}", highlight=False)
        elif kind == "iteration_start":
            self.console.print(f"[cyan]▶ iteration {self.progress.iteration}[/]", highlight=False)
            self.activity = "waiting for the model…"
        elif kind in ("completed", "failed", "refused", "paused"):
            self._outcome(kind, data)
        elif kind == "session_end":
            duration = data.get("duration", 0) or 0
            cost = f"${float(data.get('cost') or 0):.4f}" + (f" {self.cost_note}" if self.cost_note else "")
            self.console.print(f"{plural(int(data.get('iterations') or 0), 'iteration')} · "
                               f"{data.get('tokens', 0) or 0} tokens · {escape(cost)} · {duration:.1f} s",
                               highlight=False)

    def _outcome(self, kind: str, data: dict[str, Any]) -> None:
        from rich.markup import escape

        status = str(data.get("status") or kind)
        colour = _COLOURS.get(status, "red")
        heading = status.replace("_", " ").upper()
        detail = data.get("error") or data.get("reason") or ""
        if kind == "paused":
            asking = sum(1 for call in data.get("pending") or [] if isinstance(call, dict) and call.get("needs_approval"))
            detail = f"{plural(asking, 'call')} wait{'s' if asking == 1 else ''} for your approval"
        self.console.print(f"[bold {colour}]{heading}[/]  {escape(str(detail))}".rstrip(), highlight=False)
        for line in paused_lines(data) if kind == "paused" else []:
            self.console.print("  " + escape(line), highlight=False)
        summary = final_summary(data, status, self.text.last_text)
        for number, line in enumerate(summary):
            self.console.print(("  summary: " if number == 0 else "           ") + escape(line), highlight=False)
        for path in data.get("files", []):
            self.console.print(f"  changed {escape(path)}", highlight=False)

    def interrupted(self) -> None:
        pass  # main() prints the one line that says so

    def close(self) -> None:
        self.status.stop()


# ---------------------------------------------------------------------------- transcripts
def when(stamp: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if isinstance(stamp, int | float) else "?"


def read(path: str, error: Callable[[str], None]) -> Any:
    from agenter import ConfigurationError
    from agenter.session.transcript import read_transcript

    try:
        return read_transcript(path)
    except ConfigurationError as exc:
        error(str(exc))
        return None


class TranscriptPrinter:
    """`agenter show`: plain text, one line per notable event (EventText's lines)."""

    def __init__(self) -> None:
        self.text = EventText()

    def header(self, transcript: Any) -> None:
        head = transcript.header
        versions = " · ".join(f"{k} {v}" for k, v in (head.get("versions") or {}).items())
        print(f"transcript {transcript.path}")
        print(f"backend {head.get('backend')} · model {head.get('model') or 'agent default'} · "
              f"mode {head.get('mode')} · cwd {head.get('cwd')}")
        print(f"started {when(head.get('started'))} · {versions}")
        resumed = head.get("resumed_from")
        if resumed:
            print(f"resumes {resumed.get('transcript') or 'session'} (agent session {resumed.get('session_id')})")
        if transcript.session_id:
            print(f"agent session {transcript.session_id}")

    def request(self, record: dict[str, Any]) -> None:
        self.flush_text()
        prompt = str(record.get("prompt") or "").strip().splitlines()
        print(f"\n── request {record.get('request')}: {prompt[0][:200] if prompt else ''}")

    def flush_text(self) -> None:
        self._print(self.text.flush())

    @staticmethod
    def _print(lines: list[Line]) -> None:
        for line in lines:
            print(" " * (4 + 4 * line.depth) + line.plain())

    def event(self, record: dict[str, Any]) -> None:
        kind, data = record.get("type"), record.get("data") or {}
        if kind == "backend_message":
            self._print(self.text.message(data))
        elif kind == "validation_start":
            self._print(self.text.validation_start(data))
        elif kind == "validation_result":
            self._print(self.text.validation_result(data))
        else:
            self.flush_text()
            self._lifecycle(str(kind), data)

    @staticmethod
    def _lifecycle(kind: str, data: dict[str, Any]) -> None:
        if kind == "iteration_start":
            print(f"  ▶ iteration {data.get('iteration')}")
        elif kind == "iteration_end":
            files = ", ".join(data.get("files_modified") or []) or "none"
            print(f"  ◀ iteration {data.get('iteration')}: {'passed' if data.get('passed') else 'not passed'}; "
                  f"files {files}; {data.get('tokens', 0)} tokens, ${data.get('cost', 0):.4f}")
        elif kind in ("completed", "failed", "refused", "paused"):
            status = str(data.get("status") or kind).replace("_", " ").upper()
            detail = data.get("error") or data.get("reason") or data.get("summary") or ""
            print(f"  {status}  {one_line(str(detail))}")
            for line in paused_lines(data) if kind == "paused" else []:
                print(f"    {line}")
        elif kind == "session_end":
            print(f"  {plural(int(data.get('iterations') or 0), 'iteration')} · {data.get('tokens', 0)} tokens · "
                  f"${data.get('cost', 0) or 0:.4f} · {data.get('duration', 0) or 0:.1f} s")


def show(path: str, error: Callable[[str], None]) -> bool:
    """Print a transcript as a readable account of the run(s); False when it cannot be read."""
    transcript = read(path, error)
    if transcript is None:
        return False
    out = TranscriptPrinter()
    out.header(transcript)
    for record in transcript.records:
        kind = record.get("record")
        if kind == "request":
            out.request(record)
        elif kind == "event":
            out.event(record)
    out.flush_text()
    if transcript.end is None:
        print("\n(the session did not close: the run was killed, crashed, or is still running)")
    return True


def runs(folder: str) -> list[list[str]]:
    """The transcripts in a directory as table rows (a header row first), oldest first."""
    from agenter import ConfigurationError
    from agenter.session.transcript import read_transcript

    root = os.path.expanduser(folder)
    rows = []
    for name in sorted(os.listdir(root)):
        if not name.endswith(".jsonl"):
            continue
        try:
            transcript = read_transcript(os.path.join(root, name))
        except ConfigurationError:
            continue  # another program's JSONL
        head, results = transcript.header, transcript.results
        last = results[-1] if results else {}
        status = last.get("status") or ("unfinished" if transcript.end is None else "no request")
        tokens = sum(int(r.get("tokens") or 0) for r in results)
        cost = sum(float(r.get("cost") or 0) for r in results)
        rows.append((head.get("started") or 0, [
            when(head.get("started")), str(head.get("backend")), str(head.get("model") or "-"),
            str(len(transcript.requests)), status, str(tokens), f"${cost:.4f}", name]))
    if not rows:
        return []
    table = [["started", "backend", "model", "requests", "status", "tokens", "cost", "file"]]
    return table + [row for _, row in sorted(rows, key=lambda r: r[0])]
