"""aider-cli answers Aider's questions itself, with or without a permission policy: never
--yes-always. A task's URL never reaches the network and nothing is installed; a new file is
created only where agenter permits the edit; a message that looks like an Aider command is text.
The real Aider (.venv-aider) against the scripted model server."""

from __future__ import annotations

import contextlib
import http.server
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenter import CodingStatus
from agenter.backends.base import BackendSettings, MessageType, SessionSpec
from agenter.backends.cli._base import TurnState
from agenter.backends.cli._runner import LineSplitter
from agenter.backends.cli.aider import _QUESTION, AiderCliBackend, AiderCliOptions
from agenter.permissions import PermissionPolicy
from agenter.testing import reply, text

from ..kit import REPO, Case, installed, need
from .test_permissions_cli import repository

AIDER = installed(REPO / ".venv-aider" / "bin" / "aider", name="aider")


@contextlib.contextmanager
def page_server() -> Iterator[tuple[str, list[str]]]:
    """A web page on 127.0.0.1 that records every request made for it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><body><p>Roman numerals: I V X L C D M</p></body></html>")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/wiki/Roman_numerals", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def recording_programs(folder: Path, log: Path) -> Path:
    """`pip`, `pip3`, `playwright`, `apt-get` and `sudo` that only record being called."""
    folder.mkdir()
    for name in ("pip", "pip3", "playwright", "apt-get", "apt", "sudo"):
        path = folder / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 0\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


@pytest.fixture
def case() -> Case:
    return Case(backend=AiderCliBackend, program=need(AIDER, "Aider (scripts/install-aider.sh)"), wire="openai",
                   model="openai/gpt-4.1", write=lambda path, content: reply(text(f"{path}\n```\n{content}```\n")),
                   options={"aider_edit_format": "whole"})


def whole(*files: tuple[str, str]) -> Any:
    return reply(text("Here it is.\n\n" + "\n\n".join(f"{path}\n```\n{content}```" for path, content in files) + "\n"))


# ---------------------------------------------------------------------------------- the real Aider
@pytest.mark.agent
@pytest.mark.parametrize("detect_urls", [False, True], ids=["default", "user-turned-url-detection-on"])
async def test_a_url_in_the_task_is_never_fetched_and_nothing_is_installed(kit, tmp_path, detect_urls):
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "called.log"
    fakes = recording_programs(tmp_path / "bin", log)
    with page_server() as (url, hits):
        server = kit.server([whole(("roman.py", "def roman(n):\n    return 'I' * n\n"))],
                            default=reply(text("ok")))
        extra = {"program_args": ["--detect-urls"]} if detect_urls else {}
        backend = kit.backend(server, sandbox=False,
                              env={"PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}"}, **extra)
        messages = await kit.one_turn(backend, work, f"Write roman.py. The rules are at {url} (read them).")
    assert hits == []  # nothing asked for the page: no scrape, with or without URL detection
    assert not log.exists()  # no pip, playwright, apt-get or sudo
    aider_python = Path(need(AIDER, "Aider")).parent / "python"
    assert not list(aider_python.parent.parent.glob("lib/python*/site-packages/playwright"))
    bodies = [request.raw_body.decode() for request in server.model_requests]
    assert len(bodies) == 1 and "Roman numerals: I V X" not in bodies[0]
    assert (work / "roman.py").read_text() == "def roman(n):\n    return 'I' * n\n"
    assert [m.details["path"] for m in messages if m.type is MessageType.FILE_EDIT] == ["roman.py"]
    refused = [d for d in backend.denials() if d.rule == "aider:headless"]
    if detect_urls:  # Aider asked; agenter said no, and the result names it
        assert [d.target for d in refused] == [f"Add URL to the chat? {url}"], backend.denials()
    else:
        assert refused == []


@pytest.mark.agent
async def test_new_files_only_where_edits_are_permitted_without_a_policy(kit, tmp_path):
    work = tmp_path / "work"
    (work / "src").mkdir(parents=True)
    (work / ".git" / "hooks").mkdir(parents=True)
    server = kit.server([whole(("src/ok.py", "X = 1\n"), ("notes.md", "outside the allowed paths\n"),
                               (".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"))], default=reply(text("ok")))
    backend = kit.backend(server, sandbox=False)
    await backend.connect(SessionSpec(cwd=work, allowed_write_paths=["src/**"]))
    try:
        messages = await kit.turn(backend, "Write the files.")
    finally:
        await backend.disconnect()
    assert (work / "src" / "ok.py").read_text() == "X = 1\n"
    assert not (work / "notes.md").exists() and not (work / ".git" / "hooks" / "pre-commit").exists()
    assert [m.details["path"] for m in messages if m.type is MessageType.FILE_EDIT] == ["src/ok.py"]
    denied = {d.target: d.rule for d in backend.denials()}
    assert denied.get("notes.md") == "allowed_write_paths", denied
    assert any(target.endswith(".git/hooks/pre-commit") for target in denied), denied


@pytest.mark.agent
async def test_a_message_that_looks_like_an_aider_command_is_text(kit, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    server = kit.server([reply(text("I will not run that."))], default=reply(text("ok")))
    backend = kit.backend(server, sandbox=False)
    await backend.connect(SessionSpec(cwd=work))
    try:
        await kit.turn(backend, "Say hello.")  # the first prompt carries the instructions first
        await kit.turn(backend, "/run touch pwned")
        await kit.turn(backend, "!touch pwned2")
    finally:
        await backend.disconnect()
    assert not (work / "pwned").exists() and not (work / "pwned2").exists()
    assert "/run touch pwned" in server.model_requests[1].raw_body.decode()


@pytest.mark.agent
async def test_a_policy_still_lets_a_new_file_it_allows_be_created(kit, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    server = kit.server([whole(("new.py", "Y = 2\n"), ("secret.txt", "no\n"))], default=reply(text("ok")))
    backend = kit.backend(server, sandbox=False,
                          permissions=PermissionPolicy.parse("mode accept_edits\ndeny edit:secret.txt\n"))
    messages = await kit.one_turn(backend, work, "Write them.")
    assert (work / "new.py").read_text() == "Y = 2\n" and not (work / "secret.txt").exists()
    assert [m.details["path"] for m in messages if m.type is MessageType.FILE_EDIT] == ["new.py"]
    assert "deny edit:secret.txt" in [d.rule for d in backend.denials()]


@pytest.mark.agent
async def test_a_file_refused_a_place_in_the_chat_is_named(kit, tmp_path):
    """Aider asks to add a file the reply mentions to the chat (with git: a tracked file); a file
    the policy keeps from being edited is refused, and the refusal is a denial of the run."""
    work, _, _ = repository(tmp_path)
    server = kit.server([reply(text("The settings are in a.txt; nothing to change."))], default=reply(text("ok")))
    backend = kit.backend(server, sandbox=False, aider_git=True,
                          permissions=PermissionPolicy.parse("mode accept_edits\ndeny edit:a.txt\n"))
    await kit.one_turn(backend, work, "Where are the settings?")
    assert (work / "a.txt").read_text() == "one\n"
    assert [(d.target, d.rule) for d in backend.denials()] == [("a.txt", "deny edit:a.txt")]
    assert "Aider asked to add it to the chat" in backend.denials()[0].reason


# ---------------------------------------------------------------------------------- the answers
def test_the_question_pattern_matches_aiders_prompts_and_not_prose():
    for asked in ("Create new file? (Y)es/(N)o [Yes]: ", "Add URL to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: ",
                  "Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: ",
                  "Run shell command? (Y)es/(N)o/(S)kip all/(D)on't ask again [Yes]: ",
                  "Install playwright? (Y)es/(N)o [Yes]: ", "Fix lint errors in x.py? (Y)es/(N)o [No]: "):
        assert _QUESTION.search(asked), asked
    for prose in ("Create new file? (Y)es/(N)o [Yes]: \n", "Answer (Y)es or (N)o", "see [docs]: here"):
        assert not _QUESTION.search(prose), prose


def test_a_question_split_across_reads_is_one_question():
    splitter = LineSplitter()
    assert splitter.feed(b"\nnotes.md\nCreate new file? (Y)es/(N)o") == [b"", b"notes.md"]
    assert not _QUESTION.search(splitter.pending().decode())
    assert splitter.feed(b" [Yes]: ") == []
    assert _QUESTION.search(splitter.pending().decode())


async def ask(backend: AiderCliBackend, subject: str, question: str) -> str:
    turn = TurnState()
    backend.parse_event(_line(subject), turn)
    return await backend.answer(question, turn)


def _line(value: str) -> Any:
    from agenter.backends.cli._runner import parse_line

    return parse_line(value.encode())


async def test_every_question_but_a_permitted_edit_is_answered_no(tmp_path):
    settings = BackendSettings(model="openai/gpt-4.1", tools=[], sandbox=False, options=AiderCliOptions())
    backend = AiderCliBackend(settings)
    # Connected as far as the answers need: the gate, the workspace and the session's paths.
    from agenter.permissions import PermissionGate

    backend._cwd, backend._spec = tmp_path, SessionSpec(cwd=tmp_path, allowed_write_paths=["src/**"])
    backend.gate = PermissionGate(PermissionPolicy(mode="bypass"), tmp_path)
    (tmp_path / "src").mkdir()
    assert await ask(backend, "src/a.py", "Create new file? (Y)es/(N)o [Yes]: ") == "y"
    assert await ask(backend, "b.py", "Create new file? (Y)es/(N)o [Yes]: ") == "n"
    assert await ask(backend, "../c.py", "Allow edits to file that has not been added to the chat? (Y)es/(N)o [Yes]: ") == "n"
    assert await ask(backend, ".env", "Add file to the chat? (Y)es/(N)o [Yes]: ") == "n"
    assert await ask(backend, "src/a.py", "Add file to the chat? (Y)es/(N)o [Yes]: ") == "y"
    assert await ask(backend, "See the docs.", "Attempt to fix lint errors? (Y)es/(N)o [Yes]: ") == "y"
    for subject, question in (("https://x.org", "Add URL to the chat?"), ("pip install playwright", "Run pip install?"),
                              ("python -m playwright install --with-deps chromium", "Install playwright?"),
                              ("curl x | sh", "Run shell command?"), ("https://aider.chat/docs",
                                                                      "Open URL for more info?"),
                              ("", "No git repo found, create one to track aider's changes (recommended)?"),
                              ("", "Something Aider asks in a later version?")):
        assert await ask(backend, subject, question + " (Y)es/(N)o [Yes]: ") == "n", question
    targets = [d.target for d in backend.denials() if d.rule == "aider:headless"]
    assert "Add URL to the chat? https://x.org" in targets and "Install playwright?" in targets
    assert "Something Aider asks in a later version?" in targets
    # A file Aider asked to add to the chat, refused because it could not be edited, is named too.
    assert [(d.target, d.rule) for d in backend.denials()][:3] == [
        ("b.py", "allowed_write_paths"), ("../c.py", "allowed_write_paths"), (".env", "allowed_write_paths")]


# ---------------------------------------------------------------------------------- a stray file
ROMAN = ("def roman(number):\n    out = ''\n    for value, letters in ((1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), "
         "(100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')):\n"
         "        while number >= value:\n            out, number = out + letters, number - value\n    return out\n")
TEST_ROMAN = "from roman import roman\n\n\ndef test_roman():\n    assert roman(1994) == 'MCMXCIV'\n"


@pytest.mark.agent
@pytest.mark.timeout(300)  # two runs of Aider and of the tests
async def test_a_stray_file_name_is_refused_and_the_retry_completes(kit, tmp_path):
    """The model names its whole-file reply `Roman numerals.py` beside the real `roman.py`:
    agenter answers no to Aider's "Create new file?" (outside allowed_write_paths), nothing is
    left in the workspace, the refusal is in the result and in the next prompt, and the retry
    (roman.py failed its test) completes."""
    import sys

    (tmp_path / "roman.py").write_text("def roman(number):\n    pass\n")
    (tmp_path / "test_roman.py").write_text(TEST_ROMAN)
    server = kit.server([whole(("Roman numerals.py", ROMAN), ("roman.py", "def roman(number):\n    return ''\n")),
                         whole(("roman.py", ROMAN))], default=reply(text("ok")))
    agent = kit.agent(server, validators=[f"command:{sys.executable} -m pytest -q -p no:cacheprovider test_roman.py"])
    result = await agent.execute("Write roman(number) in roman.py.", cwd=tmp_path,
                                 allowed_write_paths=["roman.py", "test_*.py"])
    assert result.status is CodingStatus.COMPLETED and result.iterations == 2, result
    # The stray file is gone; __pycache__ is the test validator's (when bytecode is written).
    assert sorted(p.name for p in tmp_path.iterdir()
                  if not p.name.startswith(".") and p.name != "__pycache__") == ["roman.py", "test_roman.py"]
    assert (tmp_path / "roman.py").read_text() == ROMAN
    refused = [d for d in result.permission_denials if d["target"] == "Roman numerals.py"]
    assert refused and refused[0]["rule"] == "allowed_write_paths", result.permission_denials
    retry = server.model_requests[1].raw_body.decode()
    assert "These actions were refused" in retry and "Roman numerals.py" in retry
