"""Dependencies shared by the routers: the services and the authenticated user."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator

from ctxpress.app.server.db.models import Conversation, User
from ctxpress.app.server.errors import UnauthorizedError
from ctxpress.app.server.runtime.container import Services
from ctxpress.app.server.schemas import ErrorResponse
from ctxpress.app.server.usecases.auth import Caller

#: The largest row id both databases store (BIGINT): larger cursors are rejected with 422/400, never
#: passed on to the database (where they would fail with a 500).
MAX_ROW_ID = 2**63 - 1


def utc_instant(value: datetime) -> datetime:
    """An instant the database can compare: with its UTC offset, and within years 1-9999 in UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            "give the instant with its UTC offset, e.g. 2026-01-01T00:00:00Z "
            "(a date alone or a time without offset is ambiguous)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the instant is outside years 1-9999 once converted to UTC") from None


#: A date-time query parameter: naive, date-only or out-of-range values answer 422, never reach SQL.
UtcInstant = Annotated[datetime, AfterValidator(utc_instant)]

_bearer = HTTPBearer(auto_error=False, description="A token printed by `ctxpress users create NAME`.")


async def get_services(request: Request) -> Services:
    # `async`, like every dependency here: FastAPI runs a plain `def` in its thread pool.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


#: What every authenticated operation may answer besides its own statuses.
AUTHENTICATED_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No token, or not a valid one."},
    429: {
        "model": ErrorResponse,
        "description": "Too many failed authentications from this address; see Retry-After.",
    },
}


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def current_caller(
    request: Request,
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The request's bearer token, to be authenticated in the operation's first transaction."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise UnauthorizedError("send 'Authorization: Bearer <token>'")
    address = client_address(request)
    # Before the token is looked at: a held-back address learns nothing from any answer.
    await services.auth_throttle.check(address)
    return Caller(credentials.credentials, address, services.auth_throttle)


CallerDep = Annotated[Caller, Depends(current_caller)]


async def current_user(caller: CallerDep, services: ServicesDep) -> User:
    return await services.auth.user_of(caller)


UserDep = Annotated[User, Depends(current_user)]


async def owned_conversation(conversation_id: str, user: UserDep, services: ServicesDep) -> Conversation:
    return await services.conversations.get_owned(user, conversation_id)


ConversationDep = Annotated[Conversation, Depends(owned_conversation)]
