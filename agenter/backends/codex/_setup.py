"""Finding the codex program, writing its config.toml, and preparing its Linux sandbox."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agenter._errors import BackendError

INSTALL_HINT = ("Install it with `npm install -g @openai/codex` (or add @openai/codex to your "
                "project's package.json), or pass codex_path=...")

_NATIVE_TRIPLES = {
    ("linux", "x86_64"): ("codex-linux-x64", "x86_64-unknown-linux-musl"),
    ("linux", "aarch64"): ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("linux", "arm64"): ("codex-linux-arm64", "aarch64-unknown-linux-musl"),
    ("darwin", "x86_64"): ("codex-darwin-x64", "x86_64-apple-darwin"),
    ("darwin", "arm64"): ("codex-darwin-arm64", "aarch64-apple-darwin"),
}


def find_codex(codex_path: str | None, cwd: Path, env: Mapping[str, str]) -> str:
    """The codex program: codex_path, then node_modules/.bin of cwd (and of the process cwd),
    then PATH. Raises BackendError with install instructions when there is none."""
    if codex_path:
        candidate = Path(codex_path).expanduser()
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.resolve())
        found = shutil.which(codex_path, path=env.get("PATH"))
        if found:
            return found
        raise BackendError(f"codex_path {codex_path!r} is not an executable program. {INSTALL_HINT}",
                           backend="codex")
    for base in _unique([cwd, Path.cwd()]):
        for directory in [base, *base.parents]:
            local = directory / "node_modules" / ".bin" / "codex"
            if local.is_file() and os.access(local, os.X_OK):
                return str(local)
    found = shutil.which("codex", path=env.get("PATH"))
    if found:
        return found
    raise BackendError(f"The Codex CLI (`codex`) was not found. {INSTALL_HINT}", backend="codex")


def native_codex_binary(codex: str) -> Path | None:
    """The native Codex executable behind `codex` (npm installs a node wrapper script).

    The Linux sandbox re-executes this binary under the name `codex-linux-sandbox`; a link to
    the node wrapper would not work.
    """
    real = Path(os.path.realpath(codex))
    if _is_native(real):
        return real
    system = platform.system().lower()
    package, triple = _NATIVE_TRIPLES.get((system, platform.machine().lower()), (None, None))
    if package is None:
        return None
    # <prefix>/node_modules/@openai/codex/bin/codex.js -> package root <prefix>/node_modules/@openai/codex
    package_root = real.parent.parent
    candidates = [
        package_root.parent / package / "vendor" / triple / "bin" / "codex",
        package_root / "node_modules" / "@openai" / package / "vendor" / triple / "bin" / "codex",
        package_root / "vendor" / triple / "bin" / "codex",
        package_root / "vendor" / triple / "codex" / "codex",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def prepare_sandbox_bin(codex: str, bin_dir: Path, env: Mapping[str, str]) -> str | None:
    """Put a `codex-linux-sandbox` link to the native binary in bin_dir; return a problem or None.

    Codex's sandbox starts bubblewrap, which execs `codex-linux-sandbox` from PATH. Codex makes
    that alias itself only under a non-temporary CODEX_HOME, and a system bubblewrap (installed
    for other agents) is preferred over Codex's bundled one, so without this link every sandboxed
    command fails with "bwrap: execvp codex-linux-sandbox: No such file or directory".
    """
    if platform.system() != "Linux":
        return None
    native = native_codex_binary(codex)
    if native is None:
        if shutil.which("codex-linux-sandbox", path=env.get("PATH")):
            return None
        return (f"cannot find the native Codex binary behind {codex!r}, which Codex's Linux sandbox "
                "needs as `codex-linux-sandbox`")
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "codex-linux-sandbox"
    if not link.exists():
        link.symlink_to(native)
    return None


def _is_native(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError:
        return False
    return magic in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\xfe\xed\xfa\xcf")


def _unique(paths: list[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        resolved = path.resolve()
        if resolved not in seen:
            seen.append(resolved)
    return seen


# ---------------------------------------------------------------------------------- config.toml
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """One TOML value (strings as JSON strings, which TOML basic strings accept)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def render_toml(config: Mapping[str, Any]) -> str:
    """A config dict as a TOML document: scalars first, then one [table] per nested mapping."""
    lines: list[str] = []
    _render_table(config, [], lines)
    return "\n".join(lines).strip() + "\n"


def _render_table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
    for key, value in scalars.items():
        lines.append(f"{_toml_key(key)} = {toml_value(value)}")
    for key, value in tables.items():
        _render_table(value, [*path, key], lines)


def config_overrides(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The same settings as `-c dotted.key=value` arguments (used with the user's own CODEX_HOME)."""
    args: list[str] = []
    for key, value in config.items():
        dotted = f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key)
        if isinstance(value, Mapping) and value:
            args.extend(config_overrides(value, dotted))
        else:
            args.extend(["-c", f"{dotted}={toml_value(value)}"])
    return args


def merge_dotted(config: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    """Apply {"a.b.c": v} (or nested dicts) onto config in place."""
    for key, value in overrides.items():
        parts = key.split(".")
        target = config
        for part in parts[:-1]:
            existing = target.get(part)
            if not isinstance(existing, dict):
                existing = target[part] = {}
            target = existing
        if isinstance(value, Mapping) and isinstance(target.get(parts[-1]), dict):
            merge_dotted(target[parts[-1]], value)
        else:
            target[parts[-1]] = value
