"""Chat models that ship with ctxpress (no network, no weights)."""

from ctxpress.app.models.agent_policy import OfflineAgentPolicy
from ctxpress.app.models.builtin import (
    DEFAULT_CONTEXT_WINDOW,
    BuiltinChatModel,
    is_summary_call,
    replay_summary_model,
)
from ctxpress.app.models.reply import (
    BUILTIN_LABEL,
    BUILTIN_MODEL_NAME,
    BUILTIN_NOTICE,
    BUILTIN_PROVIDER,
    BuiltinReply,
    ReplyPolicy,
)

__all__ = [
    "BUILTIN_LABEL",
    "BUILTIN_MODEL_NAME",
    "BUILTIN_NOTICE",
    "BUILTIN_PROVIDER",
    "DEFAULT_CONTEXT_WINDOW",
    "BuiltinChatModel",
    "BuiltinReply",
    "OfflineAgentPolicy",
    "ReplyPolicy",
    "is_summary_call",
    "replay_summary_model",
]
