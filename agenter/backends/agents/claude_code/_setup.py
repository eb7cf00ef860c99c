"""How Claude Code is started: what the machine needs, the CLI's environment, its permission mode
and sandbox, our in-process MCP server, and the ClaudeAgentOptions that bind them together.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agenter.backends._programs.claude import QUIET_ENV, SANDBOX_SETTINGS, sandbox_requirements
from agenter.backends._prompts import REFUSAL_TOOL_DESCRIPTION, REFUSAL_TOOL_NAME, REFUSAL_TOOL_SCHEMA
from agenter.backends.agents.claude_code._options import ClaudeCodeOptions
from agenter.backends.agents.claude_code._permissions import Permissions
from agenter.backends.base import BackendSettings, ToolReply
from agenter.host import MARK_ENV, Program, PythonPackage, Requirement, _pids
from agenter.tools import Tool

__all__ = ["MCP_SERVER_NAME", "agent_options", "cli_env", "find_cli_pid", "mcp_reply", "mcp_server",
           "mcp_tool_name", "our_tool_names", "permission_mode", "requirements"]

#: Name of the in-process MCP server that carries custom tools and the refusal tool.
MCP_SERVER_NAME = "agenter"

McpHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def mcp_tool_name(name: str) -> str:
    """The name Claude Code gives a tool of our in-process MCP server."""
    return f"mcp__{MCP_SERVER_NAME}__{name}"


def requirements(settings: BackendSettings[ClaudeCodeOptions]) -> list[Requirement]:
    """The SDK (it bundles the CLI), an explicit CLI, and on Linux the sandbox's programs."""
    options = settings.options
    search_path = options.env.get("PATH")  # the CLI's PATH, where its sandbox looks
    needed: list[Requirement] = [PythonPackage(module="claude_agent_sdk", distribution="claude-agent-sdk",
                                               install="pip install 'agenter-sdk[claude-code]'")]
    if options.program_path:
        needed.append(Program(name="claude", path=options.program_path, env_path=search_path,
                              install="pass program_path= a `claude` executable, or leave it out to "
                                      "use the CLI bundled with claude-agent-sdk"))
    return needed + sandbox_requirements(settings.sandbox, search_path)


def cli_env(options: ClaudeCodeOptions) -> dict[str, str]:
    """Variables for the CLI on top of ours: API endpoint and key, quiet headless defaults."""
    env = dict(QUIET_ENV)
    if options.base_url:
        env["ANTHROPIC_BASE_URL"] = options.base_url
    if options.api_key is not None:
        env["ANTHROPIC_API_KEY"] = options.api_key.get_secret_value()
    env.update(options.env)
    return env


def permission_mode(sandbox: bool, env: Mapping[str, str]) -> str:
    if sandbox:
        return "default"
    # bypassPermissions is refused for root unless the CLI is told it runs in a sandbox
    # (IS_SANDBOX=1); then allow-everything comes from our permission callback instead.
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if is_root and env.get("IS_SANDBOX", os.environ.get("IS_SANDBOX")) != "1":
        return "acceptEdits"
    return "bypassPermissions"


def our_tool_names(tools: Sequence[Tool]) -> list[str]:
    """The names the model sees for the custom tools and the refusal tool."""
    return [mcp_tool_name(t.name) for t in tools] + [mcp_tool_name(REFUSAL_TOOL_NAME)]


def mcp_reply(reply: ToolReply) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": reply.text}]}
    if reply.is_error:
        result["is_error"] = True
    return result


def mcp_server(tools: Sequence[Tool], handler: Callable[[Tool], McpHandler], refuse: McpHandler) -> Any:
    """The in-process MCP server serving the custom tools and the refusal tool."""
    from claude_agent_sdk import SdkMcpTool, create_sdk_mcp_server

    served = [SdkMcpTool(name=t.name, description=t.description, input_schema=t.input_schema,
                         handler=handler(t)) for t in tools]
    served.append(SdkMcpTool(name=REFUSAL_TOOL_NAME, description=REFUSAL_TOOL_DESCRIPTION,
                             input_schema=REFUSAL_TOOL_SCHEMA, handler=refuse))
    return create_sdk_mcp_server(MCP_SERVER_NAME, tools=served)


def agent_options(settings: BackendSettings[ClaudeCodeOptions], *, cwd: str, env: Mapping[str, str],
                  instructions: str, output_schema: dict[str, Any] | None, server: Any,
                  permissions: Permissions, stderr: Callable[[str], None], resume: str | None) -> Any:
    """ClaudeAgentOptions for one CLI process."""
    from claude_agent_sdk import ClaudeAgentOptions

    opts = settings.options
    built_in = list(opts.claude_allowed_tools)
    kwargs: dict[str, Any] = {
        "cwd": cwd,
        "tools": built_in,
        "allowed_tools": built_in + our_tool_names(settings.tools),
        "mcp_servers": {MCP_SERVER_NAME: server},
        "strict_mcp_config": True,
        "setting_sources": list(opts.claude_setting_sources),
        "system_prompt": {"type": "preset", "preset": "claude_code", "append": instructions},
        "permission_mode": permissions.mode,
        "can_use_tool": permissions.can_use_tool,
        "env": dict(env),
        "stderr": stderr,
        "model": settings.model,
        "max_turns": opts.claude_max_turns,
        "resume": resume,
        # The API's stream events as they arrive: text and thinking stream as deltas.
        "include_partial_messages": True,
    }
    if opts.program_path:
        kwargs["cli_path"] = opts.program_path
    if opts.claude_max_thinking_tokens is not None:
        kwargs["thinking"] = ({"type": "disabled"} if opts.claude_max_thinking_tokens == 0 else
                              {"type": "enabled", "budget_tokens": opts.claude_max_thinking_tokens})
    if output_schema is not None:
        kwargs["output_format"] = {"type": "json_schema", "schema": output_schema}
    if settings.sandbox:
        kwargs["sandbox"] = dict(SANDBOX_SETTINGS)
    hooks = permissions.hooks()
    if hooks is not None:
        kwargs["hooks"] = hooks
    silence_shadowed_callback_warning()
    return ClaudeAgentOptions(**kwargs)


def silence_shadowed_callback_warning() -> None:
    """The SDK warns that allowed_tools shadow can_use_tool; here that is intended (the callback only
    answers prompts for tools outside the list). A targeted filter, installed once: a
    catch_warnings() held across an await would race with concurrent sessions."""
    from claude_agent_sdk.types import CanUseToolShadowedWarning

    if not any(f[2] is CanUseToolShadowedWarning for f in warnings.filters):
        warnings.filterwarnings("ignore", category=CanUseToolShadowedWarning)


def find_cli_pid(mark: str) -> int | None:
    """Pid of the CLI the SDK started with `mark` in its environment: our marked direct child.

    Blocking (one /proc scan); the SDK keeps the process private, so this is how we learn it.
    """
    me = os.getpid()
    found = [info.pid for info in _pids.scan((MARK_ENV, mark)).values() if info.marked and info.ppid == me]
    return found[0] if len(found) == 1 else None
