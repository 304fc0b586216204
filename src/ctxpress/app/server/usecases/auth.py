"""Users and bearer tokens. Tokens are shown once, stored as SHA-256 digests and never logged.

Tokens can be listed (never shown again: id, user, label, dates, status), revoked and given an
expiry. Authentication reads the token's row on every request, so a revocation or an expiry holds
at once on every service process sharing the database.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import ApiToken, User, utcnow
from ctxpress.app.server.errors import (
    BadRequestError,
    TokenNotFoundError,
    UnauthorizedError,
    UnknownUserError,
    UserExistsError,
)
from ctxpress.app.server.repositories.users import UserRepository
from ctxpress.app.server.runtime.auth_throttle import AuthThrottle

TOKEN_PREFIX = "cxp_"
ADMIN_USER_NAME = "admin"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


TokenStatus = Literal["active", "revoked", "expired"]


@dataclass(frozen=True)
class IssuedToken:
    user: User
    #: The only time the token exists in clear text.
    token: str
    #: The token's id: what `ctxpress users revoke` and the admin API take.
    token_id: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True)
class TokenInfo:
    """What is known of a stored token (never the token itself)."""

    id: str
    user: str
    label: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @property
    def status(self) -> TokenStatus:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= utcnow():
            return "expired"
        return "active"

    @classmethod
    def of(cls, token: ApiToken, user_name: str) -> TokenInfo:
        return cls(
            id=token.id,
            user=user_name,
            label=token.label,
            created_at=token.created_at,
            expires_at=token.expires_at,
            revoked_at=token.revoked_at,
        )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_digest(token: str) -> str | None:
    """The digest a token of ours is stored under; None for a string that is not one."""
    return hash_token(token) if token.startswith(TOKEN_PREFIX) else None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def user_of_token(session: AsyncSession, token: str) -> User | None:
    """The active token's user (a revoked or expired token has none), read in `session`."""
    digest = token_digest(token)
    return None if digest is None else await UserRepository(session).by_token_digest(digest)


@dataclass(frozen=True)
class Caller:
    """A request's bearer token, not yet looked up: the operations a client sends most (a message,
    a run's stream) authenticate it in their own first transaction, one transaction less than a
    lookup of its own. The address was already let through the throttle."""

    token: str
    address: str
    throttle: AuthThrottle

    @property
    def token_sha256(self) -> str | None:
        """The digest the caller's token is stored under (None: not one of ours)."""
        return token_digest(self.token)

    async def user_in(self, session: AsyncSession) -> User:
        """The token's user, read in `session`; 401 (and a failure counted) when there is none."""
        user = await user_of_token(session, self.token)
        if user is None:
            await self.throttle.record_failure(self.address)
            raise UnauthorizedError("the token is not valid")
        # A value read once: the rest of the operation may roll the session back (which would
        # expire a user still attached to it), and reads it without another query.
        session.expunge(user)
        return user


class AuthService:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def create_user(self, name: str, *, is_admin: bool = False) -> IssuedToken:
        if not _USER_NAME.fullmatch(name):
            raise BadRequestError("user names use letters, digits and . _ @ - (at most 64 characters)")
        async with self.database.session() as session:
            users = UserRepository(session)
            if await users.by_name(name) is not None:
                raise UserExistsError(f"a user named {name!r} already exists")
            try:
                user = await users.add(name, is_admin=is_admin)
                token = new_token()
                stored = await users.add_token(user, hash_token(token), label="created with the user")
                await session.commit()
            except IntegrityError:
                raise UserExistsError(f"a user named {name!r} already exists") from None
        return IssuedToken(user, token, stored.id)

    async def issue_token(
        self, name: str, *, label: str = "", expires_in: timedelta | None = None
    ) -> IssuedToken:
        """A new token for user `name` (older tokens stay valid), expiring after `expires_in` if given."""
        async with self.database.session() as session:
            users = UserRepository(session)
            user = await users.by_name(name)
            if user is None:
                raise UnknownUserError(f"no user named {name!r}")
            token = new_token()
            expires_at = utcnow() + expires_in if expires_in is not None else None
            stored = await users.add_token(user, hash_token(token), label=label[:64], expires_at=expires_at)
            await session.commit()
        return IssuedToken(user, token, stored.id, expires_at)

    async def list_tokens(self, user_name: str | None = None) -> list[TokenInfo]:
        """Every token (of one user when `user_name` is given), oldest first."""
        async with self.database.session() as session:
            users = UserRepository(session)
            user_id = None
            if user_name is not None:
                user = await users.by_name(user_name)
                if user is None:
                    raise UnknownUserError(f"no user named {user_name!r}")
                user_id = user.id
            return [TokenInfo.of(token, name) for token, name in await users.tokens(user_id)]

    async def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token by its id (revoking it again changes nothing)."""
        async with self.database.session() as session:
            found = await UserRepository(session).token(token_id)
            if found is None:
                raise TokenNotFoundError("no token with that id")
            token, user_name = found
            if token.revoked_at is None:
                token.revoked_at = utcnow()
                await session.commit()
            return TokenInfo.of(token, user_name)

    async def ensure_admin(self) -> IssuedToken | None:
        """On the very first start (no users at all) create `admin`; its token is returned once."""
        async with self.database.session() as session:
            if await UserRepository(session).count() > 0:
                return None
        try:
            return await self.create_user(ADMIN_USER_NAME, is_admin=True)
        except UserExistsError:
            return None  # another process created it at the same moment

    async def authenticate(self, token: str) -> User | None:
        async with self.database.session() as session:
            return await user_of_token(session, token)

    async def user_of(self, caller: Caller) -> User:
        """The caller's user, in a transaction of its own (operations without one to share); 401
        when the token is not valid."""
        async with self.database.session() as session:
            return await caller.user_in(session)

    async def list_users(self) -> list[User]:
        async with self.database.session() as session:
            return await UserRepository(session).list()
