"""Patch-proposal mode: proposals checked and applied all-or-nothing against real files."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenter.sandbox.paths import PathResolver
from agenter.tools.patch import (
    AppliedPatch,
    FileChange,
    PatchError,
    PatchProposal,
    SearchReplace,
    apply_proposal,
    check_proposal,
    parse_proposal,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    x = 1\n    y = 2\n    return x + y\n")
    (root / "README.md").write_text("# demo\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    return root


def resolver(root: Path, **options) -> PathResolver:
    return PathResolver(root, **options)


def proposal(*changes: FileChange) -> PatchProposal:
    return PatchProposal(summary="test", files=list(changes))


def modify(path: str, **change) -> FileChange:
    return FileChange(path=path, operation="modify", **change)


def apply(root: Path, *changes: FileChange, **options) -> AppliedPatch:
    return apply_proposal(proposal(*changes), resolver(root, **options))


def refused(root: Path, *changes: FileChange, **options) -> PatchError:
    with pytest.raises(PatchError) as info:
        apply(root, *changes, **options)
    assert "no file was changed" in str(info.value)
    return info.value


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root's parent (the project and what is beside it), by path."""
    base = root.parent
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


APP_DIFF = """--- a/src/app.py
+++ b/src/app.py
@@ -1,4 +1,4 @@
 def main():
     x = 1
-    y = 2
+    y = 3
     return x + y
"""


# ---------------------------------------------------------------- unified diffs


def test_valid_diff_is_applied(project: Path):
    result = apply(project, modify("src/app.py", diff=APP_DIFF))
    assert (project / "src" / "app.py").read_text() == "def main():\n    x = 1\n    y = 3\n    return x + y\n"
    assert result.applied and result.written == {"src/app.py"} and result.deleted == set()
    assert "-    y = 2\n+    y = 3\n" in result.diff
    assert result.diff.startswith("diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n")


def test_bare_hunks_without_file_headers_are_accepted(project: Path):
    bare = APP_DIFF.split("\n", 2)[2]
    apply(project, modify("src/app.py", diff=bare))
    assert "y = 3" in (project / "src" / "app.py").read_text()


def test_hunk_found_at_a_small_offset(project: Path):
    app = project / "src" / "app.py"
    app.write_text("import os\n\n\n" + app.read_text())
    apply(project, modify("src/app.py", diff=APP_DIFF))
    assert app.read_text().endswith("    y = 3\n    return x + y\n")


def test_later_hunks_follow_the_offset_of_earlier_ones(project: Path):
    app = project / "src" / "app.py"
    body = [f"line {i}" for i in range(1, 301)]
    app.write_text("\n".join(["# header", "# header"] + body) + "\n")
    diff = ("@@ -10,3 +10,3 @@\n line 9\n-line 10\n+LINE 10\n line 11\n"
            "@@ -250,3 +250,3 @@\n line 249\n-line 250\n+LINE 250\n line 251\n")
    apply(project, modify("src/app.py", diff=diff))
    text = app.read_text()
    assert "LINE 10\n" in text and "LINE 250\n" in text


def test_far_hunk_is_accepted_only_where_it_is_unique(project: Path):
    app = project / "src" / "app.py"
    filler = "".join(f"pad {i}\n" for i in range(400))
    app.write_text(filler + "unique a\nunique b\n" + filler)
    apply(project, modify("src/app.py", diff="@@ -1,2 +1,2 @@\n unique a\n-unique b\n+changed b\n"))
    assert "unique a\nchanged b\n" in app.read_text()

    app.write_text(filler + "twin\nmid\n" + filler + "twin\nmid\n")
    error = refused(project, modify("src/app.py", diff="@@ -1,2 +1,2 @@\n twin\n-mid\n+MID\n"))
    assert "matches 2 places" in str(error) and "fix the @@ line numbers" in str(error)


