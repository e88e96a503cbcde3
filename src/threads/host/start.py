"""``POST /v1/runs``: start a run at most once per ``Idempotency-Key``.

The receipt is looked up first: another caller's key is ``idempotency_key_principal_mismatch``
(checked before the body, so that caller learns nothing of the other's request), another body
is ``idempotency_key_reused``, the same body replays the stored ``RunAccepted``. Otherwise the
run's ``user_input`` (with ``thread_started`` for a new thread) and the receipt are committed in
one transaction (a new thread's header too, so a request that loses the key's race leaves no
thread behind), and only then is the 202 sent and the run launched. A concurrent request that
took the key first rolls this append back and is answered from the winner's receipt. The next
run of a thread is refused ``budget_exhausted`` once the agent's ``max_turns`` is spent, as a
library run is (``budget_exceeded`` is recorded, no ``user_input``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threads.errors import ConfigError, NotFoundError, StoreError, ThreadsError
from threads.host.bodies import RunAccepted, StartRunRequest
from threads.host.failure import HostError
from threads.host.runs import Runs
from threads.log.canonical import canonical
from threads.log.fold import Fold
from threads.log.hashing import sha256_hex
from threads.log.ids import uuid7
from threads.log.lines import WRITER_IMPL, Draft, first_event, make_header, next_event
from threads.principal import Principal
from threads.run.agent import Agent
from threads.run.budget import Budget
from threads.run.handoff import refusal
from threads.run.pinning import changes, describe
from threads.run.writer import BranchWriter
from threads.store.lease_release import release
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
    keyed = _Keyed(principal, key, who, digest)
    input_data = _input_data(agent, body)
    try:
        if body.thread_id is None:
            if body.branch_id is not None:
                raise HostError("invalid_request", "branch_id needs the thread_id it belongs to")
            branch, fold, accepted = await _new_thread(runs, agent, keyed, input_data)
        else:
            branch = await _target(runs, principal, body.thread_id, body.branch_id)
            fold, accepted = await _next_input(runs, agent, keyed, branch, input_data)
    except StoreError as error:
        if error.code != "idempotency_key_reused":
            raise HostError.of(error) from None
        # A concurrent request took the key first: this one wrote nothing; answer as it would.
        winner = await store.get_receipt(principal.tenant, START_RUN, key)
        if winner is None:
            raise HostError.of(error) from None
        return replay(winner, who, digest)
    except ThreadsError as error:
        raise HostError.of(error) from None
    runs.hub.notify(branch.branch_id)
    runs.launch(agent, branch, fold)
    return accepted


@dataclass(frozen=True, slots=True)
class _Keyed:
    """Who sent the keyed request and what it hashed to: what its receipt binds."""

    principal: Principal
    key: str
    who: str
    digest: str

    def receipt(self, accepted: RunAccepted, now: int) -> RunReceipt:
        return RunReceipt(
            self.principal.tenant, START_RUN, self.key, self.who, self.digest,
            accepted.thread_id, accepted.branch_id, accepted.run_id, now,
        )

    def actor(self) -> dict[str, Any]:
        return {"kind": "user", "principal": self.principal.to_wire()}


async def _new_thread(
    runs: Runs, agent: Agent, keyed: _Keyed, input_data: dict[str, Any]
) -> tuple[BranchInfo, Fold, RunAccepted]:
    """A new thread whose header, ``thread_started``, ``user_input`` and receipt are one
    transaction: a request that loses the key's race leaves no thread behind."""
    store = runs.store
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    started = first_event(header, "thread_started", agent.config(), {"kind": "host"})
    user_input = next_event(started, "user_input", input_data, keyed.actor(), now)
    accepted = RunAccepted(
        thread_id=header.thread_id, branch_id=header.branch_id, run_id=user_input.event_id
    )
    await store.create_branch(
        header, tenant_id=keyed.principal.tenant, events=[started, user_input],
        receipt=keyed.receipt(accepted, now),
    )
    chain = await store.read_chain(header.branch_id)
    return chain.branch, chain.fold(store.clock.now_ms()), accepted


async def _next_input(
    runs: Runs, agent: Agent, keyed: _Keyed, branch: BranchInfo, input_data: dict[str, Any]
) -> tuple[Fold, RunAccepted]:
    """The next run's ``user_input`` and its receipt, in one append under the branch's lease,
    once the agent's ``max_turns`` allows one more turn (as a library run checks it)."""
    store = runs.store
    lease = await store.acquire_lease(
        branch.branch_id, uuid7(store.clock.now_ms()), START_LEASE_TTL_MS
    )
    writer: BranchWriter | None = None
    try:
        chain = await store.read_chain(branch.branch_id)
        fold = chain.fold(store.clock.now_ms())
        _check_runnable(agent, chain.segments[-1].header.writer_impl, branch, fold)
        writer = BranchWriter(store, lease, fold, ttl_ms=START_LEASE_TTL_MS)
        refused = None if agent.budget is None else agent.budget.turns_refusal(
            fold.turns_completed
        )
        if refused is not None:
            await writer.append([Draft("budget_exceeded", refused, {"kind": "host"})])
            runs.hub.notify(branch.branch_id)
            raise HostError(
                "budget_exhausted",
                f"agent {agent.name!r} allows {refused['limit_value']} turns per thread and"
                " this thread has had them all (recorded as budget_exceeded); start a new"
                " thread",
            )
        (event,) = await writer.append([Draft("user_input", input_data, keyed.actor())], hold=True)
        accepted = RunAccepted(
            thread_id=branch.thread_id, branch_id=branch.branch_id, run_id=event.event_id
        )
        await writer.append([], receipt=keyed.receipt(accepted, store.clock.now_ms()))
        return writer.fold, accepted
    finally:
        # hand the lease back: the run takes it next
        if writer is not None:
            await writer.close()
        else:
            await release(store, lease)


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
    runs: Runs, principal: Principal, thread_id: str, branch_id: str | None
) -> BranchInfo:
    """The existing branch the run goes to (the thread's root unless ``branch_id``)."""
    store = runs.store
    try:
        root = await store.root_branch(thread_id)
        branch = root if branch_id is None else await store.get_branch(branch_id)
    except NotFoundError:
        raise HostError("not_found", f"no thread {thread_id} for this tenant") from None
    if root.tenant_id != principal.tenant or branch.thread_id != root.thread_id:
        raise HostError("not_found", f"no thread {thread_id} for this tenant")
    return branch


def _check_runnable(agent: Agent, writer_impl: str, branch: BranchInfo, fold: Fold) -> None:
    if writer_impl != WRITER_IMPL or branch.state != "ready" or fold.inspection_only:
        raise HostError(
            "branch_not_runnable",
            "this branch can't take a run here (written by another implementation, or"
            " inspection-only); fork it, or start a new thread",
        )
    started = fold.thread_started or {}
    changed = changes(started, agent.config())
    if started.get("agent_name") != agent.name or changed:
        what = f" ({describe(changed)})" if changed else ""
        raise HostError(
            "invalid_request",
            f"this thread is pinned to another agent config than {agent.name!r}{what}; start"
            " a new thread, or run it with the agent it started with",
        )
    handed_off = refusal(fold)
    if handed_off is not None:
        raise HostError(handed_off.code, handed_off.message)  # rule 26
    if fold.turn is not None or fold.parks:
        raise HostError(
            "branch_not_runnable",
            "this thread has a turn still open (running, parked or waiting to be resumed);"
            " follow its run, decide what it waits on, then start the next run",
        )
