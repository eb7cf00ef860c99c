"""agenter 0.1.7's names: the deprecation warning its honoured spellings give, and what replaces
the names that are gone.

agenter follows the documented API of agenter 0.1.7 (the earlier project of the same design).
Where a 0.1.7 spelling can still mean what it meant without changing today's API it works,
with a DeprecationWarning naming today's spelling (`deprecated`); a name that cannot is an
ImportError or AttributeError whose message names its replacement (`REMOVED`). docs/migrating.md
has one row per name, and tests/test_migrating_from_017.py one test per row.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

__all__ = ["OPTIONS_017", "REMOVED", "deprecated", "removed"]

#: The package folder: the warning points at the first frame outside it (the user's line).
_PACKAGE = str(Path(__file__).parent) + "/"

#: 0.1.7 names with no counterpart of the same shape, and what to write instead.
REMOVED: dict[str, str] = {
    "Verbosity": "agenter.Verbosity is gone: use agenter.configure_logging(level=...) for logs "
                 "and AutonomousCodingAgent.stream_execute() for progress events",
    "ValidationError": "agenter.ValidationError is gone: a failed validation is a result, not an "
                       "exception (result.status is CodingStatus.FAILED, result.validation_errors)",
    "ToolExecutionError": "agenter.ToolExecutionError is gone: an exception raised by a tool goes "
                          "back to the model as the tool's error result; agenter raises nothing",
    "BudgetMeter": "agenter.BudgetMeter is gone: limits are a Budget (result.exceeded_limit says "
                   "which one stopped a run); usage is result.total_tokens / total_cost_usd, or "
                   "session.usage for an AgentSession",
    "FileOperations": "agenter.FileOperations is gone: the files a run changed are result.files; "
                      "confined file access is agenter.sandbox.paths.PathResolver "
                      "(resolve_read, resolve_write, open_for_read, open_for_write)",
    "FileTracer": "agenter.FileTracer is gone: AutonomousCodingAgent(log_dir=...) writes a JSONL "
                  "transcript of every run (docs/sessions.md); tracer_provider= sends "
                  "OpenTelemetry spans (docs/observability.md)",
    "Tracer": "agenter.Tracer is gone: AutonomousCodingAgent(log_dir=...) writes a JSONL transcript "
              "of every run (docs/sessions.md); tracer_provider= sends OpenTelemetry spans "
              "(docs/observability.md)",
    "ToolResult": "agenter.ToolResult is gone: a tool returns its text (or any JSON-able value) and "
                  "raises an exception to report a failure (the model reads it as an error result)",
    "ToolError": "agenter.ToolError is gone: a tool raises an exception to report a failure (the "
                 "model reads it as an error result)",
    "ToolErrorCode": "agenter.ToolErrorCode is gone: a tool raises an exception to report a failure "
                     "(the model reads its message)",
    "PersistentCodingSession": "agenter.PersistentCodingSession is gone: use "
                               "`async with agent.session(cwd) as session:` (agenter.AgentSession; "
                               "agent.open_session(...) is the 0.1.7 name)",
    "PathResolver": "agenter.PathResolver moved: from agenter.sandbox.paths import PathResolver "
                    "(resolve_read / resolve_write / is_allowed_write replace resolve / "
                    "is_write_allowed)",
}


#: AutonomousCodingAgent keyword arguments of agenter 0.1.7 that are gone, and what replaces them
#: (the renamed ones are in each backend's options `renamed` and keep working).
OPTIONS_017: dict[str, str] = {
    "verbosity": "logs come from agenter.configure_logging(level=...), progress from "
                 "stream_execute() events (the `agenter` command shows them live)",
    "tracer": "log_dir= writes a JSONL transcript of every run (docs/sessions.md); tracer_provider= "
              "sends OpenTelemetry spans (docs/observability.md)",
    "acp_update_callback": "every ACP update arrives as a stream_execute() event (BACKEND_MESSAGE)",
    "acp_stream_observer": "every ACP update arrives as a stream_execute() event (BACKEND_MESSAGE)",
}


def removed(name: str, where: str = "agenter") -> str:
    """The message for a 0.1.7 name that is gone from `where` (a module name)."""
    message = REMOVED[name]
    if where != "agenter":
        message = message.replace(f"agenter.{name} ", f"{where}.{name} ", 1)
    return message


def deprecated(old: str, new: str) -> None:
    """Warn that `old` is agenter 0.1.7's spelling and `new` today's, at the caller's line."""
    warnings.warn(f"{old} is agenter 0.1.7's spelling; use {new} (docs/migrating.md)",
                  DeprecationWarning, stacklevel=outside_level())


def outside_level() -> int:
    """The stacklevel for a warnings.warn() in the function calling this one: the first frame
    outside agenter and pydantic (whose validators call ours), i.e. the user's line, so the
    warning names it and Python's default filter shows a DeprecationWarning from __main__."""
    inside = (_PACKAGE, *_library_folders())
    frame = sys._getframe(2)  # frame i here is stacklevel i for a warn() in our caller
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _library_folders() -> tuple[str, ...]:
    module = sys.modules.get("pydantic")
    file = getattr(module, "__file__", None)
    return (str(Path(file).parent) + "/",) if file else ()
