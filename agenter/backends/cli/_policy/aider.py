"""A permission policy's read rules as an aiderignore file, for aider-cli: gitignore syntax,
relative to the repository, passed with --aiderignore. It keeps paths out of Aider's repository
map (with aider_git=True). Limit: Aider 0.86 does not consult it before applying an edit, so edits
are judged by the gate instead, through agenter's answers to Aider's questions (aider.py).
"""

from __future__ import annotations

from agenter.permissions import PROTECTED_PATHS, PermissionPolicy

__all__ = ["aider_ignore"]


def aider_ignore(policy: PermissionPolicy) -> str:
    """An aiderignore (gitignore syntax, relative to the repository) for the policy's read rules
    and the credentials check."""
    lines = ["# agenter: paths the permission policy keeps from Aider"]
    protected = PROTECTED_PATHS
    lines += [f"{name}/" for name in sorted(protected.credential_dirs)]
    lines += sorted(protected.credential_files) + list(protected.credential_globs)
    lines += [f"!.env{suffix}" for suffix in protected.env_templates]  # templates are not credentials
    lines += [rule.pattern for rule in policy.rules if rule.kind == "read" and rule.effect != "allow" and rule.pattern]
    return "\n".join(lines) + "\n"
