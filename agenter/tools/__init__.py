"""Custom tools: plain Python functions the agent may call, with a JSON schema from type hints."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

if TYPE_CHECKING:
    from agenter.tools.spec import ToolSpec

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]

P = ParamSpec("P")
R = TypeVar("R")


class Tool(Generic[P, R]):
    """A named function with a description and a JSON schema for its arguments.

    Backends expose tools in their own way (an Anthropic tool, an SDK MCP server, a stdio MCP
    server); `run` is the one way to call it. `spec` (a ToolSpec) declares what the tool does
    for the permission gate and the executor (read-only, safe to run in parallel, ...); without
    one the fail-closed defaults apply.
    """

    def __init__(self, function: Callable[P, R], *, name: str | None = None,
                 description: str | None = None, input_schema: dict[str, Any] | None = None,
                 spec: ToolSpec | None = None):
        self.function: Callable[P, R] = function
        self.spec = spec
        self.name = name or function.__name__
        self.description = (description or inspect.getdoc(function) or self.name).strip()
        self._arguments_model = _arguments_model(function, self.name)
        self.input_schema = input_schema or _clean_schema(self._arguments_model.model_json_schema())

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    async def run(self, arguments: dict[str, Any], *,
                  run_sync: Callable[..., Awaitable[Any]] | None = None) -> str:
        """Validate the arguments, call the function, return text.

        A sync function runs off the event loop, through `run_sync(fn, **kwargs)` when given (a
        backend passes one that tracks the thread, so a cancelled turn can wait for it).
        """
        parsed = self._arguments_model.model_validate(arguments or {})
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        function: Callable[..., Any] = self.function
        if self.is_async:
            value = await function(**kwargs)
        elif run_sync is not None:
            value = await run_sync(function, **kwargs)
        else:
            value = await asyncio.to_thread(function, **kwargs)
        return _to_text(value)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself, as if it were not decorated."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


@overload
def tool(function: Callable[P, R], *, name: str | None = None, description: str | None = None,
         spec: ToolSpec | None = None) -> Tool[P, R]: ...


@overload
def tool(function: None = None, *, name: str | None = None, description: str | None = None,
         spec: ToolSpec | None = None) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(function: Callable[P, R] | None = None, *, name: str | None = None, description: str | None = None,
         spec: ToolSpec | None = None) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Decorator: `@tool` or `@tool(name=..., description=..., spec=ToolSpec(...))` turns a
    function into a Tool (still callable as the function)."""

    def wrap(fn: Callable[P, R]) -> Tool[P, R]:
        return Tool(fn, name=name, description=description, spec=spec)

    return wrap(function) if function is not None else wrap


def as_tool(value: Tool[Any, Any] | ToolFunction) -> Tool[Any, Any]:
    return value if isinstance(value, Tool) else Tool(value)


def _arguments_model(function: ToolFunction, name: str) -> type[BaseModel]:
    signature = inspect.signature(function)
    try:
        hints = get_type_hints(function)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to Any
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    model_name = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Arguments"
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(TypeAdapter(Any).dump_python(value, mode="json"))
    except Exception:  # noqa: BLE001 - not JSON-safe: its text
        return str(value)
