"""Data access, one repository per aggregate. Each wraps an `AsyncSession`; the caller owns the transaction."""

from ctxpress.app.server.repositories.agents import AgentRepository
from ctxpress.app.server.repositories.conversations import ConversationRepository
from ctxpress.app.server.repositories.messages import MessageRepository
from ctxpress.app.server.repositories.run_events import RunEventRepository
from ctxpress.app.server.repositories.runs import RunRepository
from ctxpress.app.server.repositories.usage import UsageRepository
from ctxpress.app.server.repositories.users import UserRepository

__all__ = [
    "AgentRepository",
    "ConversationRepository",
    "MessageRepository",
    "RunEventRepository",
    "RunRepository",
    "UsageRepository",
    "UserRepository",
]
