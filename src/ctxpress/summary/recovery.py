"""Reading summarised history back in full: the history file plus the offloaded results it names."""

from __future__ import annotations

import hashlib

from langchain_core.messages import BaseMessage

from ctxpress.compaction.content import content_text, with_text
from ctxpress.compaction.markers import parse_offload_reference
from ctxpress.errors import CtxpressError
from ctxpress.summary.history import read_history
from ctxpress.workdir import Workdir, WorkdirError, decode_text


class RecoveryError(CtxpressError):
    """A referenced file is missing or does not match its recorded hash."""


def recover_messages(workdir: Workdir, history_path: str) -> list[BaseMessage]:
    """The summarised messages with every offloaded tool result restored to its full text."""
    _header, messages = read_history(workdir, history_path)
    recovered: list[BaseMessage] = []
    for message in messages:
        reference = parse_offload_reference(content_text(message.content))
        if reference is None:
            recovered.append(message)
            continue
        path, expected_sha = reference.path, reference.sha256
        try:
            data = workdir.read_bytes(path)
        except WorkdirError as exc:
            raise RecoveryError(f"{history_path} references {path}, which cannot be read: {exc}") from None
        if hashlib.sha256(data).hexdigest() != expected_sha:
            raise RecoveryError(f"{path} does not match the sha256 recorded in {history_path}")
        recovered.append(
            message.model_copy(update={"content": with_text(message.content, decode_text(data))})
        )
    return recovered
