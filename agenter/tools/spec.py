"""ToolSpec: what a tool declares about itself, with fail-closed defaults.

A tool that declares nothing is treated as the riskiest kind: not read-only, destructive, not
safe to run alongside other calls, needing permission. Declaring `read_only=True` makes it
non-destructive unless it says otherwise; `concurrency_safe=True` lets the executor run it in
parallel with its neighbours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agenter._errors import ConfigurationError
from agenter.permissions._rules import TOOL_KINDS, ToolCall, ToolKind

__all__ = ["DEFAULT_MAX_RESULT_CHARS", "ToolSpec"]

#: Results longer than this are saved to a file and the model gets a preview and the path.
DEFAULT_MAX_RESULT_CHARS = 100_000


@dataclass(frozen=True)
class ToolSpec:
    """Metadata the permission gate and the executor use.

    kind: read, edit, shell, network, mcp or custom (the kind rules name).
    read_only: the tool changes nothing. Default False.
    destructive: it may delete or overwrite. Default: the opposite of read_only.
    concurrency_safe: it may run at the same time as other concurrency-safe calls. Default False.
    requires_permission: it needs approval in the default mode unless read-only. Default True.
    max_result_chars: longer results are saved to a file (preview + path for the model).
    path_fields: input fields holding the paths it reads or writes (a string or a list).
    command_field: input field holding a shell command (kind shell).
    url_field: input field holding a URL (kind network).
    mcp_server: the MCP server the tool belongs to (kind mcp).
    validate: tool-specific validation: returns an error message, or None when the input is fine.
    """

    kind: ToolKind = "custom"
    read_only: bool = False
    destructive: bool | None = None
    concurrency_safe: bool = False
    requires_permission: bool = True
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    path_fields: tuple[str, ...] = ()
    command_field: str | None = None
    url_field: str | None = None
    mcp_server: str | None = None
    validate: Callable[[Mapping[str, Any]], str | None] | None = None

    def __post_init__(self) -> None:
        if self.kind not in TOOL_KINDS:
            raise ConfigurationError(f"unknown tool kind {self.kind!r}", parameter="kind", valid=list(TOOL_KINDS))
        if self.destructive is None:
            object.__setattr__(self, "destructive", not self.read_only)
        elif self.read_only and self.destructive:
            raise ConfigurationError("a tool cannot be both read_only and destructive", parameter="destructive")
        if not isinstance(self.max_result_chars, int) or self.max_result_chars < 1:
            raise ConfigurationError(f"max_result_chars must be a positive integer, got {self.max_result_chars!r}",
                                     parameter="max_result_chars")
        if isinstance(self.path_fields, str):
            object.__setattr__(self, "path_fields", (self.path_fields,))
        else:
            object.__setattr__(self, "path_fields", tuple(self.path_fields))

    @property
    def is_destructive(self) -> bool:
        return bool(self.destructive)

    def call(self, name: str, input: Mapping[str, Any] | None) -> ToolCall:
        """The ToolCall the permission gate judges for one use of this tool."""
        data: Mapping[str, Any] = input if isinstance(input, Mapping) else {}
        paths: list[str] = []
        for key in self.path_fields:
            value = data.get(key)
            if isinstance(value, str):
                paths.append(value)
            elif isinstance(value, list | tuple):
                paths.extend(str(v) for v in value if v is not None)
            elif value is not None:
                paths.append(str(value))
        command = data.get(self.command_field) if self.command_field else None
        target = data.get(self.url_field) if self.url_field else None
        if self.kind == "mcp":
            target = f"{self.mcp_server}/{name}" if self.mcp_server and "/" not in name else name
        return ToolCall(kind=self.kind, name=name, paths=tuple(paths),
                        command=None if command is None else str(command),
                        target=None if target is None else str(target), input=dict(data),
                        read_only=self.read_only, requires_permission=self.requires_permission,
                        destructive=self.is_destructive, mcp_server=self.mcp_server, validate=self.validate)
