"""Users and bearer tokens. Tokens are shown once, stored as SHA-256 digests and never logged."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError

from ctxpress.app.server.db.engine import Database
from ctxpress.app.server.db.models import User
from ctxpress.app.server.errors import BadRequestError, UserExistsError
from ctxpress.app.server.repositories.users import UserRepository

TOKEN_PREFIX = "cxp_"
ADMIN_USER_NAME = "admin"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


@dataclass(frozen=True)
class IssuedToken:
    user: User
    #: The only time the token exists in clear text.
    token: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


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
                await users.add_token(user, hash_token(token), label="created with the user")
                await session.commit()
            except IntegrityError:
                raise UserExistsError(f"a user named {name!r} already exists") from None
        return IssuedToken(user, token)

    async def issue_token(self, name: str, *, label: str = "") -> IssuedToken:
        async with self.database.session() as session:
            users = UserRepository(session)
            user = await users.by_name(name)
            if user is None:
                raise BadRequestError(f"no user named {name!r}")
            token = new_token()
            await users.add_token(user, hash_token(token), label=label[:64])
            await session.commit()
        return IssuedToken(user, token)

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
        if not token.startswith(TOKEN_PREFIX):
            return None
        async with self.database.session() as session:
            return await UserRepository(session).by_token_digest(hash_token(token))

    async def list_users(self) -> list[User]:
        async with self.database.session() as session:
            return await UserRepository(session).list()
