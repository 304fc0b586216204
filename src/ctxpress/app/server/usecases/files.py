"""Read-only access to a conversation's workdir for its owner (S24, S25)."""

from __future__ import annotations

from ctxpress.app.server.errors import InvalidPathError, NotFoundError, PayloadTooLargeError
from ctxpress.app.server.runtime.workdirs import ConversationWorkdirs
from ctxpress.workdir import WorkdirFile, WorkdirNotFoundError, WorkdirPathError

MAX_FILE_BYTES = 50 * 1024 * 1024


class FileService:
    def __init__(self, workdirs: ConversationWorkdirs) -> None:
        self.workdirs = workdirs

    def list(self, conversation_id: str, prefix: str = "") -> list[WorkdirFile]:
        try:
            return self.workdirs.for_conversation(conversation_id).list_files(prefix)
        except WorkdirPathError as exc:
            raise InvalidPathError(str(exc)) from None

    def read(self, conversation_id: str, path: str) -> bytes:
        workdir = self.workdirs.for_conversation(conversation_id)
        try:
            # The size first: a file over the limit is refused without reading it into memory.
            if workdir.file_size(path) > MAX_FILE_BYTES:
                raise PayloadTooLargeError(f"the file is larger than {MAX_FILE_BYTES} bytes")
            return workdir.read_bytes(path)
        except WorkdirPathError as exc:
            raise InvalidPathError(str(exc)) from None
        except WorkdirNotFoundError:
            raise NotFoundError("no such file in the conversation's workdir") from None
