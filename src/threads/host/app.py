"""``host(store, agents, *, authenticate)``: the ASGI app serving agents over HTTP.

It wires the routes (``/v1`` API, ``/openapi.json``, the operator console under ``/ui``) to one
``Runs`` and one ``Hub``. On start (ASGI lifespan) it resumes the runs receipts say may be
unfinished; on stop it takes no new runs, lets running ones finish for ``grace_s``, cancels the
rest, and their leases are released, saying so on its ``log``. With ``access_log`` it writes one
line per request (``threads.host.access_log``). Unknown routes are 404 ``not_found`` with an
error body.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from threads.errors import ConfigError
from threads.host.access_log import AccessLog
from threads.host.auth import Authenticate
from threads.host.failure import failure
from threads.host.http import MAX_BODY_BYTES, Context, Handler, route
from threads.host.hub import Hub
from threads.host.openapi import document
from threads.host.routes_controls import (
    post_answer,
    post_approval,
    post_cancel,
    post_fork,
    post_resolve,
)
from threads.host.routes_inbox import get_inbox
from threads.host.routes_overview import get_overview
from threads.host.routes_runs import get_events, get_thread_events, post_run
from threads.host.routes_settings import post_mode, post_settings
from threads.host.routes_threads import (
    get_approvals,
    get_branches,
    get_fork_points,
    get_threads,
    get_timeline,
)
from threads.host.routes_tree import get_thread
from threads.host.runs import Runs
from threads.host.summaries import Summaries
from threads.host.ui import ui_routes
from threads.run import Agent, Permissions, agents_by_name
from threads.store.protocol import Store

GRACE_S = 10.0
T = "/v1/threads/{thread_id}"

API: list[tuple[str, str, Handler]] = [
    ("POST", "/v1/runs", post_run),
    ("GET", "/v1/threads", get_threads),
    ("GET", "/v1/inbox", get_inbox),
    ("GET", T, get_thread),
    ("GET", T + "/events", get_thread_events),
    ("GET", T + "/overview", get_overview),
    ("GET", T + "/runs/{run_id}/events", get_events),
    ("GET", T + "/timeline", get_timeline),
    ("GET", T + "/branches", get_branches),
    ("GET", T + "/fork-points", get_fork_points),
    ("POST", T + "/forks", post_fork),
    ("GET", T + "/approvals", get_approvals),
    ("POST", T + "/approvals/{challenge_id}", post_approval),
    ("POST", T + "/questions/{call_id}/answer", post_answer),
    ("POST", T + "/parked/{effect_key}/resolve", post_resolve),
    ("POST", T + "/cancel", post_cancel),
    ("POST", T + "/settings", post_settings),
    ("POST", T + "/mode", post_mode),
]


def _stderr(line: str) -> None:
    print(f"threads host: {line}", file=sys.stderr, flush=True)


def host(
    store: Store,
    agents: Iterable[Agent],
    *,
    authenticate: Authenticate,
    ceiling: Permissions | None = None,
    grace_s: float = GRACE_S,
    max_body_bytes: int = MAX_BODY_BYTES,
    log: Any = None,
    access_log: Callable[[str], None] | None = None,
) -> Starlette:
    """The ASGI app. ``authenticate(request)`` returns the caller's ``Principal`` or None (401);
    ``ceiling`` narrows every run's permissions; ``log(line)`` gets one line per run outcome
    and what the host does as it stops (stderr by default); ``access_log(line)``, when given,
    one line per request (``threads.host.access_log``: no query string, header or body).
    Several hosts may serve one Postgres store."""
    say = log or _stderr
    named = agents_by_name(agents)
    with_sources = sorted(name for name, one in named.items() if one.sources)
    if with_sources:
        # A host writes a new thread's config before any run connects its MCP servers.
        raise ConfigError(
            "capability_missing",
            f"the host can't serve agents with MCP servers yet ({', '.join(with_sources)}):"
            " run them with Agent.run",
        )
    runs = Runs(store, named, Hub(), ceiling=ceiling, log=say)
    ctx = Context(runs, authenticate, max_body_bytes, say, Summaries(runs.agents))
    schema = document()

    async def openapi(_request: Request) -> Response:
        return JSONResponse(schema)

    routes = [Route(path, route(ctx, handler), methods=[method]) for method, path, handler in API]
    routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    routes.extend(ui_routes())

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await runs.recover()
        try:
            yield
        finally:
            await runs.stop(grace_s)

    async def not_found(_request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException) and exc.status_code not in (404, 405):
            return failure("invalid_request", str(exc.detail))
        return failure("not_found", "no such route; see /openapi.json")

    middleware = [] if access_log is None else [
        Middleware(AccessLog, clock=store.clock, write=access_log)
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_found},
        middleware=middleware,
    )
    app.state.runs = runs
    return app
