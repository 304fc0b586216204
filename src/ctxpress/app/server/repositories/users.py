from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxpress.app.server.db.models import ApiToken, User


class UserRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, user_id: str) -> User | None:
        return await self.session.get(User, user_id)

    async def by_name(self, name: str) -> User | None:
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

    async def add_token(self, user: User, token_sha256: str, label: str) -> ApiToken:
        token = ApiToken(user_id=user.id, token_sha256=token_sha256, label=label)
        self.session.add(token)
        await self.session.flush()
        return token

    async def by_token_digest(self, token_sha256: str) -> User | None:
        query = (
            select(User)
            .join(ApiToken, ApiToken.user_id == User.id)
            .where(ApiToken.token_sha256 == token_sha256, ApiToken.revoked_at.is_(None))
        )
        return (await self.session.execute(query)).scalar_one_or_none()