def test_hunk_context_tolerates_trailing_whitespace_only(project: Path):
    app = project / "src" / "app.py"
    app.write_text("def main():  \n    x = 1\n\t\n    y = 2\n")
    apply(project, modify("src/app.py", diff="@@ -1,4 +1,4 @@\n def main():\n     x = 1\n \n-    y = 2\n+    y = 3\n"))
    assert app.read_text() == "def main():  \n    x = 1\n\t\n    y = 3\n"  # the file's own context lines stay
    error = refused(project, modify("src/app.py", diff="@@ -2 +2 @@\n-x = 1\n+x = 2\n"))
    assert "does not apply" in str(error)  # leading whitespace is content


def test_context_mismatch_names_file_hunk_and_line(project: Path):
    before = snapshot(project)
    bad = APP_DIFF.replace("     x = 1\n", "     x = 100\n")
    error = refused(project, modify("src/app.py", diff=bad))
    message = str(error)
    assert "src/app.py" in message and "hunk #1 (@@ -1,4 +1,4 @@)" in message
    assert "At line 2 the file has '    x = 1'; the hunk expects '    x = 100'" in message
    assert error.errors[0].path == "src/app.py"
    assert snapshot(project) == before


@pytest.mark.parametrize(("diff", "expected"), [
    ("just some text\n", "the diff has no hunk"),
    ("--- a/src/app.py\n+++ b/src/app.py\n@@ -1,4 +1,4 @@\n def main():\n-    y = 2\n", "the diff is malformed"),
    ("@@ -1,2 +1,2 @@\n def main():\n     x = 1\n+    z = 0\n", "is not inside any hunk"),
    ("@@ -1,2 +1,2 @@\ndef main():\n     x = 1\n", "every hunk line must start with"),
    ("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# x\n", "header names 'a/README.md' but this change is for 'src/app.py'"),
    ("--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-def main():\n+def run():\n"
     "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# demo\n+# x\n", "changes 2 files"),
])
def test_malformed_diff_gives_a_clear_error(project: Path, diff: str, expected: str):
    before = snapshot(project)
    error = refused(project, modify("src/app.py", diff=diff))
    assert expected in str(error)
    assert snapshot(project) == before


def test_stray_line_is_counted_in_the_models_own_numbering(project: Path):
    error = refused(project, modify("src/app.py", diff="@@ -1,1 +1,1 @@\n-def main():\n+def run():\n+extra\n"))
    assert "line 4 of the diff, '+extra'" in str(error)


def test_overlapping_hunks_are_refused(project: Path):
    diff = "@@ -2,1 +2,1 @@\n-    x = 1\n+    x = 5\n@@ -1,2 +1,2 @@\n def main():\n-    x = 1\n+    x = 6\n"
    error = refused(project, modify("src/app.py", diff=diff))
    assert "hunk #2" in str(error) and "must not overlap" in str(error)


def test_every_failing_hunk_is_reported(project: Path):
    diff = "@@ -1 +1 @@\n-def nope():\n+def x():\n@@ -4 +4 @@\n-    return 0\n+    return 1\n"
    error = refused(project, modify("src/app.py", diff=diff))
    assert [e.message.split(" (")[0] for e in error.errors] == ["hunk #1", "hunk #2"]
    assert list(error.by_path) == ["src/app.py"] and len(error.by_path["src/app.py"]) == 2


def test_diff_creates_a_file_from_dev_null(project: Path):
    diff = "--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"
    result = apply(project, FileChange(path="src/new.py", operation="create", diff=diff))
    assert (project / "src" / "new.py").read_text() == "a = 1\nb = 2\n"
    assert result.written == {"src/new.py"}
    assert result.diff.startswith("diff --git a/src/new.py b/src/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/src/new.py\n")


# ---------------------------------------------------------------- search / replace


def test_search_replace_is_applied(project: Path):
    result = apply(project, modify("src/app.py", search_replace=[
        SearchReplace(search="    y = 2\n", replace="    y = 20\n"),
        SearchReplace(search="return x + y", replace="return x * y"),
    ]))
    assert (project / "src" / "app.py").read_text() == "def main():\n    x = 1\n    y = 20\n    return x * y\n"
    assert result.written == {"src/app.py"}


