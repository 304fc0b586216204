"""The per-conversation file area (S24, S25): where offloaded tool results and summarised history live.

The model only ever sees workdir-relative paths (`outputs/large_tool_results/…`). `LocalWorkdir`
keeps them on the local disk; other backends (object storage) implement the small `Workdir`
protocol.

Guarantees of `LocalWorkdir`:
- Paths are validated at the boundary: absolute paths, `..`, NUL bytes, empty or over-long names
  and symlinks that resolve outside the root are rejected with `WorkdirPathError`, whose message
  names the relative path only (never a host path).
- `skills/` is a public, read-only area: writes there raise `WorkdirPermissionError`.
- Writes are atomic: the bytes go to a temporary file in the same directory, are flushed to disk,
  then renamed over the target, so a crash leaves the old file or the new one, never half of one.
  The temporary file a crash leaves behind is never listed, read or overwritten by path (its
  `TEMP_PREFIX` names are reserved).
- Files are user data: directories are created 0700 and files 0600.
- Text that is not valid Unicode (lone surrogates, e.g. from a tool that decoded bytes badly) is
  stored losslessly: text is encoded as UTF-8 with the `surrogatepass` error handler, so a lone
  surrogate becomes its three-byte form and `read_text` gives back exactly the original string.
  Valid text is plain UTF-8, readable by any tool.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol, TypeVar, runtime_checkable

from ctxpress.errors import CtxpressError

#: Names of the temporary files of atomic writes: reserved, never listed, read or written by path.
TEMP_PREFIX = ".ctxpress-tmp-"
TEXT_ENCODING = "utf-8"
TEXT_ERRORS = "surrogatepass"
READ_ONLY_AREAS = ("skills",)
MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255
#: Control, format (bidi overrides, zero-width), line/paragraph separators and lone surrogates:
#: invisible or unencodable in a file name, and a way to disguise what a path says.
REJECTED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
#: Characters that look like a slash but that NFKC does not fold into one.
SLASH_LOOKALIKES = frozenset("\u2215\u2044\u29f8\u29f5\u29f9\ufe68\u2216\u244a")
DIR_MODE = 0o700
FILE_MODE = 0o600
_T = TypeVar("_T")


class WorkdirError(CtxpressError):
    """Base of every workdir failure; messages carry workdir-relative paths only."""


class WorkdirPathError(WorkdirError, ValueError):
    """The path is not acceptable (absolute, traversal, NUL, symlink escape, too long)."""


class WorkdirPermissionError(WorkdirError, PermissionError):
    """The path is in a read-only area such as `skills/`."""


class WorkdirWriteError(WorkdirError, OSError):
    """The bytes could not be stored (permissions, disk full, read-only file system)."""


class WorkdirNotFoundError(WorkdirError, FileNotFoundError):
    """No file at that workdir path."""


@dataclass(frozen=True)
class WorkdirFile:
    path: str
    size: int


def encode_text(text: str) -> bytes:
    """Lossless bytes for any Python string, lone surrogates included (see module docstring)."""
    return text.encode(TEXT_ENCODING, TEXT_ERRORS)


def decode_text(data: bytes) -> str:
    return data.decode(TEXT_ENCODING, TEXT_ERRORS)


@runtime_checkable
class Workdir(Protocol):
    """What compression needs from a conversation's file area. Paths are workdir-relative POSIX."""

    def write_bytes(self, path: str, data: bytes) -> str:
        """Atomically create or replace the file; returns the normalised relative path."""
        ...

    def read_bytes(self, path: str) -> bytes: ...

    def exists(self, path: str) -> bool: ...

    def list_files(self, prefix: str = "") -> list[WorkdirFile]: ...


def write_text(workdir: Workdir, path: str, text: str) -> str:
    return workdir.write_bytes(path, encode_text(text))


def read_text(workdir: Workdir, path: str) -> str:
    return decode_text(workdir.read_bytes(path))


def normalize_relative_path(path: str) -> str:
    """Validate an untrusted workdir path and return its canonical relative form (`a/b.txt`)."""
    if not isinstance(path, str) or not path.strip():
        raise WorkdirPathError("workdir path must be a non-empty string")
    if "\x00" in path:
        raise WorkdirPathError("workdir path must not contain NUL bytes")
    if len(path) > MAX_PATH_CHARS:
        raise WorkdirPathError(f"workdir path is longer than {MAX_PATH_CHARS} characters")
    # NFKC folds look-alikes such as the full-width solidus or "．．" into their ASCII forms, so a
    # traversal spelled with them is caught by the checks below instead of slipping through.
    folded = unicodedata.normalize("NFKC", path).replace("\\", "/")
    if folded.startswith("/") or PurePosixPath(folded).is_absolute() or _looks_like_drive(folded):
        raise WorkdirPathError("workdir paths are relative; absolute paths are not accepted")
    parts = [part for part in folded.split("/") if part not in ("", ".")]
    if not parts:
        raise WorkdirPathError("workdir path names no file")
    if any(part == ".." for part in parts):
        raise WorkdirPathError("workdir path must not contain '..'")
    for part in parts:
        if len(part.encode(TEXT_ENCODING, TEXT_ERRORS)) > MAX_NAME_BYTES:
            raise WorkdirPathError(f"a workdir path component is longer than {MAX_NAME_BYTES} bytes")
        if part.startswith(TEMP_PREFIX):
            # A crash mid-write leaves such a file behind, half-written: it must never be served.
            raise WorkdirPathError(f"workdir names starting with {TEMP_PREFIX!r} are reserved")
        if any(ch in SLASH_LOOKALIKES for ch in part):
            raise WorkdirPathError("workdir path must not contain look-alikes of '/'")
        if any(unicodedata.category(ch) in REJECTED_CATEGORIES for ch in part):
            raise WorkdirPathError(
                "workdir path must not contain control, format, separator or surrogate characters"
            )
    return "/".join(parts)


