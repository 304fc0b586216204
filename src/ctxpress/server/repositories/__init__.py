"""Data access, one repository per aggregate. Each wraps an `AsyncSession`; the caller owns the transaction."""

from ctxpress.server.repositories.agents import AgentRepository
from ctxpress.server.repositories.conversations import ConversationRepository
from ctxpress.server.repositories.messages import MessageRepository
from ctxpress.server.repositories.run_events import RunEventRepository
from ctxpress.server.repositories.runs import RunRepository
from ctxpress.server.repositories.usage import UsageRepository
from ctxpress.server.repositories.users import UserRepository

__all__ = [
    "AgentRepository",
    "ConversationRepository",
    "MessageRepository",
    "RunEventRepository",
    "RunRepository",
    "UsageRepository",
    "UserRepository",
]
