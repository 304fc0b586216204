"""`LocalWorkdir` (S24, S25): validated relative paths, read-only skills, atomic owner-only writes."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxpress.workdir import (
    LocalWorkdir,
    Workdir,
    WorkdirError,
    WorkdirFile,
    WorkdirNotFoundError,
    WorkdirPathError,
    WorkdirPermissionError,
    WorkdirWriteError,
    normalize_relative_path,
    read_text,
    write_text,
)

TMP_PREFIX = ".ctxpress-tmp-"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    # A fresh directory that LocalWorkdir itself creates (tmp_path already exists with its own mode).
    return tmp_path / "conversation-42" / "workdir"


@pytest.fixture
def workdir(root: Path) -> LocalWorkdir:
    return LocalWorkdir(root)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret_dir = tmp_path / "host-secrets"
    secret_dir.mkdir()
    (secret_dir / "passwd").write_text("root:x:0:0\n", encoding="utf-8")
    return secret_dir


def host_fragments(workdir: LocalWorkdir, *extra: Path) -> list[str]:
    """Strings that must never appear in an error message: the host root and its parents."""
    fragments = {str(workdir.root), str(workdir.root.parent)}
    fragments.update(str(path) for path in extra)
    return [fragment for fragment in fragments if len(fragment) > 1]


def assert_no_host_path(message: str, workdir: LocalWorkdir, *extra: Path) -> None:
    for fragment in host_fragments(workdir, *extra):
        assert fragment not in message, f"host path {fragment!r} leaked in {message!r}"


def all_entries(root: Path) -> list[Path]:
    return [Path(dirpath, name) for dirpath, dirs, files in os.walk(root) for name in dirs + files]


def temp_files(root: Path) -> list[Path]:
    return [path for path in all_entries(root) if path.name.startswith(TMP_PREFIX)]


# --- S25: path validation ---------------------------------------------------------------------

BAD_PATHS = [
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("//server/share/x", id="unc-like"),
    pytest.param("\\windows\\system32", id="backslash-absolute"),
    pytest.param("C:\\Windows\\x.txt", id="drive"),
    pytest.param("c:relative.txt", id="drive-relative"),
    pytest.param("../escape.txt", id="dotdot"),
    pytest.param("outputs/../../escape.txt", id="dotdot-inside"),
    pytest.param("outputs/..", id="dotdot-last"),
    pytest.param("..\\escape.txt", id="dotdot-backslash"),
    pytest.param("a/b\x00.txt", id="nul"),
    pytest.param("\x00", id="nul-only"),
    pytest.param("a\nb.txt", id="newline"),
    pytest.param("a\rb.txt", id="carriage-return"),
    pytest.param("a\tb.txt", id="tab"),
    pytest.param("a\x1bb.txt", id="escape"),
    pytest.param("a\x7fb.txt", id="delete"),
    pytest.param("a\x85b.txt", id="c1-next-line"),
    pytest.param("", id="empty"),
    pytest.param("   ", id="blank"),
    pytest.param(".", id="dot"),
    pytest.param("./", id="dot-slash"),
    pytest.param("/", id="slash"),
    pytest.param("x" * 256, id="component-256-bytes"),
    pytest.param("outputs/" + "文" * 86, id="component-258-utf8-bytes"),
    pytest.param("/".join(["abcdefgh"] * 120), id="path-over-1024-chars"),
    # Unicode look-alikes that NFKC folds into '/' or '..'
    pytest.param("\uff0fetc\uff0fpasswd", id="fullwidth-solidus-absolute"),
    pytest.param("\uff0e\uff0e/escape.txt", id="fullwidth-dots"),
    pytest.param("\uff0e\uff0e\uff0fescape.txt", id="fullwidth-dots-and-solidus"),
    pytest.param("outputs\uff0f\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fescape.txt", id="fullwidth-nested"),
    pytest.param("\u2025/escape.txt", id="two-dot-leader"),
    pytest.param("\u2024\u2024/escape.txt", id="one-dot-leaders"),
    pytest.param("\ufe52\ufe52/escape.txt", id="small-full-stops"),
    pytest.param("..\ufe68escape.txt", id="small-reverse-solidus"),
    pytest.param("\uff3c\uff0e\uff0e\uff3cescape.txt", id="fullwidth-reverse-solidus"),
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_s25_bad_path_rejected_for_every_operation(workdir: LocalWorkdir, path: str) -> None:
    before = sorted(all_entries(workdir.root.parent.parent))
    operations: list[Callable[[], object]] = [
        lambda: workdir.write_bytes(path, b"data"),
        lambda: workdir.read_bytes(path),
        lambda: workdir.exists(path),
    ]
    if path:  # list_files("") lists the whole workdir by design
        operations.append(lambda: workdir.list_files(path))
    for operation in operations:
        with pytest.raises(WorkdirPathError) as caught:
            operation()
        assert_no_host_path(str(caught.value), workdir)
        assert isinstance(caught.value, ValueError)
    # Nothing was created anywhere near the workdir, inside or outside.
    assert sorted(all_entries(workdir.root.parent.parent)) == before


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("a/b\ud800.txt", id="lone-high-surrogate"),
        pytest.param("a/\udfff", id="lone-low-surrogate"),
    ],
)
def test_s25_lone_surrogate_in_path_is_a_path_error(workdir: LocalWorkdir, path: str) -> None:
    for operation in (
        lambda: workdir.write_bytes(path, b"x"),
        lambda: workdir.read_bytes(path),
        lambda: workdir.exists(path),
    ):
        with pytest.raises(WorkdirPathError):
            operation()


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("..\u2215..\u2215etc\u2215passwd", id="division-slash"),
        pytest.param("..\u2044..\u2044etc", id="fraction-slash"),
        pytest.param("..\u29f8secret", id="big-solidus"),
        pytest.param("a\u202etxt.exe", id="bidi-override"),
        pytest.param("a\u2028b.txt", id="line-separator"),
        pytest.param("a\u2029b.txt", id="paragraph-separator"),
    ],
)
def test_s25_unfolded_lookalikes_and_format_characters_are_rejected(workdir: LocalWorkdir, path: str) -> None:
    with pytest.raises(WorkdirPathError):
        workdir.write_bytes(path, b"x")


@pytest.mark.parametrize(
    "path", ["..\u2215..\u2215etc\u2215passwd", "..\u2044..\u2044passwd", "..\u29f8passwd"]
)
def test_s25_unfolded_lookalikes_never_leave_the_workdir(
    workdir: LocalWorkdir, outside: Path, path: str
) -> None:
    # Whatever the decision on these names, they must not escape: either rejected or stored inside.
    try:
        stored = workdir.write_bytes(path, b"planted")
    except WorkdirPathError:
        return
    assert (workdir.root / stored).read_bytes() == b"planted"
    assert (workdir.root / stored).resolve().parent == workdir.root
    assert (outside / "passwd").read_text(encoding="utf-8") == "root:x:0:0\n"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("outputs/large_tool_results/a.txt", "outputs/large_tool_results/a.txt"),
        ("./outputs//a.txt", "outputs/a.txt"),
        ("outputs/./a.txt", "outputs/a.txt"),
        ("outputs\\a.txt", "outputs/a.txt"),
        ("outputs\uff0fa.txt", "outputs/a.txt"),  # full-width solidus folds to a real separator
        ("对话/历史.md", "对话/历史.md"),
        ("..a/b..", "..a/b.."),  # dots inside names are fine
        ("x" * 255, "x" * 255),
    ],
)
def test_s25_good_paths_are_normalised(workdir: LocalWorkdir, path: str, expected: str) -> None:
    assert normalize_relative_path(path) == expected
    assert workdir.write_bytes(path, b"ok") == expected
    assert workdir.read_bytes(expected) == b"ok"
    assert workdir.exists(path)
    assert (workdir.root / expected).read_bytes() == b"ok"


def test_s25_non_string_path_is_rejected(workdir: LocalWorkdir) -> None:
    with pytest.raises(WorkdirPathError):
        workdir.write_bytes(b"bytes/path", b"x")  # type: ignore[arg-type]
    with pytest.raises(WorkdirPathError):
        workdir.read_bytes(None)  # type: ignore[arg-type]


# --- S25: symlinks planted inside the workdir ---------------------------------------------------


@pytest.fixture
def planted(workdir: LocalWorkdir, outside: Path) -> LocalWorkdir:
    """A workdir where the agent (e.g. through a sandbox shell) planted links that lead outside."""
    (workdir.root / "outputs").mkdir(mode=0o700)
    os.symlink(outside / "passwd", workdir.root / "outputs" / "passwd-link")
    os.symlink(outside, workdir.root / "outputs" / "dir-link")
    os.symlink(outside / "does-not-exist-yet", workdir.root / "outputs" / "dangling-link")
    os.symlink("../../host-secrets", workdir.root / "relative-dir-link")
    return workdir


LINKED_PATHS = [
    "outputs/passwd-link",
    "outputs/dir-link/passwd",
    "outputs/dangling-link",
    "relative-dir-link/passwd",
]


@pytest.mark.parametrize("path", LINKED_PATHS)
def test_s25_symlink_escape_rejected_on_read(planted: LocalWorkdir, outside: Path, path: str) -> None:
    with pytest.raises(WorkdirPathError) as caught:
        planted.read_bytes(path)
    assert "root:x" not in str(caught.value)
    assert_no_host_path(str(caught.value), planted, outside)


@pytest.mark.parametrize("path", LINKED_PATHS)
def test_s25_symlink_escape_not_reported_as_existing(planted: LocalWorkdir, path: str) -> None:
    assert planted.exists(path) is False


@pytest.mark.parametrize(
    "path",
    [*LINKED_PATHS, "outputs/dir-link/new.txt", "outputs/dir-link/sub/new.txt", "relative-dir-link/x"],
)
def test_s25_symlink_escape_rejected_on_write(planted: LocalWorkdir, outside: Path, path: str) -> None:
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    with pytest.raises(WorkdirError) as caught:
        planted.write_bytes(path, b"overwritten")
    assert_no_host_path(str(caught.value), planted, outside)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert not temp_files(outside)


def test_s25_symlink_escape_rejected_on_list(planted: LocalWorkdir, outside: Path) -> None:
    listed = {item.path for item in planted.list_files()}
    assert not any("link" in path for path in listed)
    for prefix in ("outputs/dir-link", "relative-dir-link"):
        with pytest.raises(WorkdirPathError) as caught:
            planted.list_files(prefix)
        assert_no_host_path(str(caught.value), planted, outside)


def test_s25_symlink_inside_the_workdir_is_followed_for_reads(workdir: LocalWorkdir) -> None:
    workdir.write_bytes("outputs/real.txt", b"inside")
    os.symlink("real.txt", workdir.root / "outputs" / "alias.txt")
    assert workdir.read_bytes("outputs/alias.txt") == b"inside"


def test_s25_skills_cannot_be_written_through_an_internal_symlink(workdir: LocalWorkdir) -> None:
    skills = workdir.root / "skills"
    skills.mkdir()
    (skills / "SKILL.md").write_text("public skill", encoding="utf-8")
    os.symlink("skills", workdir.root / "my-notes")
    with pytest.raises(WorkdirError):
        workdir.write_bytes("my-notes/SKILL.md", b"tampered")
    assert (skills / "SKILL.md").read_text(encoding="utf-8") == "public skill"


def test_s25_write_replaces_a_hardlink_instead_of_writing_through_it(
    workdir: LocalWorkdir, outside: Path
) -> None:
    (workdir.root / "outputs").mkdir()
    os.link(outside / "passwd", workdir.root / "outputs" / "hard.txt")
    workdir.write_bytes("outputs/hard.txt", b"new content")
    assert (outside / "passwd").read_text(encoding="utf-8") == "root:x:0:0\n"
    assert workdir.read_bytes("outputs/hard.txt") == b"new content"


# --- S25: the public skills area is read-only ----------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["skills/x.md", "skills", "./skills/a/b.md", "skills\\x.md", "\uff53\uff4b\uff49\uff4c\uff4c\uff53/x.md"],
)
def test_s25_skills_area_is_read_only(workdir: LocalWorkdir, path: str) -> None:
    with pytest.raises(WorkdirPermissionError) as caught:
        workdir.write_bytes(path, b"x")
    assert isinstance(caught.value, PermissionError)
    assert_no_host_path(str(caught.value), workdir)
    assert not (workdir.root / "skills").exists()


def test_s25_skills_area_is_readable(workdir: LocalWorkdir) -> None:
    (workdir.root / "skills" / "kb").mkdir(parents=True)
    (workdir.root / "skills" / "kb" / "SKILL.md").write_text("查询知识库", encoding="utf-8")
    assert read_text(workdir, "skills/kb/SKILL.md") == "查询知识库"
    assert workdir.exists("skills/kb/SKILL.md")
    assert [item.path for item in workdir.list_files("skills")] == ["skills/kb/SKILL.md"]


def test_s25_names_merely_starting_with_skills_are_writable(workdir: LocalWorkdir) -> None:
    assert workdir.write_bytes("skills-notes/x.md", b"ok") == "skills-notes/x.md"
    assert workdir.write_bytes("outputs/skills/x.md", b"ok") == "outputs/skills/x.md"


# --- S24: atomic, owner-only writes ---------------------------------------------------------------


def test_s24_files_are_0600_and_dirs_0700(workdir: LocalWorkdir) -> None:
    old_umask = os.umask(0)  # the most permissive umask must not widen the modes
    try:
        workdir.write_bytes("outputs/large_tool_results/a.txt", b"x")
        workdir.write_bytes("outputs/conversation_history/deep/er/b.md", b"y")
        workdir.write_bytes("outputs/large_tool_results/a.txt", b"replaced")
    finally:
        os.umask(old_umask)
    entries = [workdir.root, *all_entries(workdir.root)]
    assert len(entries) == 8
    for entry in entries:
        mode = stat.S_IMODE(entry.stat().st_mode)
        assert mode == (0o700 if entry.is_dir() else 0o600), (entry.name, oct(mode))


def test_s24_write_then_read_and_list(workdir: LocalWorkdir) -> None:
    payload = "知识库检索结果：北京贵都大酒店\n".encode()
    assert (
        workdir.write_bytes("outputs/large_tool_results/q.txt", payload) == "outputs/large_tool_results/q.txt"
    )
    assert workdir.read_bytes("outputs/large_tool_results/q.txt") == payload
    assert workdir.exists("outputs/large_tool_results/q.txt")
    assert not workdir.exists("outputs/large_tool_results")  # a directory is not a file
    assert workdir.list_files("outputs") == [WorkdirFile("outputs/large_tool_results/q.txt", len(payload))]
    assert workdir.list_files("nothing-here") == []
    assert not temp_files(workdir.root)


def test_s24_overwrite_is_complete(workdir: LocalWorkdir) -> None:
    workdir.write_bytes("a.txt", b"x" * 10_000)
    workdir.write_bytes("a.txt", b"short")
    assert workdir.read_bytes("a.txt") == b"short"


def test_s24_read_missing_file(workdir: LocalWorkdir) -> None:
    with pytest.raises(WorkdirNotFoundError) as caught:
        workdir.read_bytes("outputs/missing.txt")
    assert isinstance(caught.value, FileNotFoundError)
    assert "outputs/missing.txt" in str(caught.value)
    assert_no_host_path(str(caught.value), workdir)
    assert workdir.exists("outputs/missing.txt") is False


def test_s24_list_hides_temporary_files(workdir: LocalWorkdir) -> None:
    workdir.write_bytes("outputs/a.txt", b"a")
    (workdir.root / "outputs" / f"{TMP_PREFIX}crashed").write_bytes(b"half")
    assert [item.path for item in workdir.list_files()] == ["outputs/a.txt"]


@pytest.fixture
def failing_replace(monkeypatch: pytest.MonkeyPatch, workdir: LocalWorkdir) -> Iterator[list[str]]:
    calls: list[str] = []

    def replace(src: str, dst: str, *args: object, **kwargs: object) -> None:
        calls.append(str(dst))
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", replace)
    yield calls


def test_s24_failed_rename_leaves_no_temp_file_and_keeps_old_content(
    workdir: LocalWorkdir, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir.write_bytes("outputs/a.txt", b"old")

    def replace(src: str, dst: str, *args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(WorkdirWriteError) as caught:
        workdir.write_bytes("outputs/a.txt", b"new")
    monkeypatch.undo()
    assert isinstance(caught.value, OSError)
    assert "outputs/a.txt" in str(caught.value)
    assert_no_host_path(str(caught.value), workdir)
    assert workdir.read_bytes("outputs/a.txt") == b"old"
    assert not temp_files(workdir.root)


@pytest.mark.parametrize("failing", ["fsync", "write"])
def test_s24_failure_midway_through_the_write_leaves_no_temp_file(
    workdir: LocalWorkdir, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    if failing == "fsync":

        def fsync(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", fsync)
    else:
        import io

        original_write = io.BufferedWriter.write

        class Exploding(io.BufferedWriter):
            def write(self, data: object) -> int:
                original_write(self, b"partial")  # type: ignore[arg-type]
                raise OSError(errno.EIO, "Input/output error")

        real_fdopen = os.fdopen

        def fdopen(fd: int, *args: object, **kwargs: object) -> io.BufferedWriter:
            raw = real_fdopen(fd, "wb", buffering=0)
            return Exploding(raw)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(WorkdirWriteError) as caught:
        workdir.write_bytes("outputs/large_tool_results/x.txt", b"payload" * 1000)
    monkeypatch.undo()
    assert_no_host_path(str(caught.value), workdir)
    assert not workdir.exists("outputs/large_tool_results/x.txt")
    assert not temp_files(workdir.root)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to count open files")
def test_s24_failed_chmod_does_not_leak_file_descriptors(
    workdir: LocalWorkdir, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fchmod(fd: int, mode: int) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", fchmod)
    before = open_fds()
    for attempt in range(20):
        with pytest.raises(WorkdirWriteError):
            workdir.write_bytes(f"outputs/{attempt}.txt", b"data")
    monkeypatch.undo()
    assert not temp_files(workdir.root)
    assert open_fds() <= before


def test_s24_write_error_message_has_no_host_path_even_if_os_error_has_one(
    workdir: LocalWorkdir, failing_replace: list[str]
) -> None:
    with pytest.raises(WorkdirWriteError) as caught:
        workdir.write_bytes("outputs/conversation_history/h.md", b"history")
    assert failing_replace, "the monkeypatched rename was not reached"
    assert str(workdir.root) in failing_replace[0]  # the OSError did carry the host path...
    assert_no_host_path(str(caught.value), workdir)  # ...and the WorkdirWriteError does not
    assert "No space left" in str(caught.value)


def test_s24_write_into_a_path_blocked_by_a_file(workdir: LocalWorkdir) -> None:
    (workdir.root / "outputs").write_bytes(b"I am a file, not a directory")
    with pytest.raises(WorkdirWriteError) as caught:
        workdir.write_bytes("outputs/large_tool_results/x.txt", b"data")
    assert_no_host_path(str(caught.value), workdir)
    assert not temp_files(workdir.root)


def test_s24_write_over_a_directory_fails_cleanly(workdir: LocalWorkdir) -> None:
    (workdir.root / "outputs" / "target").mkdir(parents=True)
    with pytest.raises(WorkdirWriteError) as caught:
        workdir.write_bytes("outputs/target", b"data")
    assert_no_host_path(str(caught.value), workdir)
    assert not temp_files(workdir.root)


@pytest.mark.skipif(IS_ROOT, reason="root ignores directory permissions; covered by the monkeypatch tests")
def test_s24_read_only_directory_write_fails_without_leftovers(workdir: LocalWorkdir) -> None:
    workdir.write_bytes("outputs/large_tool_results/keep.txt", b"keep")
    directory = workdir.root / "outputs" / "large_tool_results"
    directory.chmod(0o500)
    try:
        with pytest.raises(WorkdirWriteError) as caught:
            workdir.write_bytes("outputs/large_tool_results/new.txt", b"data")
    finally:
        directory.chmod(0o700)
    assert_no_host_path(str(caught.value), workdir)
    assert [item.path for item in workdir.list_files()] == ["outputs/large_tool_results/keep.txt"]
    assert not temp_files(workdir.root)


def test_s24_repr_and_errors_do_not_expose_the_root(workdir: LocalWorkdir) -> None:
    assert str(workdir.root) not in repr(workdir)


# --- S24: lossless text ---------------------------------------------------------------------------

LOSSY_TEXTS = [
    pytest.param("plain ascii", id="ascii"),
    pytest.param("北京贵都大酒店 · 地铁：菜市口 😀", id="cjk-emoji"),
    pytest.param("bad decode: \udcff\udc80 end", id="surrogateescape-bytes"),
    pytest.param("lone high \ud800 and lone low \udfff", id="lone-surrogates"),
    pytest.param("\ud83d\ude00 split pair", id="surrogate-pair-as-two-lone-code-points"),
    pytest.param("\ud800", id="only-a-surrogate"),
    pytest.param("", id="empty"),
    pytest.param("\x00\x01 binary-ish", id="control-characters"),
]


@pytest.mark.parametrize("text", LOSSY_TEXTS)
def test_s24_text_round_trips_losslessly(workdir: LocalWorkdir, text: str) -> None:
    stored = write_text(workdir, "outputs/large_tool_results/t.txt", text)
    assert read_text(workdir, stored) == text


def test_s24_valid_text_is_stored_as_plain_utf8(workdir: LocalWorkdir) -> None:
    text = "欢迎使用知识库 — résumé"
    write_text(workdir, "outputs/t.txt", text)
    assert (workdir.root / "outputs" / "t.txt").read_bytes() == text.encode("utf-8")


def test_s24_local_workdir_is_a_workdir(workdir: LocalWorkdir) -> None:
    assert isinstance(workdir, Workdir)
