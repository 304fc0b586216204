"""A workdir that reads through to the conversation's files and keeps writes in memory.

`ctxpress doctor` builds the L1 view to measure it; L1 writes offloaded results, and the doctor must
change nothing, so its writes land here.
"""

from __future__ import annotations

from ctxpress.workdir import Workdir, WorkdirFile, WorkdirNotFoundError, normalize_relative_path


class ReadThroughWorkdir:
    def __init__(self, base: Workdir | None) -> None:
        self._base = base
        self.written: dict[str, bytes] = {}

    def write_bytes(self, path: str, data: bytes) -> str:
        relative = normalize_relative_path(path)
        self.written[relative] = data
        return relative

    def read_bytes(self, path: str) -> bytes:
        relative = normalize_relative_path(path)
        if relative in self.written:
            return self.written[relative]
        if self._base is None:
            raise WorkdirNotFoundError(f"{relative}: no such file in the workdir")
        return self._base.read_bytes(relative)

    def exists(self, path: str) -> bool:
        relative = normalize_relative_path(path)
        return relative in self.written or (self._base is not None and self._base.exists(relative))

    def list_files(self, prefix: str = "") -> list[WorkdirFile]:
        listed = {item.path: item for item in (self._base.list_files(prefix) if self._base else [])}
        for path, data in self.written.items():
            if path.startswith(prefix):
                listed[path] = WorkdirFile(path, len(data))
        return sorted(listed.values(), key=lambda item: item.path)
