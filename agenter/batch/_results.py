"""The results file: one JSON row per task, appended as each task ends, read back to resume; and
the rows made outside a task's run (an engine's crash)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from agenter._errors import ConfigurationError
from agenter._types import CodingStatus
from agenter.batch._models import BatchRow, BatchTask
from agenter.batch._workspace import public_url


def worker_info() -> dict[str, Any]:
    """The host and process that ran a task (a row's `worker`)."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def crash_row(task: BatchTask, exc: BaseException, kind: str = "crash") -> BatchRow:
    """The row of a task whose engine failed (the task never reported back)."""
    now = time.time()
    return BatchRow(id=task.id, status=CodingStatus.ERROR.value, error=f"{type(exc).__name__}: {exc}",
                    error_kind=kind, repository=public_url(task.repository), started_at=now, finished_at=now,
                    metadata=dict(task.metadata), worker=worker_info())


def check_writable(path: Path, what: str, *, parameter: str) -> None:
    """A ConfigurationError when `path` could not be written as a file (a folder, under a file, in
    a folder this process may not write): found before anything is made."""
    if path.is_dir():
        raise ConfigurationError(f"{what} {str(path)!r} is a directory", parameter=parameter)
    existing = next((folder for folder in path.parents if folder.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigurationError(f"cannot make {what} {str(path)!r}: {str(existing)!r} is not a directory",
                                 parameter=parameter)
    target = path if path.exists() else existing
    if target is not None and not os.access(target, os.W_OK):
        raise ConfigurationError(f"cannot write {what} {str(path)!r}: permission denied on {str(target)!r}",
                                 parameter=parameter)


def read_rows(path: str | Path) -> tuple[dict[str, BatchRow], int]:
    """The last row of each id in a results file, and how many lines could not be read (a line
    cut short by a crash, or edited by hand). A missing file has no rows."""
    rows: dict[str, BatchRow] = {}
    bad = 0
    try:
        handle = open(path, encoding="utf-8", errors="replace")  # closed below
    except FileNotFoundError:
        return rows, 0
    with handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = BatchRow.model_validate(json.loads(line))
            except ValueError:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
                bad += 1
                continue
            rows[row.id] = row
    return rows, bad


class ResultsFile:
    """Appends rows to a JSONL file, each flushed as it is written.

    While a batch holds it, the file is locked (flock), so a second batch writing to the same
    file fails at once instead of interleaving rows.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._handle: IO[str] | None = None
        self._lock = asyncio.Lock()

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a", encoding="utf-8")  # kept open for the batch
        except OSError as exc:
            raise ConfigurationError(f"cannot write the results file {str(self.path)!r}: {exc.strerror or exc}",
                                     parameter="out") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise ConfigurationError(f"another batch is writing to {str(self.path)!r}", parameter="out") from None
        # A crash may have cut the last row short: start ours on a line of its own.
        with open(self.path, "rb") as raw:
            raw.seek(0, os.SEEK_END)
            if raw.tell() > 0:
                raw.seek(-1, os.SEEK_END)
                if raw.read(1) != b"\n":
                    handle.write("\n")
                    handle.flush()
        self._handle = handle

    async def append(self, row: BatchRow) -> None:
        line = json.dumps(row.model_dump(mode="json"), ensure_ascii=False, default=str) + "\n"
        async with self._lock:
            await asyncio.to_thread(self._write, line)

    def _write(self, line: str) -> None:
        assert self._handle is not None, "ResultsFile.open() first"
        self._handle.write(line)
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.flush()
                os.fsync(self._handle.fileno())
            self._handle.close()
            self._handle = None

    def __enter__(self) -> ResultsFile:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