def test_ambiguous_search_block_is_refused_with_what_to_do(project: Path):
    (project / "src" / "app.py").write_text("a = 0\nb = 1\na = 0\n")
    error = refused(project, modify("src/app.py", search_replace=[SearchReplace(search="a = 0", replace="a = 9")]))
    message = str(error)
    assert "block #1 matches 2 places" in message and "lines 1, 3" in message
    assert "Add surrounding lines" in message
    assert (project / "src" / "app.py").read_text() == "a = 0\nb = 1\na = 0\n"


def test_missing_search_block_points_at_the_closest_line(project: Path):
    error = refused(project, modify("src/app.py", search_replace=[
        SearchReplace(search="    y = 22\n", replace="    y = 3\n")]))
    assert "block #1 was not found" in str(error)
    assert "looks most like line 3: '    y = 2'" in str(error)


def test_empty_search_is_refused(project: Path):
    error = refused(project, modify("src/app.py", search_replace=[SearchReplace(search="", replace="x")]))
    assert "empty search text" in str(error)


def test_search_tolerates_trailing_whitespace_and_crlf(project: Path):
    app = project / "src" / "app.py"
    app.write_bytes(b"def main():   \r\n    x = 1\r\n    y = 2\r\n")
    apply(project, modify("src/app.py", search_replace=[
        SearchReplace(search="def main():\n    x = 1\n", replace="def main():\n    x = 10\n    w = 0\n")]))
    assert app.read_bytes() == b"def main():\r\n    x = 10\r\n    w = 0\r\n    y = 2\r\n"


def test_search_tolerates_a_uniform_indentation_shift(project: Path):
    app = project / "src" / "app.py"
    apply(project, modify("src/app.py", search_replace=[
        SearchReplace(search="x = 1\ny = 2\n", replace="x = 1\nif x:\n    y = 5\n")]))
    assert app.read_text() == "def main():\n    x = 1\n    if x:\n        y = 5\n    return x + y\n"


def test_search_blocks_apply_in_order(project: Path):
    apply(project, modify("README.md", search_replace=[
        SearchReplace(search="# demo", replace="# demo two"),
        SearchReplace(search="demo two", replace="demo three")]))
    assert (project / "README.md").read_text() == "# demo three\n"


# ---------------------------------------------------------------- paths and safety


@pytest.mark.parametrize("bad_path", ["../outside.txt", "ABSOLUTE", "link/outside.txt", ".git/config",
                                      "src/../../outside.txt"])
def test_unsafe_targets_are_refused_and_nothing_is_written(project: Path, bad_path: str):
    (project / "link").symlink_to(project.parent)
    if bad_path == "ABSOLUTE":
        bad_path = str(project.parent / "outside.txt")
    before = snapshot(project)
    error = refused(project, modify("src/app.py", diff=APP_DIFF),
                    modify(bad_path, content="pwned\n"))
    assert error.errors[0].path == bad_path and "Refused:" in error.errors[0].message
    assert snapshot(project) == before


def test_symlinked_file_pointing_out_is_refused(project: Path):
    (project / "secret.txt").symlink_to(project.parent / "outside.txt")
    error = refused(project, modify("secret.txt", content="pwned\n"))
    assert "symlink" in str(error)
    assert (project.parent / "outside.txt").read_text() == "secret\n"


def test_allowed_write_paths_are_enforced(project: Path):
    error = refused(project, modify("README.md", content="x\n"), allowed_write_paths=["src/"])
    assert "writes are limited to: src/" in str(error)
    apply(project, modify("src/app.py", content="x = 1\n"), allowed_write_paths=["src/"])


def test_one_bad_file_in_five_writes_nothing(project: Path):
    for i in range(3):
        (project / f"m{i}.py").write_text(f"v = {i}\n")
    before = snapshot(project)
    error = refused(
        project,
        modify("m0.py", content="v = 10\n"),
        modify("m1.py", search_replace=[SearchReplace(search="v = 1", replace="v = 11")]),
        FileChange(path="new.py", operation="create", content="n = 1\n"),
        modify("m2.py", diff="@@ -1 +1 @@\n-v = 999\n+v = 12\n"),
        FileChange(path="README.md", operation="delete"),
    )
    assert [e.path for e in error.errors] == ["m2.py"]
    assert snapshot(project) == before
    assert not (project / "new.py").exists()


