"""What every ``/v1`` route shares: the caller's principal, a bounded and checked JSON body,
the thread (and branch) the path names, and turning refusals into error bodies.

Invariants: no route runs before ``authenticate`` returned a principal (401 otherwise); another
tenant's thread, a missing one and a branch of another thread all look the same (404), so a
caller learns nothing of threads it may not see; no 5xx carries an internal detail.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import NotFoundError, ThreadsError
from threads.host.auth import Authenticate
from threads.host.failure import HostError
from threads.host.runs import Runs
from threads.host.summaries import Summaries
from threads.log.fold import Fold
from threads.log.input_json import InputRefused, parse_input
from threads.principal import LOCAL_OPERATOR, Principal
from threads.run import Agent, tree_root
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Chain

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Context:
    """What the app hands every route."""

    runs: Runs
    authenticate: Authenticate
    max_body_bytes: int
    log: Callable[[str], None]
    summaries: Summaries  # the thread list's and the inbox's (``threads.host.summaries``)


@dataclass(frozen=True, slots=True)
class ThreadView:
    """The thread a path names, read for this tenant: its root, the branch asked for, and
    that branch's chain and fold."""

    root: BranchInfo
    branch: BranchInfo
    chain: Chain
    fold: Fold

    @property
    def thread_id(self) -> str:
        return self.root.thread_id


Handler = Callable[[Context, Request, Principal], Awaitable[Response]]


def route(ctx: Context, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Authenticate, run the handler, and answer every refusal with an error body."""

    async def endpoint(request: Request) -> Response:
        try:
            principal = await principal_of(ctx, request)
            return await handler(ctx, request, principal)
        except HostError as error:
            return error.response()
        except ThreadsError as error:
            return HostError.of(error).response()
        except Exception as error:  # a bug: logged by type only, answered without detail
            ctx.log(f"{request.method} {request.url.path} failed: {type(error).__name__}")
            return JSONResponse(
                {"error": {"code": "internal", "message": "the host failed; retry later"}},
                status_code=500,
            )

    return endpoint


async def principal_of(ctx: Context, request: Request) -> Principal:
    found = ctx.authenticate(request)
    principal = await found if inspect.isawaitable(found) else found
    if not isinstance(principal, Principal) or principal == LOCAL_OPERATOR:
        raise HostError("unauthenticated", "send Authorization: Bearer <token> for a principal")
    return principal


async def body_of(ctx: Context, request: Request, model: type[M]) -> M:
    """Read at most ``max_body_bytes`` (413 past it), parse it as JSON the log can hold
    (``threads.log.input_json``: no duplicate keys, no number the log can't hold, bounded
    nesting) and check its shape (400 ``invalid_request`` for any of them)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > ctx.max_body_bytes:
        raise HostError("payload_too_large", f"bodies are limited to {ctx.max_body_bytes} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > ctx.max_body_bytes:
            raise HostError(
                "payload_too_large", f"bodies are limited to {ctx.max_body_bytes} bytes"
            )
    try:
        value = parse_input(bytes(raw))
    except InputRefused as refused:
        raise HostError("invalid_request", f"the body was refused: {refused}") from None
    try:
        return model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise HostError(
            "invalid_request", f"{where}: {first['msg']} (see /openapi.json for {model.__name__})"
        ) from None


async def thread_view(
    ctx: Context, principal: Principal, thread_id: str, branch_id: str | None
) -> ThreadView:
    store = ctx.runs.store
    root, branch = await branch_of(ctx, principal, thread_id, branch_id)
    chain = await store.read_chain(branch.branch_id)
    return ThreadView(root, branch, chain, chain.fold(store.clock.now_ms()))


async def branch_of(
    ctx: Context, principal: Principal, thread_id: str, branch_id: str | None
) -> tuple[BranchInfo, BranchInfo]:
    """The thread's root and the branch asked for (the root by default), this tenant's only."""
    store = ctx.runs.store
    hidden = HostError("not_found", f"no thread {thread_id} for this tenant")
    try:
        root = await store.root_branch(thread_id)
        branch = root if branch_id is None else await store.get_branch(branch_id)
    except NotFoundError:
        raise hidden from None
    if (
        root.tenant_id != principal.tenant
        or branch.thread_id != root.thread_id
        or branch.state == "forking"
    ):
        raise hidden
    return root, branch


def branch_param(request: Request) -> str | None:
    value = request.query_params.get("branch_id")
    if value is not None and not value:
        raise HostError("invalid_request", "branch_id must not be empty")
    return value


def owning_agent(ctx: Context, view: ThreadView) -> Agent:
    """The host agent a thread is pinned to."""
    agent = ctx.runs.agent_for(view.fold)
    if agent is None:
        raise HostError(
            "forbidden", "no agent of this host owns this thread, so nobody may decide for it here"
        )
    return agent


async def deciding_agent(ctx: Context, view: ThreadView) -> Agent:
    """The thread's agent as it decides: with its own approvers, or, on a subagent's thread,
    with the approvers of its tree's root (who approves for every child)."""
    agent = await as_deciding(ctx, owning_agent(ctx, view), parent_link(view.fold))
    if agent is None:
        raise HostError(
            "forbidden", "this host does not serve the agent at the root of this subagent's"
            " tree, whose approvers decide for it, so nobody may decide for it here",
        )
    return agent


async def as_deciding(ctx: Context, agent: Agent, parent: tuple[str, str] | None) -> Agent | None:
    """``agent`` with the approvers that decide on its thread: its own, or for a subagent's
    thread (``parent``: its ``thread_started.parent``'s thread and relation) the root's; None
    when this host does not serve the root."""
    if parent is None or parent[1] != "subagent":
        return agent
    root = await tree_root_agent(ctx, parent)
    return None if root is None else dataclasses.replace(agent, approvers=root.approvers)


async def tree_root_agent(ctx: Context, parent: tuple[str, str] | None) -> Agent | None:
    """For a thread started as a subagent (``parent`` = its ``thread_started.parent``'s thread
    and relation), the host agent of its tree's root; None when this host does not serve it.
    A thread that is no subagent is its own root: its ``parent`` gives None here too."""
    if parent is None or parent[1] != "subagent":
        return None
    store = ctx.runs.store
    branch = await store.root_branch(parent[0])
    fold = await open_fold(store, branch.branch_id, store.clock.now_ms())
    link = parent_link(fold)
    if link is None or link[1] != "subagent":
        return ctx.runs.agent_for(fold)  # the parent is the root
    root = await tree_root(store, fold)
    return None if root is None else ctx.runs.agent_for(root[1])  # None: deeper than served


def parent_link(fold: Fold) -> tuple[str, str] | None:
    """A thread's ``thread_started.parent`` as (thread id, relation), or None."""
    started = fold.thread_started
    parent = None if started is None else started.get("parent")
    return (str(parent["thread_id"]), str(parent["relation"])) if parent else None
