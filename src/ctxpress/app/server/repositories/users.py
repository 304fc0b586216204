from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Final

from sqlalchemy import and_, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import ApiToken, User, is_public_id, utcnow

#: `ApiToken` is the token whose digest is the parameter `token_sha256`, neither revoked nor expired
#: at the parameter `now` (`active_token_parameters`).
ACTIVE_TOKEN: Final = and_(
    ApiToken.token_sha256 == bindparam("token_sha256"),
    ApiToken.revoked_at.is_(None),
    or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > bindparam("now")),
)

#: The user of an active token (a request's authentication): built once, as every request reads it.
_USER_OF_ACTIVE_TOKEN: Final = select(User).join(ApiToken, ApiToken.user_id == User.id).where(ACTIVE_TOKEN)


def active_token_parameters(token_sha256: str) -> dict[str, Any]:
    """The parameters of `ACTIVE_TOKEN` for the token with this digest, now."""
    return {"token_sha256": token_sha256, "now": utcnow()}


class UserRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, user_id: str) -> User | None:
        return await self.session.get(User, user_id)

    async def by_name(self, name: str) -> User | None:
        if "\x00" in name:  # no user name holds one, and PostgreSQL refuses it in a query
            return None
        return (await self.session.execute(select(User).where(User.name == name))).scalar_one_or_none()

    async def count(self) -> int:
        return int((await self.session.execute(select(func.count()).select_from(User))).scalar_one())

    async def list(self) -> list[User]:
        return list((await self.session.execute(select(User).order_by(User.created_at))).scalars())

    async def add(self, name: str, *, is_admin: bool) -> User:
        user = User(name=name, is_admin=is_admin)
        self.session.add(user)
        await self.session.flush()
        return user

    async def add_token(
        self, user: User, token_sha256: str, label: str, expires_at: datetime | None = None
    ) -> ApiToken:
        token = ApiToken(user_id=user.id, token_sha256=token_sha256, label=label, expires_at=expires_at)
        self.session.add(token)
        await self.session.flush()
        return token

    async def by_token_digest(self, token_sha256: str) -> User | None:
        """The user of a token that is neither revoked nor expired."""
        parameters = active_token_parameters(token_sha256)
        return (await self.session.execute(_USER_OF_ACTIVE_TOKEN, parameters)).scalar_one_or_none()

    async def tokens(self, user_id: str | None = None) -> builtins.list[tuple[ApiToken, str]]:
        """Tokens (of one user, or all) with their user's name, oldest first."""
        query = select(ApiToken, User.name).join(User, User.id == ApiToken.user_id)
        if user_id is not None:
            query = query.where(ApiToken.user_id == user_id)
        rows = await self.session.execute(query.order_by(ApiToken.created_at, ApiToken.id))
        return [(token, name) for token, name in rows]

    async def token(self, token_id: str) -> tuple[ApiToken, str] | None:
        if not is_public_id(token_id):
            return None
        query = select(ApiToken, User.name).join(User, User.id == ApiToken.user_id)
        row = (await self.session.execute(query.where(ApiToken.id == token_id))).first()
        return (row[0], row[1]) if row else None
