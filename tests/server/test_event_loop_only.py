"""Every route and dependency of the service runs on the event loop, none in the thread pool.

FastAPI calls a plain `def` endpoint or dependency through `run_in_threadpool`: a hand-off to a
worker thread and back for every request that uses it -- `get_services`, on nearly every route,
did so until this test. Under a burst that hand-off waits for the loop like any other, and it
takes one of anyio's 40 worker threads, shared with everything else that runs in threads.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from ctxpress.app.server.routes import ROUTERS, web


def _calls(dependant: Dependant) -> Iterator[Any]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def _runs_on_the_loop(call: Any) -> bool:
    if inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call):
        return True
    # A dependency object (FastAPI's security schemes): its `__call__` decides.
    return not inspect.isfunction(call) and inspect.iscoroutinefunction(type(call).__call__)


def test_no_route_or_dependency_runs_in_the_thread_pool() -> None:
    routes = [
        route for router in (*ROUTERS, web.router) for route in router.routes if isinstance(route, APIRoute)
    ]
    assert len(routes) > 20, "the service's routes were found"
    in_threads = sorted(
        {
            f"{route.path}: {getattr(call, '__qualname__', type(call).__name__)}"
            for route in routes
            for call in _calls(route.dependant)
            if not _runs_on_the_loop(call)
        }
    )
    assert in_threads == []
