"""What the server saw: recorded HTTP requests, parsed model turns, token estimates."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any


class Headers(dict):
    """Request headers keyed by lower-case name; lookups ignore case."""

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        pairs = items.items() if isinstance(items, dict) else items
        for key, value in pairs:
            key = str(key).lower()
            super().__setitem__(key, f"{self[key]}, {value}" if key in self else str(value))

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


@dataclass
class ModelRequest:
    """One model turn as the wire sent it, with a few wire-neutral conveniences.

    ``messages``, ``tools`` and ``system`` stay in the wire's own shape (Anthropic content
    blocks, Responses ``input`` items, Chat Completions messages, Gemini ``contents``) so a
    handler can inspect anything the agent sent. Gemini ``tools`` list each function
    declaration on its own.
    """

    wire: str
    model: str | None
    messages: list[Any]
    tools: list[dict[str, Any]]
    system: Any
    stream: bool
    body: dict[str, Any]
    headers: Headers
    path: str = ""
    index: int = 0
    """0-based number of this model turn on the server."""

    @property
    def tool_names(self) -> list[str]:
        names = []
        for tool in self.tools:
            name = tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type")
            if name:
                names.append(str(name))
        return names

    def tool_type(self, name: str) -> str | None:
        """The declared type of the tool called ``name`` ("custom", "function", ...)."""
        for tool in self.tools:
            if tool.get("name") == name or (tool.get("function") or {}).get("name") == name:
                return tool.get("type")
        return None

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """Tool results the agent sent back, in order: ``{"id", "output", "is_error"}``."""
        results: list[dict[str, Any]] = []
        for message in self.messages:
            if not isinstance(message, dict):
                continue
            if message.get("role") == "tool":  # chat completions
                results.append(
                    {"id": message.get("tool_call_id"), "output": _flatten(message.get("content")), "is_error": False}
                )
            elif message.get("type") in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                results.append(
                    {"id": message.get("call_id"), "output": _flatten(message.get("output")), "is_error": False}
                )
            elif isinstance(message.get("parts"), list):  # gemini
                results.extend(_gemini_result(part) for part in message["parts"] if _gemini_response(part))
            elif isinstance(message.get("content"), list):
                for block in message["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results.append(
                            {
                                "id": block.get("tool_use_id"),
                                "output": _flatten(block.get("content")),
                                "is_error": bool(block.get("is_error")),
                            }
                        )
        return results

    @property
    def last_user_text(self) -> str:
        """Text of the last user message (tool results excluded)."""
        for message in reversed(self.messages):
            if isinstance(message, dict) and message.get("role") == "user":
                if isinstance(message.get("parts"), list):  # gemini
                    texts = [
                        _flatten(part)
                        for part in message["parts"]
                        if isinstance(part, dict) and "text" in part and not part.get("thought")
                    ]
                    if texts:
                        return "\n".join(texts)
                    continue
                content = message.get("content")
                if isinstance(content, list):
                    texts = [
                        _flatten(block)
                        for block in content
                        if isinstance(block, dict) and block.get("type") in ("text", "input_text")
                    ]
                    if texts:
                        return "\n".join(texts)
                    continue
                return _flatten(content)
        return ""

    @property
    def system_text(self) -> str:
        return _flatten(self.system)


def _gemini_response(part: Any) -> dict[str, Any] | None:
    """The functionResponse of a Gemini part (the REST API also takes the snake_case name)."""
    if not isinstance(part, dict):
        return None
    response = part.get("functionResponse", part.get("function_response"))
    return response if isinstance(response, dict) else None


def _gemini_result(part: dict[str, Any]) -> dict[str, Any]:
    """A Gemini functionResponse as a tool result. Its ``response`` is a free JSON object;
    ``{"output": ...}`` and ``{"error": ...}`` are the usual keys (Gemini CLI sends them)."""
    response = _gemini_response(part) or {}
    payload = response.get("response")
    is_error = isinstance(payload, dict) and "error" in payload and "output" not in payload
    if isinstance(payload, dict) and ("output" in payload or is_error):
        output = _flatten(payload["error" if is_error else "output"])
    else:
        output = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    # The id is optional on this wire; the function name is the only other link to the call.
    return {"id": response.get("id") or response.get("name"), "output": output, "is_error": is_error}


def _flatten(value: Any) -> str:
    """Text inside a string, a content block, or a list of blocks."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(item) for item in value)
    if isinstance(value, dict):
        for key in ("text", "output", "content", "refusal", "parts"):
            if key in value:
                return _flatten(value[key])
        return ""
    return str(value)


@dataclass
class RecordedRequest:
    """One HTTP request the server received (every path, model turn or not)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Headers
    body: Any
    """Parsed JSON, or None when the body is empty or not JSON."""
    raw_body: bytes
    wire: str | None
    time: float
    kind: str = "other"
    """"model" for model turns, "count_tokens", "models", or "other"."""
    model_request: ModelRequest | None = None
    status: int | None = None
    """HTTP status sent (None when the connection was dropped or hung)."""
    item: Any = None
    """The script item that answered a model turn."""

    @property
    def is_model_turn(self) -> bool:
        return self.kind == "model"


# ---------------------------------------------------------------------------------------------
# Token estimates and a simulated prompt cache


def estimate_tokens(value: Any) -> int:
    """About four characters per token: enough for budgets and cache-share measurements."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return max(1, (len(text) + 3) // 4) if text else 0


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


@dataclass
class PrefixBlock:
    """One block of a prompt in cache order, and whether a cache breakpoint ends on it."""

    content: Any
    breakpoint: bool = False


@dataclass
class CacheResult:
    total_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.total_tokens - self.cache_read_tokens - self.cache_creation_tokens)


@dataclass
class PromptCache:
    """A simulated prefix cache shared by all requests on one server.

    Anthropic mode (``explicit=True``): prefixes ending at ``cache_control`` breakpoints are
    written; a later request reads the longest stored prefix it starts with. OpenAI mode:
    every prefix is stored automatically (OpenAI caches prompt prefixes without markers).
    """

    _stored: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def lookup_and_store(self, blocks: list[PrefixBlock], *, explicit: bool) -> CacheResult:
        digest = hashlib.sha256()
        running_tokens = 0
        prefixes: list[tuple[str, int, bool]] = []
        for block in blocks:
            encoded = json.dumps(_strip_cache_control(block.content), sort_keys=True, ensure_ascii=False)
            digest.update(encoded.encode())
            digest.update(b"\x00")
            running_tokens += estimate_tokens(encoded)
            prefixes.append((digest.copy().hexdigest(), running_tokens, block.breakpoint))
        with self._lock:
            cache_read = 0
            for key, tokens, _ in prefixes:
                if key in self._stored:
                    cache_read = max(cache_read, tokens)
            if explicit:
                written = [(key, tokens) for key, tokens, marked in prefixes if marked]
            else:
                written = [(key, tokens) for key, tokens, _ in prefixes]
            cache_creation = 0
            for key, tokens in written:
                if key not in self._stored:
                    self._stored[key] = tokens
            if explicit and written:
                cache_creation = max(0, max(tokens for _, tokens in written) - cache_read)
        return CacheResult(running_tokens, cache_read, cache_creation)
