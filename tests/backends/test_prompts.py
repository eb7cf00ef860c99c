"""The shared instructions (agenter.backends._prompts): the allowed-write rule's two forms."""

from agenter.backends._prompts import compose_instructions


def _instructions(allowed: list[str] | None) -> str:
    return compose_instructions(cwd="/w", sandbox=True, allowed_write_paths=allowed, system_prompt=None,
                                output_type=None, refusal_tool="refuse_task", output_channel="tool")


def test_plain_file_paths_are_named_as_files_without_the_pattern_rules():
    text = _instructions(["calc.py", "src/app.py"])
    assert "Only create, change or delete these files (relative to the working directory): calc.py, src/app.py." in text
    assert "gitignore" not in text and "at any depth" not in text


def test_a_pattern_brings_the_rules_of_patterns():
    for allowed in (["src/**"], ["calc.py", "*.md"], ["docs/"], ["!secret.py"], ["file[12].py"]):
        text = _instructions(allowed)
        assert "gitignore-style patterns" in text and "at any depth" in text, allowed


def test_no_allowed_path_says_change_nothing():
    assert "(none: do not change any file)" in _instructions([])
    assert "Only create" not in _instructions(None)
