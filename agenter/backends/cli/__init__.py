"""Agent CLIs the user already has, behind one runner: claude, codex, gemini, opencode, aider.

Each program is one small module (`command()` and `parse_event()` on `CliBackend`); starting,
reading and ending the program is `_runner`'s, shared by all. See docs/backends/cli.md.
"""
