from __future__ import annotations

import mimetypes
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from ctxpress.app.server.routes.deps import AUTHENTICATED_RESPONSES, ConversationDep, ServicesDep
from ctxpress.app.server.schemas import ErrorResponse, FileList, FileOut

router = APIRouter(
    prefix="/api/conversations",
    tags=["files"],
    responses={**AUTHENTICATED_RESPONSES, 400: {"model": ErrorResponse}, 404: {"model": ErrorResponse}},
)

#: Served as text; anything else is a download. Never text/html: files may hold model-written markup.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml", "application/toml")
_TEXT_SUFFIXES = (".md", ".txt", ".json", ".jsonl", ".csv", ".log", ".yaml", ".yml", ".toml", ".py")


@router.get("/{conversation_id}/files", response_model=FileList)
async def list_files(
    conversation: ConversationDep,
    services: ServicesDep,
    prefix: Annotated[str, Query(max_length=1024, description="Only files under this folder")] = "",
) -> FileList:
    files = services.files.list(conversation.id, prefix)
    return FileList(conversation_id=conversation.id, files=[FileOut(path=f.path, size=f.size) for f in files])


@router.get(
    "/{conversation_id}/files/{path:path}",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/octet-stream": {}}}},
)
async def read_file(conversation: ConversationDep, services: ServicesDep, path: str) -> Response:
    data = services.files.read(conversation.id, path)
    guessed, _ = mimetypes.guess_type(path)
    is_text = path.lower().endswith(_TEXT_SUFFIXES) or (guessed or "").startswith(_TEXT_TYPES)
    media_type = "text/plain; charset=utf-8" if is_text else "application/octet-stream"
    return Response(content=data, media_type=media_type, headers={"X-Content-Type-Options": "nosniff"})
