"""ScriptedModelServer: a real HTTP server on 127.0.0.1 that plays a model from a script.

It runs stdlib ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive, chunked SSE) in a daemon
thread, so it starts in milliseconds and never needs a network. Every request is logged.
Model-turn requests consume the script in order; the request's wire decides the rendering.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .records import Headers, ModelRequest, PromptCache, RecordedRequest
from .script import SCRIPT_ITEM_TYPES, Disconnect, Hang, HttpError, Reply, ScriptItem, as_script_item, reply, text
from .wires import DEFAULT_WIRES
from .wires._base import MODEL_TURN, Wire

Handler = Callable[[ModelRequest], Any]
"""A callback that answers a model turn: returns a script item, a part/string, or None to
fall through to the script."""


def _redact_key(wire: Wire, headers: Headers, query: dict[str, list[str]]) -> None:
    """Record the API key as ``[redacted]`` where the wire says it travels (Gemini: the
    ``x-goog-api-key`` header or ``?key=``), so the request log never holds it."""
    for name in getattr(wire, "redacted_headers", ()):
        if name in headers:
            headers[name.lower()] = "[redacted]"
    for name in getattr(wire, "redacted_query", ()):
        if name in query:
            query[name] = ["[redacted]"] * len(query[name])


class _DropConnection(Exception):
    """Raised inside a request handler to close the socket without (finishing) a response."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64
    block_on_close = False
    allow_reuse_address = True
    scripted: ScriptedModelServer


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Streamed events are small writes: without TCP_NODELAY each waits ~40 ms for a delayed ACK.
    disable_nagle_algorithm = True
    server_version = "agenter-scripted-model/1"
    sys_version = ""
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.scripted._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.scripted._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log is server.requests

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except _DropConnection:
            self.close_connection = True
            self._abort()
        except (ConnectionError, OSError):
            self.close_connection = True

    def do_GET(self) -> None:
        self.server.scripted._dispatch(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # -- helpers used by the server ------------------------------------------------------

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = bytearray()
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            raw = bytes(data)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding in ("gzip", "deflate") and raw:
            raw = zlib.decompress(raw, 47)  # 47: auto-detect gzip or zlib header
        elif encoding == "zstd" and raw:
            try:
                import zstandard  # optional

                raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
            except ImportError:
                pass
        return raw

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def start_stream(self, headers: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.flush()

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ScriptedModelServer:
    """A scripted model behind a real HTTP endpoint.

    ``script``: items consumed in order by model-turn requests (see :mod:`.script`).
    ``handler``: ``handler(ModelRequest)`` returning an item (or a part/string) answers a
    turn; returning None falls through to the script. ``default``: answers every turn once
    the script is exhausted; without it an exhausted script answers HTTP 500 with a message
    that says so (and the turn is recorded, so tests can see it).
    """

    def __init__(
        self,
        script: Iterable[Any] | None = None,
        *,
        handler: Handler | None = None,
        default: Any = None,
        host: str = "127.0.0.1",
        port: int = 0,
        wires: Iterable[Wire] | None = None,
    ) -> None:
        if isinstance(script, (str, *SCRIPT_ITEM_TYPES)):
            script = [script]  # a single item is a one-item script
        self._script: list[ScriptItem] = [as_script_item(item) for item in (script or [])]
        self._consumed = 0
        self.handler = handler
        self.default: ScriptItem | None = None if default is None else as_script_item(default)
        self.host = host
        self.port = port
        self.wires: list[Wire] = list(wires) if wires is not None else [wire_cls() for wire_cls in DEFAULT_WIRES]
        self.errors: list[BaseException] = []
        """Exceptions raised by the handler (each was answered with HTTP 500)."""
        self.cache = PromptCache()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._turns = 0

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self.host, self.port), _RequestHandler)
        httpd.scripted = self
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, name=f"scripted-model-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hung, delayed and keep-alive connections are closed at once."""
        httpd = self._httpd
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            # shutdown (not close) wakes the handler thread; it closes its own socket.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedModelServer:
        return self.start()

    async def __aexit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic base URL. OpenAI clients add ``/v1``."""
        if not self.port:
            raise RuntimeError("the scripted model server is not started (use start() or a with block)")
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``: what OpenAI clients (and Codex, LiteLLM) expect."""
        return self.base_url + "/v1"

    # -- script --------------------------------------------------------------------------

    def add(self, *items: Any) -> None:
        """Append items to the script (safe while requests are being served)."""
        with self._lock:
            self._script.extend(as_script_item(item) for item in items)

    @property
    def remaining(self) -> int:
        """Script items not consumed yet."""
        with self._lock:
            return len(self._script) - self._consumed

    # -- request log ---------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in arrival order (a snapshot copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Only model-turn requests (those that consume script items)."""
        with self._lock:
            return [r for r in self._requests if r.kind == MODEL_TURN]

    def wait_for_requests(self, count: int, timeout: float = 5.0, *, model_turns: bool = True) -> list[RecordedRequest]:
        """Block until ``count`` (model-turn) requests arrived; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                found = [r for r in self._requests if r.kind == MODEL_TURN or not model_turns]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(found)} of {count} requests arrived within {timeout}s")
                self._arrived.wait(left)

    # -- internals -----------------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _record(self, record: RecordedRequest) -> None:
        with self._arrived:
            self._requests.append(record)
            self._arrived.notify_all()

    def _next_item(self, request: ModelRequest) -> ScriptItem:
        if self.handler is not None:
            try:
                answer = self.handler(request)
            except Exception as exc:  # noqa: BLE001 - reported to the client and in .errors
                self.errors.append(exc)
                return HttpError(500, f"scripted model server: handler raised {type(exc).__name__}: {exc}", "api_error")
            if answer is not None:
                return as_script_item(answer)
        with self._lock:
            if self._consumed < len(self._script):
                item = self._script[self._consumed]
                self._consumed += 1
                return item
            consumed = self._consumed
        if self.default is not None:
            return self.default
        return HttpError(
            500,
            f"scripted model server: the script is exhausted ({consumed} items consumed; model turn "
            f"#{request.index + 1} to {request.path}). Add items or pass default= to answer extra turns.",
            "api_error",
            (("x-should-retry", "false"),),
        )

    def _wait(self, seconds: float | None) -> None:
        """Sleep, but wake and drop the connection when the server stops."""
        if seconds is None:
            self._stopping.wait()
        elif seconds > 0:
            self._stopping.wait(seconds)
        if self._stopping.is_set():
            raise _DropConnection

    def _dispatch(self, http: _RequestHandler) -> None:
        split = urlsplit(http.path)
        path = split.path
        headers = Headers(http.headers.items())
        raw = http.read_body()
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = None
        method = http.command
        wire, kind = None, None
        for candidate in self.wires:
            kind = candidate.route(method, path, headers)
            if kind is not None:
                wire = candidate
                break
        query = parse_qs(split.query, keep_blank_values=True)
        if wire is not None:
            _redact_key(wire, headers, query)
        record = RecordedRequest(
            method=method,
            path=path,
            query=query,
            headers=headers,
            body=body,
            raw_body=raw,
            wire=wire.name if wire else None,
            time=time.time(),
            kind=kind or "other",
        )
        if wire is None or kind is None:
            self._record(record)
            record.status = 404
            http.send_json(
                404,
                {
                    "type": "error",
                    "error": {
                        "type": "not_found_error",
                        "message": f"scripted model server: no route for {method} {path}",
                    },
                },
            )
            return
        if kind != MODEL_TURN:
            self._record(record)
            status, answer = wire.answer_aux(kind, body, headers)
            record.status = status
            http.send_json(status, answer, wire.response_headers())
            return
        if not isinstance(body, dict):
            self._record(record)
            record.status = 400
            headers_out, error_body = wire.render_error(HttpError(400, "request body must be a JSON object", None, ()))
            http.send_json(400, error_body, headers_out)
            return
        request = wire.parse(body, headers, path)
        with self._lock:
            request.index = self._turns
            self._turns += 1
        record.model_request = request
        self._record(record)
        item = self._next_item(request)
        record.item = item
        self._answer(http, wire, request, item, record)

    def _answer(
        self, http: _RequestHandler, wire: Wire, request: ModelRequest, item: ScriptItem, record: RecordedRequest
    ) -> None:
        if isinstance(item, Hang):
            if item.after_events is not None and request.stream:
                turn = wire.make_turn(item.reply or reply(text("This reply stalls mid-stream.")), request, self.cache)
                http.start_stream(wire.response_headers())
                for frame in wire.render_events(turn)[: max(0, item.after_events)]:
                    http.send_chunk(frame)
            self._wait(item.seconds)
            raise _DropConnection
        self._wait(item.delay)
        if isinstance(item, HttpError):
            headers_out, error_body = wire.render_error(item)
            if item.body is not None:  # the provider's exact answer, as scripted
                error_body = item.body
            record.status = item.status
            http.send_json(item.status, error_body, headers_out)
            return
        if isinstance(item, Disconnect):
            turn = wire.make_turn(item.reply or reply(text("This reply is cut off mid-stream.")), request, self.cache)
            if request.stream:
                http.start_stream(wire.response_headers())
                for frame in wire.render_events(turn)[: max(0, item.after_events)]:
                    http.send_chunk(frame)
            else:
                payload = json.dumps(wire.render_json(turn)).encode()
                http.send_response(200)
                http.send_header("Content-Type", "application/json")
                http.send_header("Content-Length", str(len(payload)))
                http.end_headers()
                http.wfile.write(payload[: len(payload) // 2])
            raise _DropConnection
        assert isinstance(item, Reply)
        turn = wire.make_turn(item, request, self.cache)
        record.status = 200
        if request.stream:
            http.start_stream(wire.response_headers())
            for frame in wire.render_events(turn):
                if self._stopping.is_set():
                    raise _DropConnection
                http.send_chunk(frame)
            http.end_stream()
        else:
            http.send_json(200, wire.render_json(turn), wire.response_headers())
