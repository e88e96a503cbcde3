"""``POST /v1/runs``: start a run at most once per ``Idempotency-Key``.

The receipt is looked up first: another caller's key is ``idempotency_key_principal_mismatch``
(checked before the body, so that caller learns nothing of the other's request), another body
is ``idempotency_key_reused``, the same body replays the stored ``RunAccepted``. Otherwise the
run's ``user_input`` (with ``thread_started`` for a new thread) and the receipt are committed in
one transaction (a new thread's header too, so a request that loses the key's race leaves no
thread behind), and only then is the 202 sent and the run launched. A concurrent request that
took the key first rolls this append back and is answered from the winner's receipt. The turn is
opened as a library run opens one (``threads.run.turn_open``): the same refusals and pin check,
and ``budget_exhausted`` once the agent's ``max_turns`` is spent (``budget_exceeded`` is
recorded, no ``user_input``); another implementation's branch is ``branch_not_runnable`` here.
"""

from __future__ import annotations

from threads.errors import ConfigError, NotFoundError, StoreError, ThreadsError
from threads.host.bodies import RunAccepted, StartRunRequest
from threads.host.failure import HostError
from threads.host.runs import Runs
from threads.log.canonical import canonical
from threads.log.fold import Fold
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.principal import Principal
from threads.run import Agent, Budget, RunKey, TurnRequest, create_thread, open_next_turn
from threads.store.protocol import BranchInfo
from threads.store.receipts import START_RUN, RunReceipt, principal_key

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
    request = _request(agent, principal, RunKey(key, who, digest), body)
    try:
        if body.thread_id is None:
            if body.branch_id is not None:
                raise HostError("invalid_request", "branch_id needs the thread_id it belongs to")
            branch, fold, accepted = await _new_thread(runs, agent, request)
        else:
            branch = await _target(runs, principal, body.thread_id, body.branch_id)
            fold, accepted = await _next_input(runs, agent, branch, request)
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


def _request(agent: Agent, principal: Principal, key: RunKey, body: StartRunRequest) -> TurnRequest:
    budget = None
    if body.budget is not None:
        try:
            budget = Budget(**body.budget.model_dump(exclude_none=True))
            budget.check_enforceable(agent.model)
        except ConfigError as error:
            raise HostError("invalid_request", error.message) from None
    return TurnRequest(body.text(), principal, budget, key)


async def _new_thread(
    runs: Runs, agent: Agent, request: TurnRequest
) -> tuple[BranchInfo, Fold, RunAccepted]:
    """A new thread with its first input and the receipt, in one transaction: a request that
    loses the key's race leaves no thread behind."""
    store = runs.store
    made = await create_thread(store, agent, request)
    chain = await store.read_chain(made.header.branch_id)
    return chain.branch, chain.fold(store.clock.now_ms()), _accepted(made.input)


async def _next_input(
    runs: Runs, agent: Agent, branch: BranchInfo, request: TurnRequest
) -> tuple[Fold, RunAccepted]:
    """The next run's ``user_input`` and its receipt, in one append under the branch's lease,
    refused as the library refuses a turn (``threads.run.open_next_turn``)."""
    try:
        opened = await open_next_turn(runs.store, agent, branch.branch_id, request)
    except ThreadsError as error:
        if error.code == "budget_exhausted":  # recorded as budget_exceeded: followers see it
            runs.hub.notify(branch.branch_id)
        if error.code == "writer_mismatch":
            raise HostError("branch_not_runnable", error.message) from None
        raise
    return opened.fold, _accepted(opened.input)


def _accepted(opened: Event) -> RunAccepted:
    return RunAccepted(
        thread_id=opened.thread_id, branch_id=opened.branch_id, run_id=opened.event_id
    )


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