def test_all_problems_are_reported_together(project: Path):
    error = refused(project, modify("missing.py", content="x\n"), modify("../x", content="x\n"),
                    FileChange(path="README.md", operation="create", content="x\n"))
    assert [e.path for e in error.errors] == ["missing.py", "../x", "README.md"]
    assert "does not exist; use operation 'create'" in error.errors[0].message
    assert "already exists" in error.errors[2].message


# ---------------------------------------------------------------- operations


def test_create_delete_rename(project: Path):
    (project / "old.py").write_text("o = 1\n")
    os.chmod(project / "old.py", 0o751)
    result = apply(
        project,
        FileChange(path="pkg/sub/new.py", operation="create", content="n = 1\n"),
        FileChange(path="README.md", operation="delete"),
        FileChange(path="old.py", operation="rename", new_path="pkg/moved.py",
                   search_replace=[SearchReplace(search="o = 1", replace="o = 2")]),
    )
    assert (project / "pkg" / "sub" / "new.py").read_text() == "n = 1\n"
    assert not (project / "README.md").exists() and not (project / "old.py").exists()
    assert (project / "pkg" / "moved.py").read_text() == "o = 2\n"
    assert stat.S_IMODE((project / "pkg" / "moved.py").stat().st_mode) == 0o751
    assert result.written == {"pkg/sub/new.py", "pkg/moved.py"}
    assert result.deleted == {"README.md", "old.py"}
    assert "deleted file mode 100644\n--- a/README.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-# demo\n" in result.diff
    assert "rename from old.py\nrename to pkg/moved.py\n--- a/old.py\n+++ b/pkg/moved.py\n" in result.diff
    assert not [p for p in project.rglob(".agenter-*")]


def test_plain_rename_keeps_content(project: Path):
    result = apply(project, FileChange(path="README.md", operation="rename", new_path="docs/README.md"))
    assert (project / "docs" / "README.md").read_text() == "# demo\n"
    assert result.diff == "diff --git a/README.md b/docs/README.md\nrename from README.md\nrename to docs/README.md\n"


@pytest.mark.parametrize(("change", "expected"), [
    (FileChange(path="README.md", operation="create", content="x"), "already exists"),
    (FileChange(path="nope.md", operation="modify", content="x"), "does not exist"),
    (FileChange(path="nope.md", operation="delete"), "does not exist"),
    (FileChange(path="README.md", operation="rename", new_path="src/app.py"), "rename onto an existing file"),
    (FileChange(path="src", operation="delete"), "is a directory"),
    (FileChange(path="README.md/x", operation="create", content="x"), "is a file, not a directory"),
])
def test_inconsistent_operations_are_refused(project: Path, change: FileChange, expected: str):
    before = snapshot(project)
    assert expected in str(refused(project, change))
    assert snapshot(project) == before


def test_two_changes_to_one_path_are_refused(project: Path):
    error = refused(project, modify("README.md", content="a\n"), modify("./README.md", content="b\n"))
    assert "also changed by the change to 'README.md'" in str(error)
    error = refused(project, FileChange(path="src/app.py", operation="rename", new_path="x.py"),
                    FileChange(path="x.py", operation="create", content="x\n"))
    assert error.errors[0].path == "x.py"


def test_mode_is_kept(project: Path):
    script = project / "run.sh"
    script.write_text("echo a\n")
    script.chmod(0o755)
    apply(project, modify("run.sh", content="echo b\n"))
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_check_proposal_writes_nothing(project: Path):
    before = snapshot(project)
    result = check_proposal(proposal(modify("src/app.py", diff=APP_DIFF),
                                     FileChange(path="new.txt", operation="create", content="n\n")),
                            resolver(project))
    assert not result.applied and result.written == {"src/app.py", "new.txt"}
    assert "+    y = 3\n" in result.diff and "+++ b/new.txt\n" in result.diff
    assert snapshot(project) == before


