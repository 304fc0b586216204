"""S3, S15: the `_summarization_event` checkpoint key and the effective messages it implies."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import is_
from typing import Any, NotRequired, TypedDict

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage

logger = logging.getLogger("ctxpress.summary")

EVENT_KEY = "_summarization_event"
SUMMARY_MARKER = "[ctxpress:summary]"
SUMMARY_SOURCE = "ctxpress_summary"


class SummarizationEvent(TypedDict):
    """What the checkpoint keeps about the current summary.

    `cutoff_index` is cumulative: the position in the full state's message list of the first
    message *not* summarised. `first_kept_id` lets a later request detect a stale event (the
    message list was rewritten under it).
    """

    cutoff_index: int
    summary_message: AnyMessage
    file_path: str | None
    first_kept_id: NotRequired[str | None]
    summary_count: NotRequired[int]
    #: The quoted current question, carried until a newer user message is in view (summary/carried.py).
    question_section: NotRequired[str | None]
    #: Every earlier history file and summarised offload file of the thread, oldest first.
    earlier_files: NotRequired[list[str]]


def summary_message_text(
    summary: str, file_path: str | None, sections: Sequence[str] = (), conversation_file: str | None = None
) -> str:
    """The summary message: marker, where the full text is, the summary, then `sections`.

    Where: this summary's history file (the event's `file_path`, S15) and, when there is one, the
    thread's conversation file (every earlier message, whole: one path for all of them)."""
    if conversation_file and file_path:
        where = (
            f"The summarised messages are in the workdir at {file_path}; every earlier message is in "
            f"full at {conversation_file}."
        )
    elif conversation_file:
        where = f"Every earlier message is in full in the workdir at {conversation_file}."
    elif file_path:
        where = f"The full text of the summarised messages is in the workdir at {file_path}."
    else:
        where = "The full text of the summarised messages could not be saved to the workdir."
    return "\n\n".join([f"{SUMMARY_MARKER} Summary of the earlier conversation. {where}", summary, *sections])


def make_summary_message(
    summary: str,
    file_path: str | None,
    sequence: int,
    sections: Sequence[str] = (),
    conversation_file: str | None = None,
) -> HumanMessage:
    return HumanMessage(
        content=summary_message_text(summary, file_path, sections, conversation_file),
        id=f"ctxpress-summary-{sequence}",
        additional_kwargs={"lc_source": SUMMARY_SOURCE},
    )


def is_summary_message(message: BaseMessage) -> bool:
    return message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE or (
        isinstance(message.content, str) and message.content.startswith(SUMMARY_MARKER)
    )


@dataclass(frozen=True)
class EffectiveMessages:
    """The messages a request starts from: `[summary, *messages[cutoff:]]`, or all of them.

    `messages` may come from a request another middleware already shortened; cutoffs are always
    positions in the full state (S3), found through `state_positions` (message id → state index).
    """

    messages: list[BaseMessage]
    event: SummarizationEvent | None
    cutoff_index: int  # where the raw part starts in the full state (0 without an event)
    #: The full state's messages, when the request's list is another list (it may be shortened).
    state_messages: Sequence[BaseMessage] | None = None

    @cached_property
    def state_positions(self) -> Mapping[str, int] | None:
        """Message id → full-state index; built on first use (a cutoff), not on every request."""
        if self.state_messages is None:
            return None
        return {message.id: index for index, message in enumerate(self.state_messages) if message.id}

    @property
    def has_summary(self) -> bool:
        return self.event is not None

    def to_global(self, local_cutoff: int) -> int:
        """Convert a cutoff within `messages` to a position in the full state (S15)."""
        if self.state_positions is not None and local_cutoff < len(self.messages):
            first_kept = self.messages[local_cutoff].id
            if first_kept is not None and first_kept in self.state_positions:
                return self.state_positions[first_kept]
        if self.event is None:
            return local_cutoff
        return self.cutoff_index + local_cutoff - 1


def _valid_event(event: Any) -> bool:
    return (
        isinstance(event, dict)
        and isinstance(event.get("cutoff_index"), int)
        and isinstance(event.get("summary_message"), BaseMessage)
    )


def resolve_cutoff(
    event: SummarizationEvent, messages: Sequence[BaseMessage], *, shortened: bool = False
) -> int | None:
    """Where in `messages` the event's kept part starts; None when the event is stale.

    A stale event (ids moved, out of range, or nothing left after the cutoff) is never allowed to
    produce a "summary only" request; the caller rebuilds from the full messages instead. In a
    list another middleware `shortened`, the first kept message is found by its id, as expected.
    """
    cutoff = event["cutoff_index"]
    first_kept = event.get("first_kept_id")
    if first_kept is not None:
        if not shortened and 0 <= cutoff < len(messages) and messages[cutoff].id == first_kept:
            return cutoff
        for index, message in enumerate(messages):
            if message.id == first_kept:
                if not shortened:
                    logger.warning("summary cutoff moved from %d to %d; using the message id", cutoff, index)
                return index
        return None
    if 0 < cutoff < len(messages):
        return cutoff
    return None


def _is_shortened(messages: Sequence[BaseMessage], state_messages: Sequence[BaseMessage]) -> bool:
    """Whether the request's `messages` are not the state's as they are (other ids, or fewer)."""
    if len(messages) != len(state_messages):
        return True
    if all(map(is_, messages, state_messages)):  # the usual case, the same objects: checked in C
        return False
    return any(a.id != b.id for a, b in zip(messages, state_messages, strict=True))


def effective_messages(
    messages: Sequence[BaseMessage],
    event: Any,
    state_messages: Sequence[BaseMessage] | None = None,
) -> EffectiveMessages:
    """The effective messages of a request `messages`; `state_messages` when it may be shortened."""
    if state_messages is messages:
        state_messages = None
    shortened = state_messages is not None and _is_shortened(messages, state_messages)
    if event is None:
        return EffectiveMessages(list(messages), None, 0, state_messages)
    from ctxpress.summary.adoption import adopt_event  # adoption builds on this module's names

    if not _valid_event(event):
        logger.warning("ignoring a malformed _summarization_event; using the full message list")
        return EffectiveMessages(list(messages), None, 0, state_messages)
    cutoff = resolve_cutoff(event, messages, shortened=shortened)
    if cutoff is None:
        logger.warning(
            "ignoring a stale _summarization_event (cutoff %s of %d messages); using the full list",
            event.get("cutoff_index"),
            len(messages),
        )
        return EffectiveMessages(list(messages), None, 0, state_messages)
    start = event["cutoff_index"] if shortened else cutoff
    event = adopt_event(event)  # another summariser's event, left in the state before a switch
    return EffectiveMessages([event["summary_message"], *messages[cutoff:]], event, start, state_messages)
