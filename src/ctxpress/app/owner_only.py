"""Data at rest readable by its owner only: the data directory (0700) and the SQLite files (0600).

SQLite creates a database with the process's umask (usually 0644) and gives its `-wal`, `-shm`
and `-journal` files the database file's own mode. So the database file is created here, 0600,
before SQLite opens it, and the files SQLite adds next to it follow. Files and directories an
earlier version left group- or world-readable are tightened; when that is impossible (another
owner, an immutable or read-only directory) the service refuses to start and says what to run.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
#: The files SQLite keeps beside a database (write-ahead log, its index, the rollback journal).
SQLITE_COMPANIONS: Final = ("-wal", "-shm", "-journal")


class NotOwnerOnlyError(RuntimeError):
    """A data file or directory is readable by others and cannot be restricted to its owner."""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _restrict(path: Path, mode: int) -> None:
    if _mode(path) & 0o077 == 0:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise NotOwnerOnlyError(
            f"{path} can be read by other users ({oct(_mode(path))}) and could not be restricted to its "
            f"owner ({exc.strerror or type(exc).__name__}); as its owner run: chmod {oct(mode)[2:]} '{path}'"
        ) from None


def owner_only_dir(path: Path) -> None:
    """Create `path` 0700 (and missing parents), or restrict an existing one to 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _restrict(path, DIR_MODE)


def owner_only_file(path: Path) -> None:
    """Create `path` empty and 0600 when missing, or restrict an existing one to 0600."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    _restrict(path, FILE_MODE)


def owner_only_sqlite(database: Path) -> None:
    """The database file 0600 before SQLite opens it, and any companion file it left earlier.

    (An empty file is what SQLite would create itself: it becomes a new database on first use.)
    """
    owner_only_file(database)
    for suffix in SQLITE_COMPANIONS:
        companion = database.with_name(database.name + suffix)
        if companion.exists():
            _restrict(companion, FILE_MODE)