LEAP = ('_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]\n\n\ndef is_leap_year(year):\n'
        '    """Whether `year` has a February 29th."""\n    return year % 4 == 0\n\n\n'
        'def days_in_month(year, month):\n    """Days in `month` (1-12) of `year`."""\n'
        '    if not 1 <= month <= 12:\n        raise ValueError("month must be 1 to 12")\n'
        '    if month == 2 and is_leap_year(year):\n        return 29\n    return _DAYS[month - 1]\n\n\n'
        'def days_in_year(year):\n    """365 or 366."""\n    return 366 if is_leap_year(year) else 365\n')


def test_content_that_is_only_the_changed_definitions_replaces_them(project: Path):
    # What Qwen2.5-Coder-1.5B proposed for calendar_utils.py: the one function it fixed, as the
    # whole file. Written as given, it would have deleted the other two; it replaces its namesake.
    (project / "cal.py").write_text(LEAP)
    fixed = "def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n"
    result = apply(project, modify("cal.py", content=fixed))
    old_def = 'def is_leap_year(year):\n    """Whether `year` has a February 29th."""\n    return year % 4 == 0\n'
    assert (project / "cal.py").read_text() == LEAP.replace(old_def, fixed)
    assert result.written == {"cal.py"} and "-    return year % 4 == 0\n" in result.diff
    # An import it needs goes at the top (after the imports, or the docstring, when there are some);
    # decorators go with their function; no newline at the end is no problem.
    (project / "cal.py").write_text('"""Days."""\n' + LEAP.replace("def days_in_year", "@staticmethod\ndef days_in_year"))
    apply(project, modify("cal.py", content="import calendar\n\n\n@other\ndef days_in_year(year):\n"
                                                "    return 365 + calendar.isleap(year)"))
    text = (project / "cal.py").read_text()
    assert text.startswith('"""Days."""\nimport calendar\n_DAYS = ')
    assert text.endswith("@other\ndef days_in_year(year):\n    return 365 + calendar.isleap(year)\n")
    assert "@staticmethod" not in text and text.count("def is_leap_year") == 1


def test_half_the_definitions_or_more_with_a_change_replace_them(project: Path):
    # What Qwen2.5-Coder-1.5B proposed for a two-function module: the fixed `average` alone, as
    # the whole file. Written whole, it deleted the function the tests import.
    (project / "avg.py").write_text("def average(xs):\n    return sum(xs) / len(xs)\n\n\n"
                                    "def positive(xs):\n    return average([x for x in xs if x > 0])\n")
    apply(project, modify("avg.py", content="def average(xs):\n    if not xs:\n        return None\n"
                                            "    return sum(xs) / len(xs)"))
    assert (project / "avg.py").read_text() == (
        "def average(xs):\n    if not xs:\n        return None\n    return sum(xs) / len(xs)\n\n\n"
        "def positive(xs):\n    return average([x for x in xs if x > 0])\n")
    # Two of three, both changed: both replaced, the third and _DAYS kept.
    (project / "cal.py").write_text(LEAP)
    apply(project, modify("cal.py", content="def is_leap_year(year):\n    return True\n\n\n"
                                            "def days_in_year(year):\n    return 1\n"))
    text = (project / "cal.py").read_text()
    assert text.startswith("_DAYS = [31, 28,") and "def days_in_month(year, month):" in text
    assert "    return True\n" in text and "    return 1\n" in text and text.count("def ") == 3
    # The same half, unchanged: the whole file, dropping the other (a deliberate deletion).
    apply(project, modify("avg.py", content="def positive(xs):\n    return average([x for x in xs if x > 0])\n"))
    assert (project / "avg.py").read_text() == "def positive(xs):\n    return average([x for x in xs if x > 0])\n"


