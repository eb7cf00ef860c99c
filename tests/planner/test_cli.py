"""`agenter plan` (agenter.planner.cli): the real anthropic-sdk backend as planner and executor
against the scripted model server; plan only, then the saved plan run with --plan."""

from __future__ import annotations

import json

from agenter.planner.cli import EXIT_OK, EXIT_USAGE, main
from agenter.testing import ModelRequest, reply, text, tool_call

from .conftest import plan_dict

PLAN = plan_dict({"id": "1", "description": "create hello.py that prints hello",
                  "unit_tests": [{"description": "it prints hello", "command": "grep -q hello hello.py"}]})


def answer(request: ModelRequest):
    if any(tool.get("name") == "final_result" for tool in request.tools):
        return reply(tool_call("final_result", PLAN))
    if request.tool_results:
        return reply(text("Created hello.py."))
    return reply(tool_call("write_file", {"path": "hello.py", "content": "print('hello')\n"}))


def test_plan_only_prints_the_plan_and_plan_runs_it(scripted_model_server, tmp_path, capsys):
    server = scripted_model_server(handler=answer)
    common = ["--cwd", str(tmp_path), "--option", f"base_url={server.base_url}", "--option", "api_key=sk-cli-test"]
    assert main(["make a greeter", "--plan-only", *common]) == EXIT_OK
    out = capsys.readouterr()
    saved = tmp_path.parent / "plan.json"
    plan_json = out.out[: out.out.rindex("}") + 1]
    saved.write_text(plan_json)
    assert json.loads(plan_json)["tasks"][0]["id"] == "1" and list(tmp_path.iterdir()) == []
    assert "plan: 1 task(s)" in out.err

    state = tmp_path.parent / "state"
    assert main(["make a greeter", "--plan", str(saved), "--yes", "--json", "--state-dir", str(state),
                 *common]) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["data"]["state_dir"] == str(state) and (state / "state.json").is_file()
    assert lines[-1]["type"] == "run_end" and lines[-1]["data"]["status"] == "completed"
    assert "sk-cli-test" not in json.dumps(lines)
    assert (tmp_path / "hello.py").read_text() == "print('hello')\n"
    # Planning was skipped: only the executor's two model turns after the planner's one.
    assert sum(1 for r in server.model_requests if r.model_request.tools) == 3

    # The run ended: resuming it runs nothing and reports the same result.
    assert main(["--resume", str(state), "--json", *common[2:]]) == EXIT_OK
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert again[0]["data"]["resumed"] is True and again[-1]["data"]["status"] == "completed"
    assert sum(1 for r in server.model_requests if r.model_request.tools) == 3


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["", "--cwd", str(tmp_path)]) == EXIT_USAGE
    assert main(["x", "--parallel", "0", "--plan", str(tmp_path / "missing.json")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "the prompt is empty" in err and "--parallel must be >= 1" in err and "no such file" in err
    assert main(["x", "--cwd", str(tmp_path), "--backend", "no-such-backend", "--yes"]) == EXIT_USAGE
    capsys.readouterr()
    assert main(["--resume", str(tmp_path), "--plan-only"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no plan run was recorded" in err and "--plan-only cannot be given with it" in err
    assert main(["--cwd", str(tmp_path)]) == EXIT_USAGE


def test_the_command_parser_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, argparse, agenter.planner.cli as c; p = argparse.ArgumentParser(); "
            "c.add_plan_parser(p.add_subparsers()); "
            "print(sorted(m for m in ('pydantic', 'agenter.facade.agent', 'agenter.planner.run') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    import agenter.planner as planner

    assert sorted(planner.__all__) == sorted(planner._EXPORTS)
    assert all(getattr(planner, name) is not None for name in planner.__all__)
