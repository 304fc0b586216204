"""`GET /metrics`: this process's Prometheus metrics (when `metrics_enabled`; else 404)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ctxpress.app.server.errors import NotFoundError
from ctxpress.app.server.metrics import METRICS_CONTENT_TYPE
from ctxpress.app.server.routes.deps import ServicesDep

router = APIRouter(tags=["service"])


@router.get("/metrics", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response:
    if not services.settings.metrics_enabled:
        raise NotFoundError("metrics are off (metrics_enabled)")
    services.metrics.queue_depth.set(await services.runs.count_queued())
    return Response(services.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)