def test_content_that_is_only_the_changed_part_is_refused(project: Path):
    (project / "cal.py").write_text(LEAP)
    # Not only definitions the file has (a new name, a statement): the content is the whole
    # file, and one this short is refused as a fragment.
    for fragment in ("_DAYS = [31, 29]\n", "def leap(year):\n    return True\n",
                     "def is_leap_year(year):\n    return True\n\n\nX = 1\n"):
        error = refused(project, modify("cal.py", content=fragment))
        assert error.by_path["cal.py"][0].startswith("content replaces the whole file, but yours has "), fragment
    error = refused(project, modify("cal.py", content="_DAYS = [31, 29]\n"))
    assert error.by_path == {"cal.py": [
        "content replaces the whole file, but yours has 1 non-blank line(s) where 'cal.py' has 14, and keeps 0 of "
        "them: writing it would delete the rest. Give the complete new file in content (every unchanged line too), "
        "or change only the part that changes with search_replace"]}
    assert (project / "cal.py").read_text() == LEAP
    # The whole file with the fix, a rewrite that keeps its length, a short file: content as given.
    whole = LEAP.replace("    return year % 4 == 0\n", "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n")
    apply(project, modify("cal.py", content=whole))
    assert (project / "cal.py").read_text() == whole
    rewrite = "".join(f"X{i} = {i}\n" for i in range(14))
    apply(project, modify("cal.py", content=rewrite))
    assert (project / "cal.py").read_text() == rewrite
    apply(project, modify("src/app.py", content="def main():\n    return 3\n"))
    assert (project / "src" / "app.py").read_text() == "def main():\n    return 3\n"
    # A deliberate shrink goes through search_replace.
    apply(project, modify("cal.py", search_replace=[SearchReplace(search="".join(f"X{i} = {i}\n" for i in range(1, 14)),
                                                                   replace="")]))
    assert (project / "cal.py").read_text() == "X0 = 0\n"


def test_unchanged_modify_reports_nothing(project: Path):
    result = apply(project, modify("README.md", content="# demo\n"))
    assert result.written == set() and result.diff == ""


def test_result_diff_is_accepted_by_git_apply(project: Path, tmp_path: Path):
    copy = tmp_path / "copy"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".git"))
    (project / "tail.txt").write_text("no newline")
    (copy / "tail.txt").write_text("no newline")
    result = apply(
        project,
        modify("src/app.py", diff=APP_DIFF),
        modify("tail.txt", search_replace=[SearchReplace(search="no newline", replace="still none\nat end")]),
        FileChange(path="README.md", operation="rename", new_path="docs/README.md",
                   search_replace=[SearchReplace(search="demo", replace="demo!")]),
        FileChange(path="empty.txt", operation="create", content=""),
        FileChange(path="new.txt", operation="create", content="n\n"),
    )
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    completed = subprocess.run(["git", "apply", "-"], cwd=copy, input=result.diff.encode(), capture_output=True)
    assert completed.returncode == 0, completed.stderr.decode()
    for path in ("src/app.py", "tail.txt", "docs/README.md", "empty.txt", "new.txt"):
        assert (copy / path).read_bytes() == (project / path).read_bytes(), path
    assert not (copy / "README.md").exists()


# ---------------------------------------------------------------- text details


def test_crlf_file_keeps_its_line_endings_under_a_diff(project: Path):
    app = project / "src" / "app.py"
    app.write_bytes(b"def main():\r\n    x = 1\r\n    y = 2\r\n    return x + y\r\n")
    result = apply(project, modify("src/app.py", diff=APP_DIFF.replace("+    y = 3\n", "+    y = 3\n+    z = 4\n")
                                    .replace("+1,4", "+1,5")))
    assert app.read_bytes() == b"def main():\r\n    x = 1\r\n    y = 3\r\n    z = 4\r\n    return x + y\r\n"
    assert "+    y = 3\r\n" in result.diff


def test_missing_final_newline_stays_missing(project: Path):
    readme = project / "README.md"
    readme.write_text("one\ntwo")
    apply(project, modify("README.md", diff="@@ -1,2 +1,3 @@\n one\n two\n+three\n"))
    assert readme.read_text() == "one\ntwo\nthree"
    apply(project, modify("README.md", search_replace=[SearchReplace(search="three", replace="3")]))
    assert readme.read_text() == "one\ntwo\n3"
    apply(project, modify("README.md", search_replace=[SearchReplace(search="two\n3\n", replace="2\n3\n")]))
    assert readme.read_text() == "one\n2\n3"


