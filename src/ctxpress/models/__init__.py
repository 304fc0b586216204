"""Chat models that ship with ctxpress (no network, no weights)."""

from ctxpress.models.builtin import (
    BUILTIN_LABEL,
    BUILTIN_MODEL_NAME,
    BUILTIN_NOTICE,
    BUILTIN_PROVIDER,
    BuiltinChatModel,
    BuiltinReply,
    EchoPolicy,
    ReplyPolicy,
)

__all__ = [
    "BUILTIN_LABEL",
    "BUILTIN_MODEL_NAME",
    "BUILTIN_NOTICE",
    "BUILTIN_PROVIDER",
    "BuiltinChatModel",
    "BuiltinReply",
    "EchoPolicy",
    "ReplyPolicy",
]
