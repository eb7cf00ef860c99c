"""Text tool-call mode's code blocks read as edits (codeedits.py): the rules, as pure functions."""

from __future__ import annotations

from agenter.backends.model_api._harness.codeedits import code_edits

CAL = '''"""Calendar helpers."""

import math

DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    return year % 4 == 0


def days_in_month(year, month):
    if month == 2 and is_leap_year(year):
        return 29
    return DAYS[month - 1]


def days_in_year(year):
    return 366 if is_leap_year(year) else 365
'''

FIXED = "def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n"


def files(**texts: str):
    def read(path: str) -> str | None:
        return texts.get(path)
    return read


def test_an_unlabelled_block_of_definitions_replaces_them_in_the_one_file_that_has_them() -> None:
    """What Qwen2.5-Coder-1.5B answered the leap-year task with, four times: the fixed function alone."""
    reply = f"```python\n{FIXED}```"
    found = code_edits(reply, read=files(**{"cal.py": CAL, "other.py": "def g():\n    pass\n"}),
                       candidates=["other.py", "cal.py"])
    assert not found.problems
    [edit] = found.edits
    assert edit.path == "cal.py" and edit.how == "replaces is_leap_year in cal.py"
    assert edit.content == CAL.replace("def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    assert (edit.start, edit.end) == (0, len(reply))


def test_all_definitions_given_keep_the_rest_of_the_module() -> None:
    """The model's next reply gave all three functions: the docstring, import and constant stay."""
    block = FIXED + "\n\ndef days_in_month(year, month):\n    return 30\n\n\ndef days_in_year(year):\n    return 365\n"
    [edit] = code_edits(f"Here:\n```python\n{block}```\n", read=files(**{"cal.py": CAL}), candidates=["cal.py"]).edits
    assert edit.content.startswith('"""Calendar helpers."""\n\nimport math\n\nDAYS = [31')
    assert "return 30" in edit.content and FIXED in edit.content


def test_a_labelled_block_writes_a_new_file_or_merges_into_a_python_one() -> None:
    reply = ("I will add the module.\n\n`word_count.py`\n```python\ndef count(text):\n    return len(text.split())\n```\n"
             "And fix the leap years:\n\n### cal.py:\n```python\n" + FIXED + "```")
    found = code_edits(reply, read=files(**{"cal.py": CAL}), candidates=[])
    new, fixed = found.edits
    assert (new.path, new.content, new.how) == ("word_count.py", "def count(text):\n    return len(text.split())\n",
                                               "writes word_count.py (a new file)")
    assert reply[new.start:].startswith("`word_count.py`") and reply[:new.end].endswith("split())\n```")
    assert fixed.path == "cal.py" and FIXED in fixed.content and "DAYS = [31" in fixed.content


def test_a_labelled_fragment_of_a_long_file_is_not_written_and_the_model_is_told() -> None:
    long = "".join(f"line {n}\n" for n in range(40))
    found = code_edits("notes.txt\n```\nline 3 changed\n```", read=files(**{"notes.txt": long}), candidates=[])
    assert not found.edits
    [problem] = found.problems
    assert problem.startswith("the block after the line notes.txt was not written: as the whole file it has 1 "
                              "non-blank line(s) where 'notes.txt' has 40")


def test_what_stays_text() -> None:
    """A shell command, a block of statements, a cut-off block, a block that shows the file as
    it is, and a path that leaves the workspace."""
    read = files(**{"cal.py": CAL})
    for reply in ("Run:\n```bash\npytest -q\n```",
                  "```python\nprint(is_leap_year(1900))\n```",
                  "cal.py\n```python\ndef is_leap_year(year):\n",
                  "Done. cal.py now reads:\n\n```python\n" + CAL + "```",
                  "../cal.py\n```python\n" + CAL + "```"):
        found = code_edits(reply, read=read, candidates=["cal.py"])
        assert not found.edits, reply


def test_an_unlabelled_block_no_file_or_several_files_define_is_not_written() -> None:
    read = files(**{"a.py": "def f():\n    pass\n\n\ndef g():\n    pass\n",
                    "b.py": "def f():\n    pass\n\n\ndef h():\n    pass\n"})
    block = "```python\ndef f():\n    return 1\n```"
    found = code_edits(block, read=read, candidates=["a.py", "b.py"])
    assert not found.edits and found.problems == [
        "the block that defines f was not written: several files define them: a.py, b.py. Put the file's path on "
        "the line before the block"]
    found = code_edits(block, read=read, candidates=[])
    assert found.problems == ["the block that defines f was not written: no file the task names or you have read "
                              "defines any of them. Put the file's path on the line before the block"]


def test_two_blocks_for_one_file_build_on_each_other() -> None:
    reply = (f"```python\n{FIXED}```\n\n"
             "```python\ndef days_in_year(year):\n    return 365 + is_leap_year(year)\n```")
    first, second = code_edits(reply, read=files(**{"cal.py": CAL}), candidates=["cal.py"]).edits
    assert FIXED in second.content and "return 365 + is_leap_year" in second.content and FIXED in first.content


def test_an_unlabelled_whole_module_that_changes_a_function_replaces_the_file() -> None:
    """The model's first reply once the file went with the task: the whole module, one function
    fixed. A module that only repeats a file's functions (the test file, quoted) is text."""
    module = CAL.replace("def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    tests = "import pytest\n\nfrom cal import is_leap_year\n\n\ndef test_1900():\n    assert not is_leap_year(1900)\n"
    read = files(**{"cal.py": CAL, "test_cal.py": tests})
    [edit] = code_edits(f"```python\n{module}```", read=read, candidates=["cal.py", "test_cal.py"]).edits
    assert (edit.path, edit.content) == ("cal.py", module)
    assert edit.how == "replaces the whole of cal.py (replaces is_leap_year)"
    quoted = "# tests\nfrom cal import is_leap_year\n\n\ndef test_1900():\n    assert not is_leap_year(1900)  # 1900\n"
    found = code_edits(f"```python\n{quoted}```", read=read, candidates=["cal.py", "test_cal.py"])
    assert not found.edits and not found.problems and found.quotes == 1


def test_an_unlabelled_whole_module_that_changes_only_a_constant_replaces_the_file() -> None:
    """The model's retry on leap year: the whole module with the table it had broken put right,
    every function as the file had it. A quote that leaves out a constant or an import is text."""
    broken = CAL.replace("DAYS = [31, 28,", "DAYS = [31, 29,").replace(
        "def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    fixed = CAL.replace("def is_leap_year(year):\n    return year % 4 == 0\n", FIXED)
    read = files(**{"cal.py": broken})
    [edit] = code_edits(f"Here is the corrected code:\n\n```python\n{fixed}```\n", read=read, candidates=["cal.py"]).edits
    assert (edit.path, edit.content) == ("cal.py", fixed)
    assert edit.how == "replaces the whole of cal.py (replaces DAYS)"
    quoted = fixed.replace("import math\n\n", "").replace("DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]\n", "")
    found = code_edits(f"```python\n{quoted}```", read=files(**{"cal.py": fixed}), candidates=["cal.py"])
    assert not found.edits and not found.problems and found.quotes == 1


def test_a_block_may_add_a_helper_beside_the_function_it_changes() -> None:
    block = ("import re\n\n\ndef _words(text):\n    return re.findall(r\"[a-z0-9']+\", text.lower())\n\n\n"
             "def count(text):\n    return len(_words(text))\n")
    stub = "def count(text):\n    raise NotImplementedError\n"
    [edit] = code_edits(f"```python\n{block}```", read=files(**{"wc.py": stub}), candidates=["wc.py"]).edits
    assert edit.how == "replaces count and adds _words in wc.py"
    assert edit.content == ("import re\ndef count(text):\n    return len(_words(text))\n\n\n"
                            "def _words(text):\n    return re.findall(r\"[a-z0-9']+\", text.lower())\n")


def test_a_sentence_that_ends_with_the_path_labels_the_block_and_new_functions_are_added() -> None:
    """Measured on two-file temperature (add `fahrenheit_to_celsius` to units.py): told to put the
    path before its block, the model wrote "The file's path is `units.py`.", a blank line, then
    the new function alone, five times; nothing was written. A line that ends with a path in
    backticks (then "file" and a colon or a full stop may follow), at most one blank line above
    the block, labels it; a labelled block of only new definitions goes at the file's end."""
    units = 'def celsius_to_fahrenheit(value):\n    """C to F."""\n    return value * 9 / 5 + 32\n'
    new = "def fahrenheit_to_celsius(value):\n    return (value - 32) * 5 / 9\n"
    read = files(**{"units.py": units})
    for line in ("The file's path is `units.py`.\n", "Here's the updated `units.py` file:", "units.py\n"):
        [edit] = code_edits(f"{line}\n```python\n{new}```", read=read, candidates=["units.py"]).edits
        assert (edit.path, edit.content) == ("units.py", units + "\n\n" + new), line
        assert edit.how == "adds fahrenheit_to_celsius in units.py" and edit.start == 0
    # Not a label: a path inside the sentence, a name that is no file, two blank lines.
    for line in ("Use `units.py` like this:\n", "Here's the updated `median` function:\n", "units.py\n\n\n"):
        found = code_edits(f"{line}```python\n{new}```", read=read, candidates=["units.py"])
        assert not found.edits and found.problems, line


def test_a_path_capitalised_as_a_sentence_is_the_file_it_names() -> None:
    """Measured: "Roman.py" on the line before the block, for roman.py (refused as a new file)."""
    read = files(**{"cal.py": CAL})
    [edit] = code_edits(f"Cal.py\n```python\n{FIXED}```", read=read, candidates=["cal.py"]).edits
    assert edit.path == "cal.py" and FIXED in edit.content and "DAYS = [31" in edit.content
    # Not a file the task names or the model read, or two that differ only in case: a new file.
    assert code_edits(f"Cal.py\n```python\n{FIXED}```", read=read, candidates=[]).edits[0].path == "Cal.py"
    both = files(**{"cal.py": CAL, "CAL.py": CAL})
    assert code_edits(f"Cal.py\n```python\n{FIXED}```", read=both, candidates=["cal.py", "CAL.py"]).edits[0].path == "Cal.py"
