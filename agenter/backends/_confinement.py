"""The confinement of one session's shell commands, built once at connect, for the backends that
give their model agenter's shell (the harness's bash tool, google-adk's Execute tool).

`session_confinement` chooses the mechanism (`agenter.sandbox.confine`: Landlock, bubblewrap or
Seatbelt), finds the credential files of the home that a command may not read (as the gate's
safety checks judge them: `agenter.sandbox.commands.hidden_home_paths`), and runs `true` in the
sandbox once, so a machine where it cannot confine fails at connect with what to do rather than
on every command. Blocking work runs in threads.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenter._errors import BackendError, ConfigurationError
from agenter.sandbox.commands import hidden_home_paths, probe_sandbox
from agenter.sandbox.confine import Confinement, choose_mechanism, unavailable_reason, unusable_hint

if TYPE_CHECKING:
    from agenter.backends.base import BackendSettings
    from agenter.permissions import PermissionGate

__all__ = ["check_network_rules", "session_confinement"]


def check_network_rules(settings: BackendSettings[Any], *, backend: str, shell: bool, shell_option: str) -> None:
    """A policy's network rules other than `allow network` need the shell's sandbox: it is what
    cuts a command's network, and without it a command can reach any host. ConfigurationError
    when the agent is built (naming the backend and its option to turn the shell off)."""
    policy = settings.permissions
    if settings.sandbox or not shell or policy is None:
        return
    if any(rule.kind == "network" and not (rule.effect == "allow" and rule.matches_all) for rule in policy.rules):
        raise ConfigurationError(
            f"network rules other than 'allow network' need sandbox=True with the {backend} backend: "
            "the shell's network is cut by its sandbox, and without the sandbox a command can reach any host "
            f"(or pass {shell_option}=False)", parameter="permissions")


def _interpreter_roots() -> list[str]:
    """The Python environment agenter runs in (its venv and the base installation): readable
    for commands, which often run the same interpreter and packages. Only matters where it lies
    in a private folder (a checkout or venv under /tmp is otherwise unreadable in the sandbox)."""
    return [p for p in dict.fromkeys((sys.prefix, sys.base_prefix)) if p and p != "/"]


async def session_confinement(gate: PermissionGate, *, cwd: Path, prefer: str, network: bool, read_only: bool,
                              tmpdir: str, keep: Sequence[str], env: Mapping[str, str], backend: str,
                              prefix: str = "anthropic") -> Confinement:
    """The Confinement of the session's commands in `cwd`: the policy's extra roots writable, its
    read roots readable, the home's credential files hidden (never `keep`, nor `cwd`), `tmpdir`
    as TMPDIR. Raises BackendError (missing_program) when no mechanism is there and (config)
    when the chosen one cannot run here, saying what to do in the option names of the backend
    whose options start with `prefix` (`<prefix>_shell`, `<prefix>_shell_sandbox`)."""
    mechanism = choose_mechanism(prefer)
    if mechanism is None:
        raise BackendError(unavailable_reason(prefer, prefix), backend=backend, kind="missing_program")
    workspace = gate.workspace

    def is_credential(path: str) -> bool:
        return any(f.check == "credentials" for f in workspace.findings(workspace.resolve(path), "read"))

    hidden = await asyncio.to_thread(hidden_home_paths, workspace.home, is_credential, keep=[str(cwd), *keep])
    confinement = Confinement(
        cwd=cwd, network=network, read_only=read_only, writable=tuple(workspace.extra_roots),
        readable=tuple(dict.fromkeys([*workspace.read_roots, *_interpreter_roots()])), hidden=tuple(hidden),
        program=shutil.which("bwrap") or "bwrap", mechanism=mechanism, tmpdir=tmpdir)
    await probe_sandbox(confinement, env, backend, hint=unusable_hint(mechanism, prefix))
    return confinement
