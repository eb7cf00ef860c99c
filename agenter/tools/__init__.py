"""Custom tools: plain Python functions the agent may call, with a JSON schema from type hints.

agenter 0.1.7's spellings still work, each with a DeprecationWarning naming today's:
`@tool("add", "Add two numbers", {"a": int})` and `tool(..., input_schema=...)` over a function
that takes the arguments as one dict, `FunctionTool(name, description, input_schema, func)`,
and tool classes with `name`, `description`, `input_schema` and `async execute(inputs)` (a
`Tool` subclass or any object). Such a tool's function receives one dict, as in 0.1.7; what it
returns is the model's text (0.1.7's `ToolResult` is gone: raise an exception for a failure).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

from agenter._compat import deprecated as _deprecated

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

    `input_schema` replaces the schema made from the type hints. A function whose only
    parameter is not one of that schema's arguments receives them as one dict (agenter 0.1.7's
    convention; see the module docstring); `{"a": int}` is taken as a schema of Python types.
    """

    def __init__(self, function: Callable[P, R] | None = None, *, name: str | None = None,
                 description: str | None = None, input_schema: Mapping[str, Any] | None = None,
                 spec: ToolSpec | None = None):
        takes_dict = False
        if function is None:
            function, name, description, input_schema = _tool_class_parts(self, name, description, input_schema)
            takes_dict = True
        self.function: Callable[P, R] = function
        self.spec = spec
        self.name = name or function.__name__
        self.description = (description or inspect.getdoc(function) or self.name).strip()
        schema, types_model = _given_schema(input_schema, self.name)
        self._takes_dict = takes_dict or (schema is not None and _takes_one_dict(function, schema))
        if self._takes_dict:
            self._arguments_model: type[BaseModel] | None = types_model
        else:
            self._arguments_model = _arguments_model(function, self.name)
        self.input_schema: dict[str, Any] = schema if schema is not None else _clean_schema(
            cast(type[BaseModel], self._arguments_model).model_json_schema())

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    async def run(self, arguments: dict[str, Any], *,
                  run_sync: Callable[..., Awaitable[Any]] | None = None) -> str:
        """Validate the arguments, call the function, return text.

        A sync function runs off the event loop, through `run_sync(fn, **kwargs)` when given (a
        backend passes one that tracks the thread, so a cancelled turn can wait for it).
        """
        function: Callable[..., Any] = self.function
        if self._takes_dict:
            values = dict(arguments or {})
            if self._arguments_model is not None:
                parsed = self._arguments_model.model_validate(values)
                values = {name: getattr(parsed, name) for name in type(parsed).model_fields}
            args: tuple[Any, ...] = (values,)
            kwargs: dict[str, Any] = {}
        else:
            parsed = cast(type[BaseModel], self._arguments_model).model_validate(arguments or {})
            args, kwargs = (), {name: getattr(parsed, name) for name in type(parsed).model_fields}
        if self.is_async:
            value = await function(*args, **kwargs)
        elif run_sync is not None:
            value = await run_sync(function, *args, **kwargs)
        else:
            value = await asyncio.to_thread(function, *args, **kwargs)
        return _to_text(value)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself, as if it were not decorated."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


class FunctionTool(Tool[..., Any]):
    """agenter 0.1.7's `FunctionTool(name, description, input_schema, func)`: a Tool whose
    function gets the arguments as one dict. Deprecated: `Tool(func, name=..., description=...)`
    or `@tool` over a function with typed parameters."""

    def __init__(self, name: str, description: str, input_schema: Mapping[str, Any] | None = None,
                 func: Callable[..., Any] | None = None):
        if func is None:
            raise TypeError("FunctionTool(name, description, input_schema, func) needs func; "
                            "today's spelling: Tool(func, name=..., description=...)")
        _deprecated("FunctionTool(name, description, input_schema, func)",
                    "Tool(func, name=..., description=...) or @tool over a function with typed parameters")
        super().__init__(func, name=name, description=description, input_schema=input_schema or {})
        self._takes_dict = True  # 0.1.7 always called func(inputs)
        self._arguments_model = _given_schema(input_schema or {}, self.name)[1]

    async def execute(self, inputs: dict[str, Any]) -> str:
        """0.1.7's call: the tool's text for `inputs` (today: `await tool.run(inputs)`)."""
        return await self.run(inputs)


@overload
def tool(function: Callable[P, R], *, name: str | None = None, description: str | None = None,
         spec: ToolSpec | None = None) -> Tool[P, R]: ...


@overload
def tool(function: None = None, *, name: str | None = None, description: str | None = None,
         input_schema: Mapping[str, Any] | None = None,
         spec: ToolSpec | None = None) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


