"""Importing recorded agent conversations (chat logs, benchmark trajectories) as LangChain messages.

Every loaded :class:`Conversation` is provider-valid, so it can be replayed through the compression
middleware or sent to a model as is. One module per format; ``discover`` sniffs and walks folders.
"""

from ctxpress.tools.traces.discover import TRACE_FORMATS, iter_conversations, load_trace, sniff_format
from ctxpress.tools.traces.model import (
    NO_RESULT_PLACEHOLDER,
    RAW_ARGUMENTS_KEY,
    Conversation,
    TraceFormatError,
    UnknownTraceFormatError,
)
from ctxpress.tools.traces.openai_format import conversation_to_openai, load_openai_chat, messages_to_openai

__all__ = [
    "NO_RESULT_PLACEHOLDER",
    "RAW_ARGUMENTS_KEY",
    "TRACE_FORMATS",
    "Conversation",
    "TraceFormatError",
    "UnknownTraceFormatError",
    "conversation_to_openai",
    "iter_conversations",
    "load_openai_chat",
    "load_trace",
    "messages_to_openai",
    "sniff_format",
]
