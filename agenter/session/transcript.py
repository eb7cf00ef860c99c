"""Transcripts: every event of a run appended to a JSONL file as it happens.

One file per session (a one-shot run is a session of one request), one JSON object per line,
each written with a single unbuffered write, so the file is readable up to the last event after
a crash. Records, in order:

    {"record": "header", "format": "agenter-transcript", "version": 1, "backend": ..., "model": ...,
     "mode": ..., "cwd": ..., "versions": {...}, "started": ..., "resumed_from": ...}
    {"record": "request", "request": 1, "prompt": ..., "budget": ..., ...}
    {"record": "agent_session", "session_id": ...}          when the agent's own id becomes known
    {"record": "event", "request": 1, "type": ..., "data": ..., "timestamp": ...}   every event
    {"record": "end", "requests": 1, "usage": {...}, "session_id": ...}   when the session closed

Everything is redacted: events already are, the request's texts are redacted here. The result of
each request is its session_end event (`data["result"]`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenter._errors import ConfigurationError
from agenter._events import CodingEvent, CodingEventType
from agenter._types import CodingRequest, Usage
from agenter.host.redact import Redactor

__all__ = ["FORMAT", "VERSION", "Transcript", "TranscriptWriter", "is_transcript_reference", "read_transcript",
           "resolve_resume"]

FORMAT = "agenter-transcript"
VERSION = 1


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)


class TranscriptWriter:
    """Appends the records of one session to `path` (created 0600, never truncated)."""

    def __init__(self, path: Path, redact: Redactor):
        self.path = path
        self._redact = redact
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0),
                                       0o600)
        self._session_id: str | None = None

    @classmethod
    def create(cls, log_dir: str | os.PathLike[str], *, backend: str, model: str | None, mode: str, cwd: Path,
               redact: Redactor, versions: dict[str, str] | None = None,
               resumed_from: dict[str, Any] | None = None) -> TranscriptWriter:
        """A new transcript in `log_dir` (made if missing), its header written."""
        import platform
        import secrets

        folder = Path(log_dir).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", backend).strip("-") or "backend"
        writer = cls(folder / f"{stamp}-{safe}-{secrets.token_hex(3)}.jsonl", redact)
        writer.write({
            "record": "header", "format": FORMAT, "version": VERSION, "backend": backend, "model": model,
            "mode": mode, "cwd": str(cwd), "pid": os.getpid(), "started": time.time(),
            "versions": {"python": platform.python_version(), "platform": sys.platform, **(versions or {})},
            "resumed_from": resumed_from})
        return writer

    def write(self, record: dict[str, Any]) -> None:
        self._write_line(_json(record))

    def _write_line(self, line: str) -> None:
        if self._fd is None:
            return
        data = (line + "\n").encode("utf-8", "replace")
        try:
            while data:  # O_APPEND: one write per line; loop only on a (rare) short write
                written = os.write(self._fd, data)
                data = data[written:]
        except OSError:
            # A full disk must not end the run; the transcript says nothing more.
            self.close()

    def request(self, index: int, request: CodingRequest) -> None:
        redact = self._redact
        self.write({
            "record": "request", "request": index, "time": time.time(), "prompt": redact(request.prompt),
            "cwd": str(request.cwd), "system_prompt": redact(request.system_prompt) if request.system_prompt else None,
            "budget": request.budget.model_dump() if request.budget else None,
            "allowed_write_paths": request.allowed_write_paths,
            "output_type": request.output_type.__name__ if request.output_type else None,
            "require_changes": request.require_changes,
            "resume": redact(str(request.resume)) if request.resume else None})

    def event(self, index: int | None, event: CodingEvent) -> None:
        """An event (already redacted by the session) as it happened."""
        try:
            body = event.model_dump_json()
        except Exception:  # noqa: BLE001 - a value pydantic cannot write is written as its repr
            body = _json({"type": event.type.value, "data": event.data, "timestamp": event.timestamp})
        self._write_line(f'{{"record":"event","request":{index or 1},{body[1:]}')

    def agent_session(self, session_id: str | None) -> None:
        """The agent's own session id, once it is known or when it changes (what resume needs)."""
        if session_id and session_id != self._session_id:
            self._session_id = session_id
            self.write({"record": "agent_session", "session_id": self._redact(session_id), "time": time.time()})

    def end(self, *, requests: int, usage: Usage, session_id: str | None) -> None:
        self.agent_session(session_id)
        self.write({"record": "end", "time": time.time(), "requests": requests, "usage": usage.model_dump(),
                    "session_id": self._session_id})
        self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@dataclass