@overload
def tool(function: str, description: str, input_schema: Mapping[str, Any] | None = None, *,
         spec: ToolSpec | None = None) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(function: Callable[P, R] | str | None = None, description: str | None = None,
         input_schema: Mapping[str, Any] | None = None, *, name: str | None = None,
         spec: ToolSpec | None = None) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Decorator: `@tool` or `@tool(name=..., description=..., spec=ToolSpec(...))` turns a
    function into a Tool (still callable as the function).

    agenter 0.1.7's `@tool("name", "description", {"arg": type})` still works (deprecated), as
    does `input_schema=`: see the module docstring.
    """
    positional = isinstance(function, str)
    if isinstance(function, str):
        if name is not None:
            raise TypeError(f"tool({function!r}, ...) names the tool twice; pass name= only")
        _deprecated(f"@tool({function!r}, {description!r}, {{...}})",
                    "@tool(name=..., description=...) over a function with typed parameters")
        name, function = function, None
    elif function is not None and not callable(function):
        raise TypeError(f"tool() takes a function or a tool name, got {type(function).__name__}")

    def wrap(fn: Callable[P, R]) -> Tool[P, R]:
        made = Tool(fn, name=name, description=description, input_schema=input_schema, spec=spec)
        if made._takes_dict and not positional:
            _deprecated("a tool function that takes its arguments as one dict",
                        "typed parameters, one per argument (def add(a: int) -> int)")
        return made

    return wrap(function) if function is not None else wrap


def as_tool(value: Tool[Any, Any] | ToolFunction | Any) -> Tool[Any, Any]:
    """A Tool for what the facade's `tools=` holds: a Tool, a function, or an agenter 0.1.7
    tool object (`name`, `description`, `input_schema`, `async execute(inputs)`)."""
    if isinstance(value, Tool):
        return value
    if _is_tool_object(value):
        _deprecated(f"the 0.1.7-style tool object {type(value).__name__}",
                    "@tool over a function with typed parameters")
        legacy: Any = value
        made: Tool[Any, Any] = Tool(legacy.execute, name=legacy.name, description=getattr(legacy, "description", None),
                                    input_schema=getattr(legacy, "input_schema", None) or {})
        made._takes_dict = True
        made._arguments_model = _given_schema(getattr(value, "input_schema", None) or {}, made.name)[1]
        return made
    return Tool(value)


# ---------------------------------------------------------------------- agenter 0.1.7's spellings
def _is_tool_object(value: Any) -> bool:
    return (not isinstance(value, type) and isinstance(getattr(value, "name", None), str)
            and callable(getattr(value, "execute", None)) and hasattr(value, "input_schema"))


def _tool_class_parts(tool: Tool[Any, Any], name: str | None, description: str | None,
                      input_schema: Mapping[str, Any] | None
                      ) -> tuple[Callable[..., Any], str | None, str | None, Mapping[str, Any]]:
    """A `Tool` subclass written for agenter 0.1.7 (class attributes and `execute(inputs)`,
    no function): its parts."""
    execute = getattr(type(tool), "execute", None)
    if execute is None:
        raise TypeError("Tool needs a function: Tool(fn, name=..., description=...) or @tool")
    _deprecated(f"the Tool subclass {type(tool).__name__} with execute(inputs)",
                "@tool over a function with typed parameters")
    return (tool.execute,  # type: ignore[attr-defined]
            name or getattr(type(tool), "name", None) or type(tool).__name__,
            description or getattr(type(tool), "description", None),
            input_schema if input_schema is not None else getattr(type(tool), "input_schema", None) or {})


def _given_schema(schema: Mapping[str, Any] | None, name: str
                  ) -> tuple[dict[str, Any] | None, type[BaseModel] | None]:
    """(JSON schema, model of Python types) for a given input_schema: a JSON schema is kept as
    it is (no model: its arguments pass unchecked, as in 0.1.7); `{"a": int}` (no "type" key)
    becomes a model whose fields are all required, and its schema."""
    if schema is None:
        return None, None
    if not isinstance(schema, Mapping):
        raise TypeError(f"input_schema must be a dict, got {type(schema).__name__}")
    if not schema:
        return {"type": "object", "properties": {}}, None
    if "type" in schema or "properties" in schema:
        return dict(schema), None
    fields: dict[str, Any] = {key: (value, ...) for key, value in schema.items()}
    model_name = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Input"
    model = create_model(model_name, **fields)
    return _clean_schema(model.model_json_schema()), model


def _takes_one_dict(function: Callable[..., Any], schema: Mapping[str, Any]) -> bool:
    """True when `function`'s only parameter is not one of the schema's arguments: it takes the
    arguments as one dict (`async def search(args)` with a schema of `query`)."""
    try:
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    properties = schema.get("properties") or {}
    return len(parameters) == 1 and parameters[0].name not in properties


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
