"""PathResolver: every hostile path a model might send, against real files and symlinks."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from agenter._errors import PathSecurityError
from agenter.sandbox.paths import MAX_PATH_DEPTH, PATH_MAX, PathResolver, open_regular


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """tmp_path/project (the cwd) beside tmp_path/outside (a secret)."""
    project = tmp_path / "project"
    outside = tmp_path / "outside"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("x = 1\n")
    (project / ".git" / "objects").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    (project / ".gitignore").write_text("*.pyc\n")
    (project / ".github" / "workflows").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    return project, outside


def refused(resolver_call, *args) -> str:
    with pytest.raises(PathSecurityError) as info:
        resolver_call(*args)
    message = str(info.value)
    assert message.startswith("Refused:")
    return message


# ---------------------------------------------------------------- plain paths


def test_relative_and_absolute_inside(layout):
    project, _ = layout
    resolver = PathResolver(project)
    assert resolver.resolve_read("src/app.py") == project.resolve() / "src" / "app.py"
    assert resolver.resolve_read(str(project / "src" / "app.py")) == project.resolve() / "src" / "app.py"
    assert resolver.resolve_write("new/dir/file.py") == project.resolve() / "new" / "dir" / "file.py"
    assert resolver.resolve_read("./src/../src/app.py") == project.resolve() / "src" / "app.py"
    assert resolver.resolve_read(".") == project.resolve()


def test_pathlike_accepted(layout):
    project, _ = layout
    assert PathResolver(project).resolve_read(Path("src/app.py")).name == "app.py"


@pytest.mark.parametrize("bad", ["", "a\x00b", "src/app.py\x00.txt"])
def test_empty_and_nul_refused(layout, bad):
    project, _ = layout
    for sandbox in (True, False):
        resolver = PathResolver(project, sandbox=sandbox)
        refused(resolver.resolve_read, bad)
        refused(resolver.resolve_write, bad)


def test_non_string_refused(layout):
    project, _ = layout
    resolver = PathResolver(project)
    refused(resolver.resolve_read, b"src/app.py")
    refused(resolver.resolve_read, 42)


@pytest.mark.parametrize("escape", [
    "..", "../outside/secret.txt", "src/../../outside/secret.txt", "../../../../../../etc/passwd",
    "./../project/../outside/secret.txt",
])
def test_dotdot_escapes_refused(layout, escape):
    project, _ = layout
    resolver = PathResolver(project)
    message = refused(resolver.resolve_read, escape)
    assert "outside the working directory" in message
    refused(resolver.resolve_write, escape)


def test_dotdot_that_comes_back_inside_is_fine(layout):
    project, _ = layout
    resolver = PathResolver(project)
    assert resolver.resolve_read("../project/src/app.py") == project.resolve() / "src" / "app.py"


def test_absolute_outside_refused(layout):
    project, outside = layout
    resolver = PathResolver(project)
    refused(resolver.resolve_read, "/etc/passwd")
    refused(resolver.resolve_write, str(outside / "secret.txt"))
    refused(resolver.resolve_write, "/")
    refused(resolver.resolve_read, "//etc/passwd")
    refused(resolver.resolve_read, "/proc/self/root/etc/passwd")
    # A sibling whose name starts with the cwd's name is still outside.
    sibling = project.parent / (project.name + "-evil")
    sibling.mkdir()
    refused(resolver.resolve_read, str(sibling / "x"))


def test_tilde_and_backslashes_are_literal(layout):
    project, _ = layout
    resolver = PathResolver(project)
    assert resolver.resolve_write("~/x.txt") == project.resolve() / "~" / "x.txt"
    assert resolver.resolve_read("~") == project.resolve() / "~"
    weird = resolver.resolve_write("..\\..\\etc\\passwd")
    assert weird.parent == project.resolve()
    assert weird.name == "..\\..\\etc\\passwd"


def test_writing_the_cwd_itself_refused(layout):
    project, _ = layout
    refused(PathResolver(project).resolve_write, ".")


# ---------------------------------------------------------------- .git


@pytest.mark.parametrize("inside_git", [".git", ".git/", ".git/config", ".git/objects/ab/cd",
                                        "src/../.git/HEAD", ".GIT/config", "sub/.git/config",
                                        "./.git//hooks/../config"])
def test_git_internals_refused(layout, inside_git):
    project, _ = layout
    resolver = PathResolver(project)
    assert ".git/" in refused(resolver.resolve_read, inside_git)
    refused(resolver.resolve_write, inside_git)


def test_git_internals_by_absolute_path_refused(layout):
    project, _ = layout
    refused(PathResolver(project).resolve_write, str(project / ".git" / "HEAD"))


def test_gitignore_and_github_are_fine(layout):
    project, _ = layout
    resolver = PathResolver(project)
    assert resolver.resolve_read(".gitignore").name == ".gitignore"
    assert resolver.resolve_write(".github/workflows/ci.yml").name == "ci.yml"
    assert resolver.resolve_write(".gitattributes").name == ".gitattributes"
    assert resolver.resolve_write("src/.git_helpers.py").name == ".git_helpers.py"


def test_symlink_into_git_refused(layout):
    project, _ = layout
    (project / "cfg").symlink_to(project / ".git" / "config")
    (project / "gitdir").symlink_to(".git")
    resolver = PathResolver(project)
    refused(resolver.resolve_read, "cfg")
    refused(resolver.resolve_write, "gitdir/hooks/pre-commit")


# ---------------------------------------------------------------- symlinks


def test_symlink_to_outside_file_refused(layout):
    project, outside = layout
    (project / "leak.txt").symlink_to(outside / "secret.txt")
    resolver = PathResolver(project)
    message = refused(resolver.resolve_read, "leak.txt")
    assert "symlink" in message
    refused(resolver.resolve_write, "leak.txt")


def test_symlink_to_outside_dir_refused(layout):
    project, outside = layout
    (project / "out").symlink_to(outside, target_is_directory=True)
    resolver = PathResolver(project)
    refused(resolver.resolve_read, "out/secret.txt")
    refused(resolver.resolve_write, "out/new.txt")
    refused(resolver.resolve_read, "out")


def test_relative_symlink_escape_refused(layout):
    project, _ = layout
    (project / "src" / "up").symlink_to("../../outside")
    resolver = PathResolver(project)
    refused(resolver.resolve_read, "src/up/secret.txt")


def test_symlinked_parent_dir_refused(layout):
    project, outside = layout
    (outside / "deep").mkdir()
    (project / "src" / "vendor").symlink_to(outside / "deep", target_is_directory=True)
    resolver = PathResolver(project)
    refused(resolver.resolve_write, "src/vendor/lib/mod.py")


def test_dangling_symlink_pointing_outside_refused_for_write(layout):
    project, outside = layout
    (project / "trap.py").symlink_to(outside / "does-not-exist-yet.py")
    resolver = PathResolver(project)
    refused(resolver.resolve_write, "trap.py")
    refused(resolver.resolve_read, "trap.py")
    assert not (outside / "does-not-exist-yet.py").exists()


def test_symlink_chain_escaping_refused(layout):
    project, outside = layout
    (project / "a").symlink_to("b")
    (project / "b").symlink_to("src/c")
    (project / "src" / "c").symlink_to(outside / "secret.txt")
    resolver = PathResolver(project)
    refused(resolver.resolve_read, "a")
    refused(resolver.resolve_write, "a")


def test_symlink_then_dotdot_follows_the_kernel(layout):
    project, outside = layout
    (outside / "inner").mkdir()
    (project / "hop").symlink_to(outside / "inner", target_is_directory=True)
    resolver = PathResolver(project)
    # The kernel resolves hop first, so hop/.. is `outside`, not the project.
    refused(resolver.resolve_read, "hop/../secret.txt")


def test_symlinks_inside_cwd_are_fine_and_resolved(layout):
    project, _ = layout
    (project / "alias.py").symlink_to("src/app.py")
    (project / "pending.py").symlink_to("src/not-yet.py")  # dangling, but inside
    (project / "srcdir").symlink_to("src", target_is_directory=True)
    resolver = PathResolver(project)
    assert resolver.resolve_read("alias.py") == project.resolve() / "src" / "app.py"
    assert resolver.resolve_write("pending.py") == project.resolve() / "src" / "not-yet.py"
    assert resolver.resolve_write("srcdir/new.py") == project.resolve() / "src" / "new.py"


def test_symlink_loop_does_not_hang(layout):
    project, _ = layout
    (project / "loop1").symlink_to("loop2")
    (project / "loop2").symlink_to("loop1")
    resolver = PathResolver(project)
    try:
        result = resolver.resolve_read("loop1")
    except PathSecurityError:
        return
    assert str(result).startswith(str(project.resolve()))


def test_cwd_itself_a_symlink(layout, tmp_path):
    project, outside = layout
    link = tmp_path / "link-to-project"
    link.symlink_to(project, target_is_directory=True)
    resolver = PathResolver(link)
    assert resolver.cwd == project.resolve()
    assert resolver.resolve_read("src/app.py") == project.resolve() / "src" / "app.py"
    assert resolver.resolve_read(str(link / "src" / "app.py")) == project.resolve() / "src" / "app.py"
    refused(resolver.resolve_read, "../outside/secret.txt")
    assert resolver.relative(link / "src" / "app.py") == "src/app.py"
    assert resolver.relative(project / "src" / "app.py") == "src/app.py"


# ---------------------------------------------------------------- allowed_write_paths


def test_allowed_write_paths_patterns(layout):
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["src/", "tests/**/*.py", "*.md", "!SECRET.md"])
    assert resolver.resolve_write("src/app.py")
    assert resolver.resolve_write("src/pkg/deep.py")
    assert resolver.resolve_write("tests/unit/test_x.py")
    assert resolver.resolve_write("README.md")
    refused(resolver.resolve_write, "docs/guide.md")  # "*.md": the top level only (below)
    message = refused(resolver.resolve_write, "setup.py")
    assert "src/" in message and "allowed" in message
    refused(resolver.resolve_write, "tests/data.json")
    refused(resolver.resolve_write, "SECRET.md")
    # Reads are not limited by allowed_write_paths.
    assert resolver.resolve_read("setup.py")
    assert resolver.is_allowed_write("src/x.py") and not resolver.is_allowed_write("setup.py")


def test_a_pattern_without_a_slash_is_anchored_at_cwd(layout):
    """agenter 0.1.7 read ["*.py"] as the top-level Python files; gitignore would match them at
    any depth. An allow-list never grows silently: no slash (but a trailing one) means the top."""
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["*.py", "docs/"])
    assert resolver.resolve_write("setup.py")
    refused(resolver.resolve_write, "src/app.py")
    assert resolver.resolve_write("docs/a.md")
    refused(resolver.resolve_write, "src/docs/a.md")
    anywhere = PathResolver(project, allowed_write_paths=["**/*.py", "**/docs/"])
    assert anywhere.resolve_write("src/app.py") and anywhere.resolve_write("setup.py")
    assert anywhere.resolve_write("src/docs/a.md")


def test_an_exclusion_applies_at_any_depth(layout):
    """Anchoring only narrows: "!SECRET.md" still excludes every SECRET.md."""
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["docs/", "**/*.md", "!SECRET.md"])
    refused(resolver.resolve_write, "docs/SECRET.md")
    refused(resolver.resolve_write, "SECRET.md")
    assert resolver.resolve_write("docs/a.md")


def test_allowed_write_paths_anchored(layout):
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["/src/"])
    assert resolver.resolve_write("src/app.py")
    refused(resolver.resolve_write, "lib/src/app.py")


def test_allowed_write_paths_dot_slash_and_absolute_patterns(layout):
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["./src/", f"{project}/docs/", "!./src/locked.py"])
    assert resolver.resolve_write("src/app.py")
    assert resolver.resolve_write("docs/a.md")
    refused(resolver.resolve_write, "lib/src/app.py")
    refused(resolver.resolve_write, "src/locked.py")
    refused(resolver.resolve_write, "setup.py")


def test_allowed_write_paths_match_the_resolved_target(layout):
    project, _ = layout
    (project / "src" / "to_root.py").symlink_to("../setup.py")
    resolver = PathResolver(project, allowed_write_paths=["src/"])
    refused(resolver.resolve_write, "src/to_root.py")


def test_allowed_write_paths_empty_means_nowhere(layout):
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=[])
    assert "no files may be written" in refused(resolver.resolve_write, "src/app.py")
    assert resolver.resolve_read("src/app.py")


def test_allowed_write_paths_none_means_anywhere(layout):
    project, _ = layout
    assert PathResolver(project, allowed_write_paths=None).resolve_write("any/where.txt")


# ---------------------------------------------------------------- sandbox=False


def test_unsandboxed_resolves_relative_to_cwd_without_confinement(layout):
    project, outside = layout
    resolver = PathResolver(project, sandbox=False)
    assert resolver.resolve_read("../outside/secret.txt") == outside.resolve() / "secret.txt"
    assert resolver.resolve_write(str(outside / "new.txt")) == outside.resolve() / "new.txt"
    assert resolver.resolve_read(".git/config") == project.resolve() / ".git" / "config"
    assert resolver.relative(outside / "secret.txt") == (outside.resolve() / "secret.txt").as_posix()


def test_unsandboxed_still_applies_allowed_write_paths(layout):
    project, outside = layout
    resolver = PathResolver(project, allowed_write_paths=["src/"], sandbox=False)
    assert resolver.resolve_write("src/x.py")
    refused(resolver.resolve_write, "setup.py")
    refused(resolver.resolve_write, str(outside / "new.txt"))


# ---------------------------------------------------------------- relative() and open_for_write()


def test_relative(layout):
    project, _ = layout
    resolver = PathResolver(project)
    assert resolver.relative(project / "src" / "app.py") == "src/app.py"
    assert resolver.relative(str(project)) == "."
    assert resolver.relative("src/app.py") == "src/app.py"
    assert resolver.relative("/etc/passwd") == "/etc/passwd"


def test_open_for_write_creates_parents_and_writes(layout):
    project, _ = layout
    resolver = PathResolver(project)
    with resolver.open_for_write("pkg/sub/mod.py") as handle:
        handle.write("y = 2\n")
    assert (project / "pkg" / "sub" / "mod.py").read_text() == "y = 2\n"
    with resolver.open_for_write("pkg/sub/mod.py", "a") as handle:
        handle.write("z = 3\n")
    assert (project / "pkg" / "sub" / "mod.py").read_text() == "y = 2\nz = 3\n"
    with resolver.open_for_write("blob.bin", "wb") as handle:
        handle.write(b"\x00\x01")
    assert (project / "blob.bin").read_bytes() == b"\x00\x01"


def test_open_for_write_refuses_outside(layout):
    project, outside = layout
    (project / "trap.py").symlink_to(outside / "planted.py")
    resolver = PathResolver(project)
    refused(resolver.open_for_write, "trap.py")
    refused(resolver.open_for_write, "../outside/planted.py")
    assert not (outside / "planted.py").exists()


# ---------------------------------------------------------------- performance sanity


def test_many_resolutions_are_cheap(layout):
    """Not a timing assert: prints the rate so a regression shows up in -s output."""
    project, _ = layout
    resolver = PathResolver(project, allowed_write_paths=["src/", "tests/", "*.md"])
    deep = "/".join(f"d{i}" for i in range(20))
    start = time.perf_counter()
    for i in range(2000):
        resolver.resolve_read(f"src/{deep}/file{i}.py")
        resolver.resolve_write(f"src/pkg/file{i}.py")
    elapsed = time.perf_counter() - start
    print(f"4000 resolutions in {elapsed:.3f}s ({4000 / elapsed:.0f}/s)")
    assert os.path.isdir(project)


# ---------------------------------------------------------------- hostile sizes and special files


def test_path_longer_than_path_max_refused_with_a_short_message(layout):
    project, _ = layout
    resolver = PathResolver(project)
    for bad in ("b" * 5000, "src/" + "c/" * 2100 + "x.py"):
        for call in (resolver.resolve_read, resolver.resolve_write, resolver.open_for_write,
                     resolver.open_for_read):
            message = refused(call, bad)
            assert "PATH_MAX" in message and len(message) < 400


def test_name_longer_than_name_max_refused(layout):
    project, _ = layout
    resolver = PathResolver(project)
    message = refused(resolver.resolve_write, "src/" + "n" * 256 + ".py")
    assert "NAME_MAX" in message and "259 bytes" in message
    # Counted in bytes, as the kernel does: 128 two-byte characters are 256 bytes.
    assert "NAME_MAX" in refused(resolver.resolve_read, "é" * 128)
    assert resolver.resolve_write("n" * 255).name == "n" * 255


def test_path_joined_to_cwd_longer_than_path_max_refused(layout):
    project, _ = layout
    resolver = PathResolver(project)
    # Short enough on its own, too long once the working directory is in front of it.
    long_relative = "/".join(["d" * 200] * 21)[:PATH_MAX - 6]
    assert len(str(project.resolve())) + 1 + len(long_relative) >= PATH_MAX
    assert "once joined" in refused(resolver.resolve_write, long_relative)


def test_deep_path_refused_and_open_for_write_does_not_recurse(layout):
    project, _ = layout
    resolver = PathResolver(project)
    deep = "a/" * 1500 + "x.py"
    for call in (resolver.resolve_read, resolver.resolve_write, resolver.open_for_write):
        message = refused(call, deep)
        assert "1501 folders deep" in message and len(message) < 400
    assert not (project / "a").exists()
    # At the limit, parents are created without recursion (Path.mkdir recursed per level).
    at_limit = "a/" * (MAX_PATH_DEPTH - 1) + "x.py"
    with resolver.open_for_write(at_limit) as handle:
        handle.write("deep")
    assert (project / at_limit).read_text() == "deep"


def test_symlink_chain_longer_than_the_recursion_limit_refused(layout):
    project, _ = layout
    for i in range(1200):
        (project / f"l{i}").symlink_to(f"l{i + 1}")
    (project / "l1200").write_text("end")
    resolver = PathResolver(project)
    assert "symbolic links" in refused(resolver.resolve_read, "l0")
    assert "symbolic links" in refused(resolver.resolve_write, "l0")
    assert resolver.relative(project / "l0") == "l0"


def test_unpaired_surrogate_refused(layout):
    project, _ = layout
    assert "not a valid file name" in refused(PathResolver(project).resolve_read, "bad\ud800.py")


@pytest.mark.timeout(10, method="signal")  # a regression blocks in open(): fail, do not hang
def test_fifo_is_refused_never_opened(layout):
    project, _ = layout
    os.mkfifo(project / "pipe")
    resolver = PathResolver(project)
    assert "not a regular file" in refused(resolver.open_for_write, "pipe")
    assert "not a regular file" in refused(resolver.open_for_read, "pipe")
    with pytest.raises(PathSecurityError, match="FIFO"):
        open_regular(project / "pipe", os.O_RDONLY)
    # A FIFO with a reader waiting is refused all the same (fstat after the open).
    reader = os.open(project / "pipe", os.O_RDONLY | os.O_NONBLOCK)
    try:
        refused(resolver.open_for_write, "pipe")
    finally:
        os.close(reader)


def test_socket_and_device_refused(layout, monkeypatch):
    project, _ = layout
    monkeypatch.chdir(project)  # AF_UNIX paths are short: bind by a relative name
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        resolver = PathResolver(project)
        assert "a socket" in refused(resolver.open_for_read, "sock")
        assert "a socket" in refused(resolver.open_for_write, "sock")
    unconfined = PathResolver(project, sandbox=False)
    assert "a character device" in refused(unconfined.open_for_read, "/dev/null")
    assert "a character device" in refused(unconfined.open_for_write, "/dev/null")


def test_open_for_read_reads_regular_files_and_refuses_directories(layout):
    project, _ = layout
    resolver = PathResolver(project)
    with resolver.open_for_read("src/app.py") as handle:
        assert handle.read() == b"x = 1\n"
    with pytest.raises(IsADirectoryError):
        resolver.open_for_read("src")
    with pytest.raises(FileNotFoundError):
        resolver.open_for_read("src/missing.py")
    refused(resolver.open_for_read, "../outside/secret.txt")