def test_diff_marker_adds_or_removes_the_final_newline(project: Path):
    readme = project / "README.md"
    readme.write_text("one\ntwo")
    apply(project, modify("README.md", diff="@@ -2 +2 @@\n-two\n\\ No newline at end of file\n+two\n"))
    assert readme.read_text() == "one\ntwo\n"
    apply(project, modify("README.md", diff="@@ -2 +2 @@\n-two\n+2\n\\ No newline at end of file\n"))
    assert readme.read_text() == "one\n2"
    result = apply(project, modify("README.md", content="one\n2\n"))
    assert result.diff.endswith("-2\n\\ No newline at end of file\n+2\n")


def test_binary_files_are_refused_for_diff_and_search(project: Path):
    blob = project / "blob.bin"
    blob.write_bytes(b"abc\x00def\n")
    error = refused(project, modify("blob.bin", search_replace=[SearchReplace(search="abc", replace="x")]))
    assert "binary file" in str(error)
    result = apply(project, modify("blob.bin", content="text now\n"))
    assert blob.read_text() == "text now\n"
    assert result.diff.endswith("\nBinary files a/blob.bin and b/blob.bin differ\n")


def test_bom_and_undecodable_bytes_survive(project: Path):
    data = project / "data.txt"
    data.write_bytes(b"\xef\xbb\xbfname: caf\xe9\nvalue: 1\n")
    apply(project, modify("data.txt", diff="@@ -1,2 +1,2 @@\n name: caf\udce9\n-value: 1\n+value: 2\n"))
    assert data.read_bytes() == b"\xef\xbb\xbfname: caf\xe9\nvalue: 2\n"


def test_one_megabyte_file(project: Path):
    big = project / "big.txt"
    lines = [f"line {i:06d} with some padding to make it longer\n" for i in range(25_000)]
    big.write_text("".join(lines))
    assert big.stat().st_size > 1_000_000
    diff = "@@ -10001,3 +10001,3 @@\n line 010000 with some padding to make it longer\n" \
           "-line 010001 with some padding to make it longer\n+changed\n line 010002 with some padding to make it longer\n"
    apply(project, modify("big.txt", diff=diff),)
    apply(project, modify("big.txt", search_replace=[
        SearchReplace(search="line 024999 with some padding to make it longer\n", replace="last\n")]))
    lines[10001] = "changed\n"
    lines[24999] = "last\n"
    assert big.read_text() == "".join(lines)


# ---------------------------------------------------------------- proposal shape


def test_parse_proposal_reports_shape_errors_per_file():
    raw = json.dumps({"summary": "s", "files": [
        {"path": "a.py", "operation": "modify"},
        {"path": "b.py", "operation": "modify", "diff": "@@", "search_replace": [{"search": "a", "replace": "b"}]},
        {"path": "c.py", "operation": "move"},
        {"path": "d.py", "operation": "delete", "new_path": "e.py"},
    ]})
    with pytest.raises(PatchError) as info:
        parse_proposal(raw)
    errors = {e.path: e.message for e in info.value.errors}
    assert "needs one of diff, search_replace or content" in errors["a.py"]
    assert "give the change one way only, not diff and search_replace" in errors["b.py"]
    assert errors["c.py"].startswith("files[2].operation: Input should be 'create', 'modify'")
    assert "new_path is only for operation 'rename'" in errors["d.py"]


def test_content_beside_a_diff_is_the_change():
    """What Qwen2.5-Coder-1.5B wrote on the median task: diff holding the file as it was, content
    the fix. The whole new text says everything: it is the change, the diff is dropped."""
    raw = json.dumps({"summary": "s", "files": [
        {"path": "stats.py", "operation": "modify", "diff": "@@ -1,3 +1,4 @@\ndef median(v):\n    return v[0]",
         "search_replace": None, "content": "def median(v):\n    return sorted(v)[len(v) // 2]\n"}]})
    [change] = parse_proposal(raw).files
    assert change.content == "def median(v):\n    return sorted(v)[len(v) // 2]\n"
    assert change.diff is None and change.search_replace is None


