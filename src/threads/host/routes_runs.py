"""Run routes: ``POST /v1/runs`` (start, once per Idempotency-Key), a run's event stream, and
a thread's (one branch's) event stream that follows it for as long as the client stays."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from threads.host.bodies import StartRunRequest
from threads.host.failure import HostError
from threads.host.follow import follow
from threads.host.http import Context, body_of, branch_of, branch_param
from threads.host.start import check_key, start_run
from threads.host.stream import find_run, subscribe
from threads.principal import Principal


async def post_run(ctx: Context, request: Request, principal: Principal) -> Response:
    key = check_key(request.headers.get("idempotency-key"))
    body = await body_of(ctx, request, StartRunRequest)
    accepted = await start_run(ctx.runs, principal, key, body)
    return JSONResponse(accepted.model_dump(), status_code=202)


def resume_point(request: Request) -> int:
    """``Last-Event-ID`` first, else ``?after_seq``; default 0 (the whole run)."""
    raw = request.headers.get("last-event-id")
    if raw is None:
        raw = request.query_params.get("after_seq")
    if raw is None:
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16:
        raise HostError("invalid_request", "the resume point is a seq: digits only")
    return int(raw)


async def get_events(ctx: Context, request: Request, principal: Principal) -> Response:
    after = resume_point(request)
    thread_id = request.path_params["thread_id"]
    ref = await find_run(ctx.runs, thread_id, principal.tenant, request.path_params["run_id"])
    if ref is None:
        raise HostError("not_found", "no such run on this tenant's thread")
    return _sse(subscribe(ctx.runs, ref, after))


async def get_thread_events(ctx: Context, request: Request, principal: Principal) -> Response:
    after = resume_point(request)
    _, branch = await branch_of(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    return _sse(follow(ctx.runs, branch.branch_id, after))


def _sse(frames: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
