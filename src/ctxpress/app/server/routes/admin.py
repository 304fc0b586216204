"""Administration of API tokens (administrators only; others get 403):

    GET  /api/admin/tokens?user=NAME          the tokens (never the tokens themselves), oldest first
    POST /api/admin/users/{name}/tokens       a new token for a user, optionally expiring
    POST /api/admin/tokens/{token_id}/revoke  revoke a token; it stops working at once everywhere

The same as `ctxpress users tokens | token | revoke`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, status
from pydantic import BaseModel, ConfigDict, Field

from ctxpress.app.server.db.models import User
from ctxpress.app.server.errors import ForbiddenError
from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, ServicesDep, UserDep
from ctxpress.app.server.schemas import ErrorResponse, RequestBody
from ctxpress.app.server.usecases.auth import IssuedToken

#: Ten years: longer than any deployment should trust one secret.
MAX_TOKEN_LIFETIME_SECONDS = 10 * 365 * 24 * 3600


async def require_admin(user: UserDep) -> User:
    if not user.is_admin:
        raise ForbiddenError("only administrators manage tokens")
    return user


AdminDep = Annotated[User, Depends(require_admin)]

router = APIRouter(
    prefix="/api/admin",
    tags=["admin"],
    responses={**AUTHENTICATED_RESPONSES, 403: {"model": ErrorResponse}},
)


class TokenOut(BaseModel):
    """A `TokenInfo` (its fields and its `status`)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    user: str
    label: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    status: Literal["active", "revoked", "expired"]


class TokenList(BaseModel):
    items: list[TokenOut]


class IssueTokenRequest(RequestBody):
    label: str = Field(default="", max_length=64)
    expires_in_seconds: int | None = Field(
        default=None, ge=1, le=MAX_TOKEN_LIFETIME_SECONDS, description="Default: never expires."
    )


class IssuedTokenOut(BaseModel):
    #: Shown only in this answer.
    token: str
    id: str
    user: str
    expires_at: datetime | None

    @classmethod
    def of(cls, issued: IssuedToken) -> IssuedTokenOut:
        return cls(
            token=issued.token, id=issued.token_id, user=issued.user.name, expires_at=issued.expires_at
        )


@router.get("/tokens", response_model=TokenList, responses={404: {"model": ErrorResponse}})
async def list_tokens(
    admin: AdminDep,
    services: ServicesDep,
    user: Annotated[str | None, Query(max_length=64, description="Only this user's tokens")] = None,
) -> TokenList:
    return TokenList(items=[TokenOut.model_validate(info) for info in await services.auth.list_tokens(user)])


@router.post(
    "/users/{name}/tokens",
    status_code=status.HTTP_201_CREATED,
    response_model=IssuedTokenOut,
    responses={404: {"model": ErrorResponse}, 413: {"model": ErrorResponse}},
)
async def issue_token(
    name: str, body: IssueTokenRequest, admin: AdminDep, services: ServicesDep
) -> IssuedTokenOut:
    expires_in = timedelta(seconds=body.expires_in_seconds) if body.expires_in_seconds else None
    issued = await services.auth.issue_token(name, label=body.label, expires_in=expires_in)
    return IssuedTokenOut.of(issued)


@router.post("/tokens/{token_id}/revoke", response_model=TokenOut, responses={404: {"model": ErrorResponse}})
async def revoke_token(token_id: str, admin: AdminDep, services: ServicesDep) -> TokenOut:
    return TokenOut.model_validate(await services.auth.revoke_token(token_id))
