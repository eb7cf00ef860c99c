"""Bypass-immune safety checks: what a tool call touches or does that no mode may wave through.

`analyze_shell` follows a command line command by command (tracking `cd`), resolves every path
it reads or writes, and collects findings: protected paths (.git/ writes, agent settings, shell
start-up files, credentials, anything outside the workspace), destructive git, a download piped
into an interpreter, a recursive delete of an unknown or whole-workspace target. `path_findings`
does the same for the paths of file, MCP and custom tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from agenter.permissions._commands import (
    CommandInfo,
    describe,
    destructive_git,
    is_downloader,
    is_interpreter,
    runs_stdin_as_code,
)
from agenter.permissions._paths import Finding, ResolvedPath, Workspace
from agenter.permissions._shell import ShellScript, SimpleCommand, Word, parse_shell

__all__ = ["ShellAccess", "ShellAnalysis", "analyze_shell", "path_findings"]


@dataclass(frozen=True)
class ShellAccess:
    """A path one command of the line reads or writes; `path` is None when it cannot be known."""

    command: int
    word: Word
    access: Literal["read", "write", "unknown"]
    path: ResolvedPath | None
    recursive_delete: bool = False


@dataclass
class ShellAnalysis:
    script: ShellScript
    infos: list[CommandInfo] = field(default_factory=list)
    accesses: list[ShellAccess] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def parsed(self) -> bool:
        return self.script.parsed

    @property
    def commands(self) -> list[SimpleCommand]:
        return self.script.commands

    def judged(self) -> list[int]:
        """Indices of the commands that are judged themselves (carriers like `bash -c` are not)."""
        return [i for i, c in enumerate(self.script.commands) if not c.wrapper and (c.words or c.redirects)]

    @property
    def read_only(self) -> bool:
        """Parsed, and every command changes nothing."""
        return self.parsed and all(self.infos[i].read_only for i in self.judged())

    def edits_only_workspace(self, workspace: Workspace) -> bool:
        """Parsed, every command is a read-only or file-editing one, and every path is known and in
        the workspace (what accept-edits mode allows)."""
        if not self.parsed or not all(self.infos[i].file_edit for i in self.judged()):
            return False
        return all(a.path is not None and workspace.in_roots(a.path, "write") for a in self.accesses)


def analyze_shell(command: str, workspace: Workspace) -> ShellAnalysis:
    script = parse_shell(command, home=workspace.home, cwd=workspace.given_cwd)
    analysis = ShellAnalysis(script=script)
    base: str | None = workspace.given_cwd
    findings: list[Finding] = []
    for index, cmd in enumerate(script.commands):
        if cmd.wrapper:
            analysis.infos.append(CommandInfo(read_only=True, file_edit=True))
            continue
        info = describe(cmd)
        analysis.infos.append(info)
        for operand in info.operands:
            path: ResolvedPath | None = None
            if not operand.word.dynamic and base is not None:
                path = workspace.resolve(operand.word.text, base)
            elif not operand.word.dynamic and (operand.word.text.startswith("/") or operand.word.text.startswith("~")):
                path = workspace.resolve(operand.word.text)
            analysis.accesses.append(ShellAccess(index, operand.word, operand.access, path, operand.recursive_delete))
            if path is None:
                if operand.recursive_delete:
                    findings.append(Finding("unknown-delete",
                                            f"deletes {operand.word.text!r} recursively, and where that points "
                                            "cannot be known before the command runs"))
                continue
            if operand.access == "unknown":
                found = workspace.findings(path, "write")
            else:
                found = workspace.findings(path, operand.access)
            findings.extend(found)
            if operand.recursive_delete and path.real == workspace.cwd:
                findings.append(Finding("workspace-delete", "deletes the whole workspace", path.real))
        what = destructive_git(cmd)
        if what:
            findings.append(Finding("destructive-git", f"{what}: `{_short(cmd.text())}`"))
        if info.changes_dir:
            if info.cd is None or info.cd.dynamic or base is None:
                base = None
            else:
                base = workspace.resolve(info.cd.text, base).real
    findings.extend(_download_exec(script))
    analysis.findings = _dedupe(findings)
    return analysis


def _download_exec(script: ShellScript) -> list[Finding]:
    """A downloader whose output an interpreter runs: `curl ... | sh`, `bash <(curl ...)`,
    `sh -c "$(wget -O- ...)"`, `eval "$(curl ...)"`."""
    found: list[Finding] = []
    commands = script.commands
    for indices in script.pipelines.values():
        downloading = False
        for i in indices:
            if downloading and runs_stdin_as_code(commands[i]):
                found.append(Finding("download-exec", f"pipes downloaded content into `{commands[i].name}` "
                                                      "(runs code fetched from the network)"))
                break
            downloading = downloading or is_downloader(commands[i])
    for command in commands:
        if not is_downloader(command) or command.via not in ("$()", "<()"):
            continue
        parent = command.parent
        while parent is not None:
            if is_interpreter(commands[parent]) and not commands[parent].wrapper:
                found.append(Finding("download-exec", f"runs downloaded content with `{commands[parent].name}` "
                                                      "(runs code fetched from the network)"))
                break
            parent = commands[parent].parent
    return found


def path_findings(paths: Iterable[str | ResolvedPath], access: Literal["read", "write"],
                  workspace: Workspace) -> list[Finding]:
    """The safety checks these paths trip (a path given as text is resolved here)."""
    found: list[Finding] = []
    for path in paths:
        found.extend(workspace.findings(workspace.resolve(path) if isinstance(path, str) else path, access))
    return _dedupe(found)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    unique: list[Finding] = []
    for finding in findings:
        key = (finding.check, finding.message)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
