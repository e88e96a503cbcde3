"""Opening a turn: the one way a turn's ``user_input`` is written, by a library run
(``threads.run.runner`` and the loop) and by a host's ``POST /v1/runs`` alike.

What opening a turn checks, in order, before anything is appended: the branch is ours to write
and runnable (``refusal``: ``writer_mismatch``, ``branch_not_runnable``), the agent is the
config the thread is pinned to (``check_pinned``: ``ConfigError("invalid_config")``), and the
agent's ``max_turns`` allows one more turn, its subagents' turns counted (else
``budget_exceeded`` is recorded and no input).
A new thread's header, ``thread_started`` and first ``user_input`` are one transaction
(``create_thread``), so no crash leaves a thread no input reached. A host's idempotency receipt
(``RunKey``) is committed in the transaction of the ``user_input`` it names.

``open_next_turn`` is the whole sequence for a caller that does not run the turn itself (a
host): the branch's lease for that one append, the checks, and a refusal when a turn is still
open, since that caller could not finish it first as a run does.
"""

from __future__ import annotations

from dataclasses import dataclass

from threads.errors import ConfigError, LogError
from threads.log.fold import Fold
from threads.log.ids import uuid7
from threads.log.lines import (
    WRITER_IMPL,
    Draft,
    Event,
    Header,
    first_event,
    make_header,
    next_event,
)
from threads.log.vocabulary import UserInputDataSource, draft
from threads.principal import Principal
from threads.run.budget import Budget
from threads.run.budget_check import tree_spend
from threads.run.config import AgentSpec
from threads.run.control import control_writer
from threads.run.drafts import HOST, user_input
from threads.run.handoff import refusal as handoff_refusal
from threads.run.pinning import check_pinned as check_config
from threads.run.results import BudgetInfo, ErrorInfo
from threads.run.sources import changed_sources
from threads.run.thread import ControlError
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.store.receipts import START_RUN, RunReceipt