class Transcript:
    """A transcript as read back (lines cut off by a crash are skipped)."""

    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def backend(self) -> str | None:
        return self.header.get("backend")

    @property
    def session_id(self) -> str | None:
        """The agent's own session id, the last one recorded (what resume continues)."""
        found = None
        for record in self.records:
            if record.get("record") == "agent_session" and record.get("session_id"):
                found = record["session_id"]
        return found

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("record") == "request"]

    def events(self, request: int | None = None) -> Iterator[CodingEvent]:
        for record in self.records:
            if record.get("record") != "event" or (request is not None and record.get("request") != request):
                continue
            try:
                yield CodingEvent(type=record["type"], data=record.get("data") or {},
                                  timestamp=record.get("timestamp") or 0.0)
            except (KeyError, ValueError):
                continue

    @property
    def results(self) -> list[dict[str, Any]]:
        """The session_end data of each finished request, in order."""
        return [e.data for e in self.events() if e.type is CodingEventType.SESSION_END]

    @property
    def end(self) -> dict[str, Any] | None:
        """The end record; None when the session did not close (it crashed or still runs)."""
        return next((r for r in reversed(self.records) if r.get("record") == "end"), None)


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read a transcript; ConfigurationError when it is missing or not a transcript."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ConfigurationError(f"no transcript at {str(file)!r}", parameter="transcript") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the transcript {str(file)!r}: {exc.strerror or exc}",
                                 parameter="transcript") from None
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the last line of a run killed mid-write
        if isinstance(record, dict):
            records.append(record)
    if not records or records[0].get("record") != "header" or records[0].get("format") != FORMAT:
        raise ConfigurationError(f"{str(file)!r} is not an agenter transcript", parameter="transcript")
    return Transcript(path=file, header=records[0], records=records[1:])


def is_transcript_reference(value: str | os.PathLike[str]) -> bool:
    """A Path, or a str that ends in .jsonl or names a path, is a transcript; a str without a
    path separator is the agent's own session id."""
    if not isinstance(value, str):
        return True
    return value.endswith(".jsonl") or os.sep in value or (os.altsep is not None and os.altsep in value)


def resolve_resume(value: str | os.PathLike[str] | None, backend: str) -> tuple[str | None, dict[str, Any] | None]:
    """The agent session id that `CodingRequest.resume` continues, and where it came from (for
    the new transcript's header). ConfigurationError for a transcript that cannot be resumed."""
    if value is None:
        return None, None
    if not is_transcript_reference(value):
        return str(value), {"session_id": str(value)}
    try:
        transcript = read_transcript(value)
    except ConfigurationError as exc:
        raise ConfigurationError(f"cannot resume: {exc}", parameter="resume") from None
    where = str(transcript.path)
    if transcript.backend != backend:
        raise ConfigurationError(f"cannot resume: the transcript {where!r} is of a {transcript.backend} run, and "
                                 f"this agent's backend is {backend}", parameter="resume")
    session_id = transcript.session_id
    if not session_id:
        raise ConfigurationError(f"cannot resume: the transcript {where!r} recorded no agent session id (the "
                                 "agent never started its session), so there is nothing to continue",
                                 parameter="resume")
    return session_id, {"transcript": where, "session_id": session_id}
