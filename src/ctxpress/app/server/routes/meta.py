from __future__ import annotations

from fastapi import APIRouter

from ctxpress import __version__
from ctxpress.app.server.rendering import render_markdown
from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, ServicesDep, UserDep
from ctxpress.app.server.schemas import (
    AgentOut,
    ErrorResponse,
    HealthOut,
    RenderOut,
    RenderRequest,
    UserOut,
    VocabularyOut,
)
from ctxpress.app.server.vocabulary import vocabulary

router = APIRouter(prefix="/api", tags=["service"])


@router.get("/health", response_model=HealthOut)
async def health(services: ServicesDep) -> HealthOut:
    return HealthOut(
        status="ok",
        database=services.database.backend,
        version=__version__,
        builtin_model_agents=[agent.name for agent in services.agents.all() if agent.builtin_model],
    )


@router.get("/vocabulary", response_model=VocabularyOut)
async def get_vocabulary() -> VocabularyOut:
    """Event names, statuses, levels, error codes, reasons and constants, as the service defines them.

    Public like `/api/health`: the page reads it before signing in.
    """
    return vocabulary()


@router.get("/me", response_model=UserOut, responses=AUTHENTICATED_RESPONSES)
async def me(user: UserDep) -> UserOut:
    return UserOut.of(user)


@router.get("/agents", response_model=list[AgentOut], responses=AUTHENTICATED_RESPONSES)
async def list_agents(services: ServicesDep, user: UserDep) -> list[AgentOut]:
    return [
        AgentOut.of(agent, default=agent.name == services.agents.default_name)
        for agent in services.agents.all()
    ]


@router.post(
    "/render",
    response_model=RenderOut,
    responses={
        **AUTHENTICATED_RESPONSES,
        413: {"model": ErrorResponse, "description": "The body is larger than `max_body_bytes`."},
    },
)
async def render(body: RenderRequest, user: UserDep) -> RenderOut:
    """A complete message's Markdown as sanitised HTML (the page renders a reply once it has streamed)."""
    return RenderOut(html=render_markdown(body.text))