def test_parse_proposal_accepts_json_and_refuses_garbage():
    proposal = parse_proposal('{"summary": "s", "files": [{"path": "a", "operation": "delete"}]}')
    assert proposal.files[0].operation == "delete" and proposal.test_commands == []
    with pytest.raises(PatchError, match="not valid JSON"):
        parse_proposal("here is my patch: {")
    with pytest.raises(PatchError, match="summary: Field required"):
        parse_proposal({"files": []})


def test_parse_proposal_accepts_a_fenced_reply():
    reply = '```json\n{"summary": "s", "files": []}\n```\n'
    assert parse_proposal(reply).summary == "s"


def test_schema_is_strict_json_schema():
    schema = PatchProposal.model_json_schema()
    assert schema["additionalProperties"] is False
    change = schema["$defs"]["FileChange"]
    assert set(change["properties"]) == {"path", "operation", "new_path", "diff", "search_replace", "content"}
    assert change["properties"]["operation"]["enum"] == ["create", "modify", "delete", "rename"]


# ---------------------------------------------------------------- writes fail midway


def test_failed_write_midway_rolls_back(project: Path, monkeypatch: pytest.MonkeyPatch):
    for i in range(4):
        (project / f"m{i}.py").write_text(f"v = {i}\n")
    before = snapshot(project)
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(PatchError) as info:
        apply(project, *[modify(f"m{i}.py", content=f"v = {i * 10}\n") for i in range(4)],
              FileChange(path="README.md", operation="delete"),
              FileChange(path="fresh/new.py", operation="create", content="n\n"))
    monkeypatch.undo()
    assert not info.value.partial and "No space left on device" in str(info.value)
    assert snapshot(project) == before
    assert not (project / "fresh").exists()


def test_failed_staging_leaves_no_temporary_files(project: Path, monkeypatch: pytest.MonkeyPatch):
    import agenter.tools.patch as patch_module

    before = snapshot(project)
    real_write_temp = patch_module._write_temp
    calls = []

    def failing_write_temp(target, data, mode):
        calls.append(target)
        if len(calls) == 3:
            raise OSError(13, "Permission denied")
        return real_write_temp(target, data, mode)

    monkeypatch.setattr(patch_module, "_write_temp", failing_write_temp)
    error = refused(project, FileChange(path="a/b/new.py", operation="create", content="n\n"),
                    modify("README.md", content="r\n"), modify("src/app.py", content="x\n"))
    assert error.errors[0].path == "src/app.py" and "Permission denied" in error.errors[0].message
    assert snapshot(project) == before
    assert not (project / "a").exists()


# ---------------------------------------------------------------- property: difflib diffs apply exactly

LINE = st.sampled_from(["a", "b", "", "  indented", "x = 1", "return", "}", "tail  "])


@st.composite
def edited(draw):
    old = draw(st.lists(LINE, max_size=25))
    new = list(old)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(new)))
        if kind == "insert":
            new.insert(at, draw(LINE))
        elif new and at < len(new):
            if kind == "delete":
                del new[at]
            else:
                new[at] = draw(LINE)
    old_final = draw(st.booleans())
    new_final = draw(st.booleans()) if new != old else old_final
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return _join(old, old_final, eol), _join(new, new_final, eol), draw(st.sampled_from([0, 1, 3]))


def _join(lines: list[str], final_newline: bool, eol: str) -> str:
    text = eol.join(lines)
    return text + eol if lines and final_newline else text


def _difflib_diff(old: str, new: str, context: int) -> str:
    out = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     "a/f.txt", "b/f.txt", n=context):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited())
def test_difflib_diffs_apply_back_exactly(case):
    old, new, context = case
    if old == new:
        return
    diff = _difflib_diff(old, new, context)
    with tempfile.TemporaryDirectory() as directory:
        target = Path(directory) / "f.txt"
        target.write_bytes(old.encode())
        result = apply_proposal(proposal(modify("f.txt", diff=diff)), PathResolver(directory))
        assert target.read_bytes() == new.encode()
        # The result's own diff applies to the old content too.
        target.write_bytes(old.encode())
        apply_proposal(proposal(modify("f.txt", diff=result.diff)), PathResolver(directory))
        assert target.read_bytes() == new.encode()
