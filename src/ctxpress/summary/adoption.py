"""S3: a `_summarization_event` that another summariser left in a thread's state is adopted.

A thread summarised by DeepAgents' `SummarizationMiddleware` (or one modelled on it) before the
agent moved to ctxpress holds an event whose summary message ctxpress did not write. Its cutoff
means what ctxpress's does (a position in the full state), so the thread continues from it: the
summary is carried, its text as the model saw it before the move, as a ctxpress summary message
until ctxpress writes the next one.
Two summarisers *active* in one agent are still refused (`conflict.py`).
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage

from ctxpress.compaction.content import content_text
from ctxpress.summary.event import SUMMARY_SOURCE, SummarizationEvent, is_summary_message

ADOPTED_ID_PREFIX = "ctxpress-adopted-"


def is_foreign_summary(message: BaseMessage) -> bool:
    return not is_summary_message(message)


def adopted_summary_message(foreign: BaseMessage) -> HumanMessage:
    """`foreign`'s summary as a ctxpress summary message: the same text (it names its own history
    file), ctxpress's source tag, and the same id each time it is adopted."""
    return HumanMessage(
        content=content_text(foreign.content),
        id=f"{ADOPTED_ID_PREFIX}{foreign.id or 'summary'}",
        additional_kwargs={"lc_source": SUMMARY_SOURCE},
    )


def adopt_event(event: SummarizationEvent) -> SummarizationEvent:
    """The event as ctxpress reads it: unchanged when ctxpress wrote it, else its summary adopted."""
    summary = event["summary_message"]
    if not is_foreign_summary(summary):
        return event
    file_path = event.get("file_path")
    return {
        **event,
        "summary_message": adopted_summary_message(summary),
        "file_path": file_path if isinstance(file_path, str) else None,
    }