def _looks_like_drive(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isalpha()


class DryRunWorkdir:
    """A workdir that keeps nothing: L1 decides as if it wrote, so the view it would build can be
    measured without touching the conversation's files (the status panel's next-request figure).
    Paths are validated and normalised like a real workdir's; reads find nothing."""

    def write_bytes(self, path: str, data: bytes) -> str:
        return normalize_relative_path(path)

    def read_bytes(self, path: str) -> bytes:
        raise WorkdirNotFoundError(f"{path}: a dry run keeps no files")

    def exists(self, path: str) -> bool:
        return False

    def list_files(self, prefix: str = "") -> list[WorkdirFile]:
        return []


class LocalWorkdir:
    """A conversation's workdir on the local disk (see the module docstring for the guarantees)."""

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        """`durable=False` skips fsync (still atomic, not crash-durable): for replays and tests."""
        self._durable = durable
        root_path = Path(root)
        root_path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self._root = root_path.resolve()

    @property
    def root(self) -> Path:
        """The host directory. For the operator's own code only: never put it in model-visible text."""
        return self._root

    @property
    def cache_key(self) -> str:
        """Stable identity for caches of what is already stored here."""
        return f"local:{self._root}"

    def __repr__(self) -> str:
        return "LocalWorkdir(<root>)"

    def write_bytes(self, path: str, data: bytes) -> str:
        relative = normalize_relative_path(path)
        if relative.split("/", 1)[0] in READ_ONLY_AREAS:
            raise WorkdirPermissionError(f"{relative}: the skills area is read-only")
        target = self._root / relative
        try:
            self._make_parent_dirs(relative)
            self._ensure_inside(target.parent, relative)
            self._ensure_writable_area(target.parent, relative)
            if target.is_symlink():
                raise WorkdirPathError(f"{relative}: refusing to replace a symlink")
            self._atomic_write(target, data, self._durable)
        except WorkdirError:
            raise
        except OSError as exc:
            raise WorkdirWriteError(f"could not write {relative}: {_describe_os_error(exc)}") from None
        return relative

    def read_bytes(self, path: str) -> bytes:
        return self._read(path, Path.read_bytes)

    def file_size(self, path: str) -> int:
        """The size in bytes of the file at `path`, without reading it."""
        return self._read(path, lambda target: target.stat().st_size)

    def _read(self, path: str, read: Callable[[Path], _T]) -> _T:
        """`read` applied to the existing file at the validated `path`, errors without host paths."""
        relative = normalize_relative_path(path)
        target = self._root / relative
        self._ensure_inside(target, relative)
        try:
            if not target.is_file():
                raise WorkdirNotFoundError(f"{relative}: no such file in the workdir")
            return read(target)
        except WorkdirError:
            raise
        except OSError as exc:
            raise WorkdirError(f"could not read {relative}: {_describe_os_error(exc)}") from None

    def exists(self, path: str) -> bool:
        relative = normalize_relative_path(path)
        target = self._root / relative
        try:
            self._ensure_inside(target, relative)
        except WorkdirPathError:
            return False
        return target.is_file()

    def list_files(self, prefix: str = "") -> list[WorkdirFile]:
        start = self._root / normalize_relative_path(prefix) if prefix else self._root
        if prefix:
            self._ensure_inside(start, prefix)
        if not start.is_dir():
            return []
        return sorted(self._walk(start), key=lambda f: f.path)

    def _walk(self, start: Path) -> Iterator[WorkdirFile]:
        for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
            # Symlinked directories are not descended into: they may lead outside the root.
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                full = Path(dirpath, name)
                if name.startswith(TEMP_PREFIX) or full.is_symlink():
                    continue
                with contextlib.suppress(OSError):
                    yield WorkdirFile(full.relative_to(self._root).as_posix(), full.stat().st_size)

    def _make_parent_dirs(self, relative: str) -> None:
        current = self._root
        for part in relative.split("/")[:-1]:
            current = current / part
            if current.is_symlink():
                self._ensure_inside(current, relative)
            if not current.exists():
                current.mkdir(mode=DIR_MODE)

    def _ensure_writable_area(self, directory: Path, relative: str) -> None:
        """The read-only check on where the directory really is (a symlink may lead into skills/)."""
        resolved = Path(os.path.realpath(directory))
        if resolved == self._root:
            return
        if resolved.relative_to(self._root).parts[0] in READ_ONLY_AREAS:
            raise WorkdirPermissionError(f"{relative}: leads into the read-only skills area")

    def _ensure_inside(self, target: Path, relative: str) -> None:
        resolved = Path(os.path.realpath(target))
        if resolved != self._root and self._root not in resolved.parents:
            raise WorkdirPathError(f"{relative}: leads outside the workdir")

    @staticmethod
    def _atomic_write(target: Path, data: bytes, durable: bool) -> None:
        fd, temp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=target.parent)
        try:
            # Wrap the descriptor first, so every failure below still closes it.
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), FILE_MODE)
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            os.replace(temp_name, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)
            raise


def _describe_os_error(exc: OSError) -> str:
    """The reason without the host path that OSError's str() would include."""
    return exc.strerror or type(exc).__name__


def is_owner_only(path: Path) -> bool:
    """True when group and others have no access (used by tests and `ctxpress doctor`)."""
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
