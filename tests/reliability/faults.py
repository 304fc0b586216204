"""File-system faults for one directory of a workdir: permission denied, disk full, read-only.

Each fault comes in two forms:

- `real`: the kernel produces the error. Root ignores permission bits, so "permission denied" is
  the immutable attribute (`chattr +i`, EPERM); "disk full" is a small tmpfs mounted over the
  directory and filled up (ENOSPC part-way through the write); "read-only" is a read-only tmpfs (EROFS). Needs
  root and `mount`/`chattr`; skipped with the reason where the machine refuses them.
- `injected`: the same errno raised by the very system calls `LocalWorkdir` makes, for paths under
  the directory only (`os.open` for EACCES/EROFS at create time, `os.fsync` for ENOSPC after the
  bytes were written), so it runs anywhere and exercises the same clean-up code.

`workdir_problems()` is the oracle "no file is left half-written": no temporary file, every large
tool result matches the hash in its name, every history file parses whole and matches the digest in
its name.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from ctxpress.summary.history import is_conversation_file

FaultKind = Literal["permission", "disk_full", "read_only"]
FAULT_KINDS: tuple[FaultKind, ...] = ("permission", "disk_full", "read_only")
TEMP_PREFIX = ".ctxpress-tmp-"
HISTORY_DIR = "outputs/conversation_history"
LARGE_DIR = "outputs/large_tool_results"
#: The size of the small file system that is then filled up.
TINY_FS_BYTES = 64 * 1024
#: The file that fills the small file system; not part of the workdir's content.
FILLER_NAME = ".fault-filler"

_ERRNO_AT_CREATE = {"permission": errno.EACCES, "read_only": errno.EROFS}


@dataclass
class FaultReport:
    kind: FaultKind
    how: str
    #: Operations the fault refused (injected form only; the real form cannot count).
    refused: int = 0


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)


def real_faults_available() -> str | None:
    """None when real faults can be made here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "real file-system faults need root (mount, chattr)"
    for tool in ("mount", "umount", "chattr"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@contextlib.contextmanager
def real_fault(directory: Path, kind: FaultKind) -> Iterator[FaultReport]:
    reason = real_faults_available()
    if reason:
        pytest.skip(reason)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if kind == "permission":
        done = _run(["chattr", "+i", str(directory)])
        if done.returncode != 0:
            pytest.skip(f"chattr +i is refused here: {done.stderr.strip()}")
        try:
            yield FaultReport(kind, "real")
        finally:
            _run(["chattr", "-i", str(directory)])
        return
    options = f"size={TINY_FS_BYTES},mode=0700" if kind == "disk_full" else "ro,size=64k,mode=0700"
    done = _run(["mount", "-t", "tmpfs", "-o", options, "ctxpress-fault", str(directory)])
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is refused here: {done.stderr.strip()}")
    try:
        if kind == "disk_full":
            _fill(directory)
        yield FaultReport(kind, "real")
    finally:
        result = _run(["umount", str(directory)])
        if result.returncode != 0:  # busy: detach lazily so the test never leaves a mount behind
            _run(["umount", "-l", str(directory)])


def _fill(directory: Path) -> None:
    """Use up every byte of the file system, as a full disk does (small files then fail too)."""
    with open(directory / FILLER_NAME, "wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 512)


@contextlib.contextmanager
def injected_fault(directory: Path, kind: FaultKind) -> Iterator[FaultReport]:
    """The errno of `kind` from the system calls `LocalWorkdir` makes, under `directory` only."""
    report = FaultReport(kind, "injected")
    prefix = str(directory.resolve()) + os.sep
    real_open = os.open
    real_fsync = os.fsync
    faulty_fds: set[int] = set()

    def under(path: Any) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(prefix)
        except (TypeError, ValueError):
            return False

    def fake_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        creating = bool(flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR))
        if dir_fd is None and creating and under(path):
            if kind in _ERRNO_AT_CREATE:
                report.refused += 1
                code = _ERRNO_AT_CREATE[kind]
                raise OSError(code, os.strerror(code), os.fsdecode(path))
            fd = real_open(path, flags, mode)
            faulty_fds.add(fd)
            return fd
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def fake_fsync(fd: Any) -> None:
        number = fd if isinstance(fd, int) else fd.fileno()
        if number in faulty_fds:
            faulty_fds.discard(number)
            report.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "open", fake_open)
        patch.setattr(os, "fsync", fake_fsync)
        yield report


FaultFactory = Callable[[Path, FaultKind], contextlib.AbstractContextManager[FaultReport]]
FAULT_FORMS: dict[str, FaultFactory] = {"real": real_fault, "injected": injected_fault}


# --- the oracle: nothing half-written ---------------------------------------------------------------


def workdir_problems(root: Path, *, allow_temp: bool = False) -> list[str]:
    """Everything under `root` that is half-written or inconsistent (empty when all is whole).

    `allow_temp`: a process killed mid-write leaves its temporary file (hidden, never read); the
    history and result files themselves must still be whole or absent."""
    problems: list[str] = []
    if not root.exists():
        return problems
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.is_file() or path.name == FILLER_NAME:
            continue
        if path.name.startswith(TEMP_PREFIX):
            if not allow_temp:
                problems.append(f"temporary file left behind: {relative}")
            continue
        data = path.read_bytes()
        if relative.startswith(LARGE_DIR + "/"):
            digest = hashlib.sha256(data).hexdigest()
            if not path.stem.endswith(digest[:16]):
                problems.append(f"large tool result does not match the hash in its name: {relative}")
        elif relative.startswith(HISTORY_DIR + "/"):
            problems.extend(_history_problems(relative, data))
    return problems


def _history_problems(relative: str, data: bytes) -> list[str]:
    # The name's digest covers the message lines (older files: the whole file). The conversation
    # file is rewritten by each summary and has no digest: it must be whole like the others.
    body = data.split(b"\n", 1)[1] if b"\n" in data else b""
    digests = {hashlib.sha256(part).hexdigest()[:12] for part in (data, body)}
    if not is_conversation_file(relative) and not any(
        relative.endswith(f"-{digest}.jsonl") for digest in digests
    ):
        return [f"history file does not match the digest in its name: {relative}"]
    lines = data.decode("utf-8", "surrogatepass").splitlines()
    try:
        header = json.loads(lines[0])
        body = [json.loads(line) for line in lines[1:] if line]
    except (IndexError, json.JSONDecodeError):
        return [f"history file is not whole JSON Lines: {relative}"]
    if header.get("message_count") != len(body):
        return [f"history file holds {len(body)} of {header.get('message_count')} messages: {relative}"]
    return []


def files_outside(root: Path, before: set[Path]) -> set[Path]:
    """Files under `root` that were not in `before` (what an escape would have created)."""
    return {path for path in root.rglob("*") if path.is_file()} - before