@dataclass(frozen=True, slots=True)
class RunKey:
    """A host's ``Idempotency-Key`` for the run a ``user_input`` starts: who sent it and what
    the request hashed to. Its receipt is committed with that input."""

    key: str
    principal_key: str
    body_hash: str

    def receipt(self, tenant: str, event: Event, now_ms: int) -> RunReceipt:
        return RunReceipt(
            tenant, START_RUN, self.key, self.principal_key, self.body_hash,
            event.thread_id, event.branch_id, event.event_id, now_ms,
        )


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What a turn is opened with: the input's text, whose it is, the run's own budget (carried
    on the ``user_input``) and, from a host, the idempotency key."""

    text: str
    principal: Principal
    budget: Budget | None = None
    key: RunKey | None = None
    # ``parent_agent``: a subagent sent back by its parent's hook
    source: UserInputDataSource = "api"

    def draft(self) -> Draft:
        return user_input(
            self.text, self.principal, self.budget.to_wire() if self.budget is not None else None,
            source=self.source,
        )


@dataclass(frozen=True, slots=True)
class Created:
    """A new thread: its header and the events written with it (``thread_started`` and the
    first ``user_input``)."""

    header: Header
    events: tuple[Event, ...]

    @property
    def input(self) -> Event:
        return self.events[-1]


async def create_thread(store: Store, agent: AgentSpec, request: TurnRequest) -> Created:
    """A new thread whose header, ``thread_started`` and first ``user_input`` (and the
    request's receipt) are one transaction: a crash, or a request that loses its key's race,
    leaves no thread behind (``max_turns`` is >= 1, so a first turn is always allowed)."""
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    started = first_event(header, draft("thread_started", agent.config(), HOST))
    opened = next_event(started, request.draft(), time=now)
    tenant = request.principal.tenant
    receipt = None if request.key is None else request.key.receipt(tenant, opened, now)
    await store.create_branch(header, tenant_id=tenant, events=[started, opened], receipt=receipt)
    return Created(header, (started, opened))


def refusal(branch_state: str, fold: Fold) -> ErrorInfo | None:
    """Why no turn may be opened on this branch at all: another implementation writes it
    (``writer_mismatch``), or it is inspection-only or not ready (``branch_not_runnable``)."""
    own = fold.header_
    if own is None:  # a folded chain read its own segment's header last
        raise LogError("invalid_transition", "no header was read", seq=0)
    if own.writer_impl != WRITER_IMPL or not own.writer_version.startswith("0."):
        return ErrorInfo(
            "writer_mismatch",
            f"this branch is written by {own.writer_impl} {own.writer_version}; threads-py can"
            " read, export and fork it, but not append to it",
            0,
        )
    if fold.inspection_only or branch_state != "ready":
        return ErrorInfo(
            "branch_not_runnable",
            "this branch is inspection-only (a repair fork, or not ready); fork it at an"
            " eligible snapshot to continue work",
            next((e.seq for e in fold.events if e.type == "fork"), None),
        )
    return None


def check_pinned(agent: AgentSpec, fold: Fold) -> None:
    """``ConfigError("invalid_config")`` naming each changed key path when ``agent`` is not
    the config the thread's ``thread_started`` pins (and which tool servers changed)."""
    started = fold.thread_started
    if started is None:
        return
    config = agent.config()
    sources = changed_sources(started.get("tools"), config["tools"], agent.sources)
    check_config(started, config, "; ".join(sources))


async def open_turn(
    writer: BranchWriter, agent: AgentSpec, request: TurnRequest
) -> Event | BudgetInfo:
    """Open the next turn on a branch this writer holds: its ``user_input`` (with the
    request's receipt, in the same transaction), or, once the agent's ``max_turns`` is spent,
    ``budget_exceeded`` and no input (what it records is returned)."""
    refused = None
    if agent.budget is not None and agent.budget.max_turns is not None:
        # the turns of every subagent thread below count too (``threads.run.budget_check``)
        below = await tree_spend(writer.store, writer.fold)
        refused = agent.budget.turns_refusal(writer.fold.turns_completed + below.turns)
    if refused is not None:
        await writer.append([draft("budget_exceeded", refused, HOST)])
        return BudgetInfo("max_turns", refused["limit_value"], refused["observed"], "thread", False)
    if request.key is None:
        [opened] = await writer.append([request.draft()])
        return opened
    [opened] = await writer.append([request.draft()], hold=True)
    tenant = request.principal.tenant
    receipt = request.key.receipt(tenant, opened, writer.store.clock.now_ms())
    await writer.append([], receipt=receipt)
    return opened


@dataclass(frozen=True, slots=True)
class Opened:
    """A turn ``open_next_turn`` opened: its ``user_input`` and the branch's fold after it."""

    input: Event
    fold: Fold


async def open_next_turn(
    store: Store, agent: AgentSpec, branch_id: str, request: TurnRequest
) -> Opened:
    """Open the next turn of an existing branch for a caller that does not run it (a host, which
    starts the run once the input is durable): under the branch's lease for this one append,
    refused (``ControlError``, nothing written) unless the branch is runnable, the agent is the
    pinned one (by name and config) and no turn is open (running, parked or waiting to be
    resumed); ``budget_exhausted`` once ``max_turns`` is spent, with ``budget_exceeded``
    recorded."""
    async with control_writer(store, branch_id) as writer:
        fold = writer.fold
        branch = await store.get_branch(branch_id)
        refused = refusal(branch.state, fold)
        if refused is not None:
            raise ControlError(refused.code, refused.message, seq=refused.seq)
        started = fold.thread_started
        name = None if started is None else started.get("agent_name")
        if name != agent.name:
            raise ConfigError(
                "invalid_config",
                f"this thread was started by agent {name!r}, not"
                f" {agent.name!r}; run it with the agent it started with, or start a new thread",
            )
        check_pinned(agent, fold)
        handed_off = handoff_refusal(fold)
        if handed_off is not None:  # rule 26: the conversation goes on in the target's thread
            raise ControlError(handed_off.code, handed_off.message, seq=handed_off.seq)
        if fold.turn is not None or fold.parks:
            raise ControlError(
                "branch_not_runnable",
                "this thread has a turn still open (running, parked or waiting to be resumed);"
                " follow its run, decide what it waits on, then start the next run",
            )
        opened = await open_turn(writer, agent, request)
        if isinstance(opened, BudgetInfo):
            raise ControlError(
                "budget_exhausted",
                f"agent {agent.name!r} allows {opened.limit_value} turns per thread and this"
                " thread has had them all (recorded as budget_exceeded); start a new thread",
            )
        return Opened(opened, writer.fold)
