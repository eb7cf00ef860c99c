"""What `agenter run` shows while it works: the running shell command and its exit, validation
in progress, tokens and cost as usage arrives (on a terminal's status line), the agent's final
summary, "N iterations", the cost of a local model server qualified; no 80-column wrapping on a
pipe. The live display renders events with the renderer `agenter show` uses."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import time

from test_cli import AGENTER, clean_env, run_cli, stop_process

from agenter.testing import ScriptedModelServer, reply, text, tool_call

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

FINAL = ("All done: a.py holds the constant the task asked for, and the shell command ran to the end "
         "before the file was written, so nothing raced.\n\nNothing else was changed.")


def run_on_a_terminal(args: list[str], timeout: float = 90) -> tuple[int, str]:
    """Run `agenter` with stdout and stderr on a pseudo-terminal; its exit code and all it wrote
    (colour and cursor codes removed; each status line redraw on a line of its own)."""
    master, slave = os.openpty()
    env = clean_env(COLUMNS="200", LINES="40", TERM="xterm")
    proc = subprocess.Popen([*AGENTER, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the terminal's other side closed
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        proc.wait(timeout=30)
    finally:
        stop_process(proc)
        os.close(master)
    shown = ANSI.sub("", out.decode(errors="replace")).replace("\r\n", "\n").replace("\r", "\n")
    return proc.returncode, shown


def test_on_a_terminal_the_command_validation_live_usage_and_summary_show(tmp_path):
    script = [reply(tool_call("bash", {"command": "sleep 3; echo slept"})),
              reply(tool_call("write_file", {"path": "a.py", "content": "x = 1\n"})),
              reply(text(FINAL))]
    with ScriptedModelServer(script) as server:
        code, shown = run_on_a_terminal(
            ["run", "Sleep, then write a.py", "--cwd", str(tmp_path), "--no-sandbox",
             "--validator", "command:sleep 2",
             "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test"])
    assert code == 0, shown
    everything = [line.rstrip() for line in shown.splitlines() if line.strip()]
    # the status line's redraws start with its spinner (braille dots); the rest was printed
    status = [line for line in everything if "\u2800" <= line[0] <= "\u28ff"]
    lines = [line for line in everything if line not in status]
    # the shell command and its exit, printed above the status line
    assert "  $ sleep 3; echo slept" in lines and "  $ exit 0 slept" in lines, shown
    assert "  validating: command:sleep 2 (1 file)" in lines
    # the status line, while the command runs: the first response's tokens and cost are there
    # already (the iteration ends only after the command and two more responses)
    during = [m for line in status
              if (m := re.search(r"iteration 1 · (\d+) tokens · \$(\d+\.\d{4}) · \$ sleep 3", line))]
    assert during and int(during[0].group(1)) > 0 and float(during[0].group(2)) > 0, shown
    assert any(re.search(r"iteration 1 · [1-9]\d* tokens · .* · validating: command:sleep 2$", line)
               for line in status), shown
    # the end: the status, the agent's own summary, "1 iteration", a cost the local server did not bill
    end = lines.index("COMPLETED")
    assert lines[end + 1].startswith("  summary: All done: a.py holds the constant")
    assert "           Nothing else was changed." in lines[end + 1:]
    assert re.search(r"^1 iteration · [1-9]\d* tokens · \$\d+\.\d{4} at list prices "
                     r"\(the model server is local: 127\.0\.0\.1\) · \d+\.\d s$", lines[-1]), shown


def test_on_a_pipe_nothing_is_wrapped_at_80_columns(tmp_path):
    repo = tmp_path / ("a-folder-whose-name-alone-is-longer-than-a-terminal-line-" * 2)
    repo.mkdir()
    content = "VALUE = " + "1 + " * 40 + "1\n"
    script = [reply(tool_call("write_file", {"path": "long.py", "content": content})),
              reply(text("Wrote long.py"))]
    with ScriptedModelServer(script) as server:
        proc = run_cli("run", "Write long.py", "--cwd", str(repo), "--max-iterations", "3",
                       "--option", f"base_url={server.base_url}", "--option", "api_key=sk-test")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].endswith(str(repo)) and len(lines[0]) > 120  # the header: one line, however long
    (tool,) = [line for line in lines if line.startswith("  tool write_file")]
    assert len(tool) > 150 and tool.endswith("…")  # cut at the renderer's limit, not wrapped at 80
    assert lines[-1].startswith("1 iteration · ")
    assert "\x1b[" not in proc.stderr  # no colour codes on a pipe


# ------------------------------------------------------------------------ one renderer


def live_display():
    from rich.console import Console

    from agenter.cli import _LiveDisplay

    out = io.StringIO()
    return _LiveDisplay(Console(file=out, width=200, color_system=None)), out


def message(kind: str, **data):
    from agenter import CodingEvent

    return CodingEvent(type="backend_message", data={"kind": kind, **data})


EVENTS = [
    message("text_delta", content="Running the "), message("text_delta", content="tests."),
    message("command_started", command="pytest -q", tool_name="bash"),
    message("usage_updated", usage={"total_tokens": 1234, "cost_usd": 0.0123}),
    message("command_finished", exit_code=1, content="1 failed"),
    message("permission_decision", tool_name="bash", content="rm -rf / denied", is_error=True),
]


def test_the_live_display_and_show_render_events_alike(capsys):
    """`agenter show` prints every line; the live display the same lines, less the usage it keeps
    on its status line (where tokens and cost follow each usage update)."""
    from agenter import CodingEvent
    from agenter._cliview import TranscriptPrinter

    display, out = live_display()
    display.show(CodingEvent(type="iteration_start", data={"iteration": 1}))
    for event in EVENTS:
        display.show(event)
        if event.data["kind"] == "usage_updated":
            assert display.progress.tokens == 1234 and display.progress.cost == 0.0123
            assert "1234 tokens · $0.0123 · $ pytest -q" in display._status_line()
    display.close()
    printer = TranscriptPrinter()
    for event in EVENTS:
        printer.event({"type": event.type.value, "data": event.data})
    shown = [line.strip() for line in capsys.readouterr().out.splitlines()]
    live = [line.strip() for line in out.getvalue().splitlines()][1:]  # after "▶ iteration 1"
    assert shown == ["text: Running the tests.", "$ pytest -q", "usage 1234 tokens, $0.0123", "$ exit 1 1 failed",
                     "permission denied: bash rm -rf / denied"]
    assert live == [line for line in shown if not line.startswith("usage")]


def test_the_summary_is_not_repeated_and_a_stand_in_summary_is_not_shown():
    from agenter import CodingEvent

    display, out = live_display()
    display.show(message("text", content="Wrote hello.py"))
    display.show(CodingEvent(type="completed", data={"status": "completed", "summary": "Wrote hello.py",
                                                     "files": ["hello.py"]}))
    display.show(CodingEvent(type="failed", data={"status": "failed", "summary": "failed: no file changed",
                                                  "error": "the agent changed no file", "files": []}))
    display.close()
    assert "summary" not in out.getvalue()


def test_the_scripted_servers_cost_is_qualified_only_for_a_local_server(monkeypatch):
    from agenter.cli import _cost_note

    class Options:
        base_url: str | None = None

    local, remote = Options(), Options()
    local.base_url, remote.base_url = "http://127.0.0.1:4000", "https://api.anthropic.com"
    assert _cost_note("anthropic-sdk", local) == "at list prices (the model server is local: 127.0.0.1)"
    assert _cost_note("anthropic-sdk", remote) == ""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert _cost_note("openai", Options()) == ""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")  # a local model, e.g. Ollama
    assert _cost_note("openai", Options()) == "at list prices (the model server is local: localhost)"
