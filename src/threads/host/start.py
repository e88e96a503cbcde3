"""``POST /v1/runs``: start a run at most once per ``Idempotency-Key``.

The receipt is looked up first: another caller's key is ``idempotency_key_principal_mismatch``
(checked before the body, so that caller learns nothing of the other's request), another body
is ``idempotency_key_reused``, the same body replays the stored ``RunAccepted``. Otherwise the
run's ``user_input`` (with ``thread_started`` for a new thread) and the receipt are committed in
one transaction under the branch's lease, and only then is the 202 sent and the run launched.
A concurrent request that took the key first rolls this append back and is answered from the
winner's receipt.
"""

from __future__ import annotations

import contextlib
from typing import Any

from threads.errors import ConfigError, NotFound, StoreError, ThreadsError
from threads.host.bodies import RunAccepted, StartRunRequest
from threads.host.failure import HostError
from threads.host.runs import Runs
from threads.log.canonical import canonical
from threads.log.hashing import sha256_hex
from threads.log.ids import uuid7
from threads.log.lines import WRITER_IMPL, make_header
from threads.log.reduce import Fold
from threads.principal import Principal
from threads.run.agent import Agent
from threads.run.budget import Budget
from threads.run.config import pinned_view
from threads.run.writer import BranchWriter
from threads.store.protocol import BranchInfo
from threads.store.receipts import START_RUN, RunReceipt, principal_key

START_LEASE_TTL_MS = 10_000
KEY_MAX = 255


def check_key(key: str | None) -> str:
    if key is None:
        raise HostError("invalid_request", "POST /v1/runs needs an Idempotency-Key header")
    if not 1 <= len(key) <= KEY_MAX:
        raise HostError("invalid_request", "Idempotency-Key must be 1 to 255 characters")
    return key


def body_hash(body: StartRunRequest) -> str:
    """SHA-256 of the parsed request's canonical JSON: formatting and key order don't count."""
    return sha256_hex(canonical(body.model_dump(mode="json", exclude_none=True)))


def replay(receipt: RunReceipt, who: str, digest: str) -> RunAccepted:
    if receipt.principal_key != who:
        raise HostError(
            "idempotency_key_principal_mismatch",
            "another caller used this Idempotency-Key; choose a new key for your request",
        )
    if receipt.body_hash != digest:
        raise HostError(
            "idempotency_key_reused",
            "this Idempotency-Key was used for a different request; choose a new key",
        )
    return RunAccepted(
        thread_id=receipt.thread_id, branch_id=receipt.branch_id, run_id=receipt.run_id
    )


async def start_run(
    runs: Runs, principal: Principal, key: str, body: StartRunRequest
) -> RunAccepted:
    store = runs.store
    who = principal_key(principal.issuer, principal.tenant, principal.subject)
    digest = body_hash(body)
    stored = await store.get_receipt(principal.tenant, START_RUN, key)
    if stored is not None:
        return replay(stored, who, digest)
    agent = runs.agents.get(body.agent)
    if agent is None:
        raise HostError("not_found", f"this host serves no agent named {body.agent!r}")
    if runs.stopping:
        raise HostError("branch_busy", "the host is stopping and takes no new runs; retry")
    input_data = _input_data(agent, body)
    branch, new = await _target(runs, principal, body)
    try:
        lease = await store.acquire_lease(branch.branch_id, uuid7(store.clock.now_ms()),
                                          START_LEASE_TTL_MS)
    except StoreError as error:
        raise HostError.of(error) from None
    writer: BranchWriter | None = None
    try:
        chain = await store.read_chain(branch.branch_id)
        fold = chain.fold(store.clock.now_ms())
        _check_runnable(agent, chain.segments[-1].header.writer_impl, branch, fold, new)
        writer = BranchWriter(store, lease, fold, ttl_ms=START_LEASE_TTL_MS)
        items: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        if new:
            items.append(("thread_started", agent.config(), {"kind": "host"}))
        actor = {"kind": "user", "principal": principal.to_wire()}
        items.append(("user_input", input_data, actor))
        events = await writer.append(items, hold=True)
        accepted = RunAccepted(
            thread_id=branch.thread_id, branch_id=branch.branch_id, run_id=events[-1].event_id
        )
        receipt = RunReceipt(
            principal.tenant, START_RUN, key, who, digest, accepted.thread_id,
            accepted.branch_id, accepted.run_id, store.clock.now_ms(),
        )
        try:
            await writer.append([], receipt=receipt)
        except StoreError as error:
            if error.code != "idempotency_key_reused":
                raise
            winner = await store.get_receipt(principal.tenant, START_RUN, key)
            if winner is None:
                raise HostError.of(error) from None
            return replay(winner, who, digest)
        runs.hub.notify(branch.branch_id)
    except ThreadsError as error:
        raise HostError.of(error) from None
    finally:
        if writer is not None:
            await writer.close()
        with contextlib.suppress(StoreError):  # hand the lease back: the run takes it next
            await store.release_lease(lease)
    runs.launch(agent, branch, writer.fold)
    return accepted


def _input_data(agent: Agent, body: StartRunRequest) -> dict[str, Any]:
    data: dict[str, Any] = {"source": "api", "text": body.text()}
    if body.budget is not None:
        try:
            budget = Budget(**body.budget.model_dump(exclude_none=True))
            budget.check_enforceable(agent.model)
        except ConfigError as error:
            raise HostError("invalid_request", error.message) from None
        data["budget"] = budget.to_wire()
    return data


async def _target(
    runs: Runs, principal: Principal, body: StartRunRequest
) -> tuple[BranchInfo, bool]:
    """The branch the run goes to, and whether it is a new thread (created here)."""
    store = runs.store
    if body.thread_id is None:
        if body.branch_id is not None:
            raise HostError("invalid_request", "branch_id needs the thread_id it belongs to")
        now = store.clock.now_ms()
        header = make_header(uuid7(now), uuid7(now), now)
        await store.create_branch(header, tenant_id=principal.tenant)
        return await store.get_branch(header.branch_id), True
    try:
        root = await store.root_branch(body.thread_id)
        branch = root if body.branch_id is None else await store.get_branch(body.branch_id)
    except NotFound:
        raise HostError("not_found", f"no thread {body.thread_id} for this tenant") from None
    if root.tenant_id != principal.tenant or branch.thread_id != root.thread_id:
        raise HostError("not_found", f"no thread {body.thread_id} for this tenant")
    return branch, False


def _check_runnable(
    agent: Agent, writer_impl: str, branch: BranchInfo, fold: Fold, new: bool
) -> None:
    if writer_impl != WRITER_IMPL or branch.state != "ready" or fold.inspection_only:
        raise HostError(
            "branch_not_runnable",
            "this branch can't take a run here (written by another implementation, or"
            " inspection-only); fork it, or start a new thread",
        )
    if new:
        return
    started = fold.thread_started or {}
    if started.get("agent_name") != agent.name or pinned_view(started) != pinned_view(
        agent.config()
    ):
        raise HostError(
            "invalid_request",
            f"this thread is pinned to another agent config than {agent.name!r}; start a new"
            " thread, or run it with the agent it started with",
        )
    if fold.turn is not None or fold.parks:
        raise HostError(
            "branch_not_runnable",
            "this thread has a turn still open (running, parked or waiting to be resumed);"
            " follow its run, decide what it waits on, then start the next run",
        )
