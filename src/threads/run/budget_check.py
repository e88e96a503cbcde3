"""The budget guard: before each model request, compare spend read back from the log plus a
worst-case reservation for the next request with every limit in force (the agent's, for the
thread's lifetime; the run's, carried on its ``user_input``; in a subagent tree, each
ancestor's: ``AncestorBudget``). A thread's and a run's spend include what every subagent thread
below them spent (read from their logs), so a parent's budget covers its whole tree; a child
refused by an ancestor's budget records ``budget_exceeded{scope: ancestor, owner_thread_id}``.

Every limit binds the tree: ``max_turns`` counts the turns the scope's threads started (the
owner's, and each descendant's, a child's first turn included), checked here before each
request and, for a thread's own new input, where a turn is opened (``threads.run.turn_open``);
``max_wall_ms`` runs from the owner's start (its thread's first event, or its run's input) on
the injected clock, so a child is refused once an ancestor's time is up.

A request that could cross a limit is never sent: ``budget_exceeded`` is recorded, the turn ends
``budget_exhausted`` and the run returns ``BudgetExhausted``. Usage a provider did not report,
and attempts left in doubt by a crash, count at their bound.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from threads.errors import NotFoundError
from threads.log.fold import Fold
from threads.log.fold.cost import MAX_INT
from threads.log.lines import Event
from threads.log.vocabulary import (
    BudgetExceededData,
    data_of,
    draft,
)
from threads.run.budget import (
    NOTHING_SPENT,
    AncestorBudget,
    Budget,
    BudgetLimit,
    BudgetScope,
    Spend,
    SpendMemo,
    ThreadSpend,
    plus,
)
from threads.run.drafts import HOST
from threads.run.results import BudgetExhausted, BudgetInfo
from threads.run.runtime import Runtime
from threads.run.spend_tally import OwnSpend, SpendTally
from threads.store.protocol import Store


@dataclass(frozen=True, slots=True)
class _Scope:
    """A budget in force, what its scope spent, whose it is (an ancestor's) and when its
    wall clock started."""

    scope: BudgetScope
    budget: Budget
    spent: Spend
    owner: str | None
    started_ms: int


def started_turns(fold: Fold) -> int:
    """The turns a thread started: those it ended and the one open now."""
    return fold.turns_completed + (1 if fold.turn is not None else 0)


def _thread_started_ms(fold: Fold) -> int:
    """When the thread of ``fold`` started (its first line), which an agent budget's
    ``max_wall_ms`` runs from. ``fold`` holds the whole chain: a fold opened from a row does
    not hold line 1, and ``threads.run.run_open`` keeps every budgeted run off the row."""
    first = fold.events[0]
    assert first.seq == 1, "a budget's thread start is read from a fold holding line 1"
    return first.time


async def _scopes(rt: Runtime) -> list[_Scope]:
    """Each budget in force and what its scope spent: the thread's and the run's count every
    subagent below them too; an ancestor's counts what the tree spent outside this thread when
    it started, plus this thread's subtree. A run under no budget reads nothing (spend is
    linear in the thread's requests: summing it before every request of an unbudgeted run made
    its steps grow with the conversation)."""
    fold = rt.fold
    turn = fold.turn
    run_budget = turn is not None and turn.budget is not None
    if rt.spec.budget is None and not run_budget and not rt.ancestors:
        return []
    store = rt.writer.store
    scopes: list[_Scope] = []
    own = await _spent(store, fold, memo=rt.spend_memo, tallies=rt.own_spend)
    if rt.spec.budget is not None:
        scopes.append(_Scope("thread", rt.spec.budget, own, None, _thread_started_ms(fold)))
    if turn is not None and turn.budget is not None:
        spent = await _spent(store, fold, since=turn.input_event, memo=rt.spend_memo,
                             tallies=rt.own_spend)
        scopes.append(_Scope("run", Budget.from_wire(turn.budget), spent, None,
                             turn.input_event.time))
    scopes.extend(
        _Scope("ancestor", a.budget, a.spent.plus(own), a.owner_thread_id, a.started_ms)
        for a in rt.ancestors
    )
    return scopes


async def ancestors_below(rt: Runtime, child_thread_id: str) -> tuple[AncestorBudget, ...]:
    """The budgets a child of this thread runs under besides its own: this thread's and its
    run's, and every ancestor's of this thread, each with what the tree spent outside the
    child's subtree."""
    fold = rt.fold
    store = rt.writer.store
    elsewhere = await _spent(store, fold, excluding=child_thread_id, memo=rt.spend_memo,
                             tallies=rt.own_spend)
    thread_id = rt.writer.thread_id
    out: list[AncestorBudget] = []
    if rt.spec.budget is not None:
        out.append(AncestorBudget(thread_id, rt.spec.budget, elsewhere,
                                  _thread_started_ms(fold)))
    turn = fold.turn
    if turn is not None and turn.budget is not None:
        run = await _spent(store, fold, since=turn.input_event, excluding=child_thread_id,
                           memo=rt.spend_memo, tallies=rt.own_spend)
        out.append(AncestorBudget(thread_id, Budget.from_wire(turn.budget), run,
                                  turn.input_event.time))
    out.extend(
        AncestorBudget(a.owner_thread_id, a.budget, a.spent.plus(elsewhere), a.started_ms)
        for a in rt.ancestors
    )
    return tuple(out)


async def handoff_ancestors(
    store: Store, thread_id: str, fold: Fold, memo: SpendMemo
) -> tuple[AncestorBudget, ...]:
    """The budgets a handoff target runs under besides its own, read from the logs at each of
    its runs (its first turn inside the run that handed off, a rerun after a crash, any later
    ``Agent.run(thread=target)``): every budget that covers the thread it was started from
    (``above``), while that budget is in force. None for another thread."""
    parent = fold.thread_started.get("parent") if fold.thread_started is not None else None
    if parent is None or parent["relation"] != "handoff":
        return ()
    return await above(store, thread_id, fold, memo)


async def above(
    store: Store, thread_id: str, fold: Fold, memo: SpendMemo
) -> tuple[AncestorBudget, ...]:
    """Every budget of the threads above ``thread_id`` (whose log ``fold`` is: the thread it
    was started from, a subagent's parent or a handoff's source, and theirs, up to the root)
    in force now, each with what was spent under it outside this thread's subtree (read from the
    logs; ``memo`` keeps each subagent's spend by its log head). In force: a thread's agent
    budget (its pinned ``policy.budget``), for its whole life; a run's budget, while its turn
    goes on: a subagent's parent's run while the turn that spawned it is open, a handoff
    source's run while the target's first turn is (the source takes no more requests after a
    handoff, rule 26, so its amounts are final)."""
    parent = fold.thread_started.get("parent") if fold.thread_started is not None else None
    if parent is None:
        return ()
    try:
        branch = await store.root_branch(parent["thread_id"])
    except NotFoundError:
        return ()  # an imported thread without the one it came from: nothing to read
    theirs = (await store.read_chain(branch.branch_id)).fold(store.clock.now_ms())
    child = parent["relation"] == "subagent"
    below = thread_id if child else None  # a handoff target is none of its source's children
    spent = await _spent(store, theirs, excluding=below, memo=memo)
    owner = parent["thread_id"]
    out: list[AncestorBudget] = []
    agent_budget = theirs.policy.get("budget")
    if agent_budget is not None:
        out.append(AncestorBudget(owner, Budget.from_wire(agent_budget), spent,
                                  _thread_started_ms(theirs)))
    opener = _run_in_force(theirs, parent["event_id"], fold, child=child)
    run_budget = data_of(opener, "user_input").get("budget") if opener is not None else None
    if opener is not None and run_budget is not None:
        run = await _spent(store, theirs, since=opener, excluding=below, memo=memo)
        out.append(AncestorBudget(owner, Budget.from_wire(run_budget), run, opener.time))
    out.extend(AncestorBudget(a.owner_thread_id, a.budget, a.spent.plus(spent), a.started_ms)
               for a in await above(store, owner, theirs, memo))
    return tuple(out)


def _run_in_force(theirs: Fold, started_by: str, fold: Fold, *, child: bool) -> Event | None:
    """The ``user_input`` of the run above whose budget still covers the thread of ``fold``:
    for a subagent, its parent's open turn, when it spawned the child (``started_by``, the
    ``agent_spawned``); for a handoff target still in its first turn, the source's last input
    (the run that handed off). Else None."""
    if child:
        turn = theirs.turn
        if turn is None or turn.input_event.type != "user_input":
            return None
        spawned = next((e for e in theirs.events if e.event_id == started_by), None)
        return turn.input_event if spawned is not None and \
            spawned.seq > turn.input_event.seq else None
    if fold.turns_completed > 0:
        return None  # the target's first turn is over: the run that handed off is too
    return next((e for e in reversed(theirs.events) if e.type == "user_input"), None)


async def _spent(
    store: Store, fold: Fold, *, since: Event | None = None, excluding: str | None = None,
    memo: SpendMemo | None = None, tallies: OwnSpend | None = None,
) -> Spend:
    """What the thread of ``fold`` and its subagents (all but ``excluding``) spent: over the
    thread's life, with every turn it started; or since a run's input ``since``, that run's
    attempts and its one turn, and the children it spawned. ``tallies``: the run's running
    totals of ``fold`` (``threads.run.spend_tally``), so its own attempts are not summed again
    at every request; without, they are summed once."""
    tallies = OwnSpend() if tallies is None else tallies
    skip: set[str] = set() if excluding is None else {excluding}
    if since is None:
        own = tallies.thread.spent(fold).with_turns(started_turns(fold))
    else:
        own = tallies.run.spent(fold, since.seq).with_turns(1)
        skip |= tallies.run.spawned_before()
    return own.plus(await tree_spend(store, fold, skip=skip, memo=memo))


async def tree_spend(
    store: Store, fold: Fold, *, skip: Collection[str] = (), memo: SpendMemo | None = None,
) -> Spend:
    """What the subagent threads below the thread of ``fold`` spent (all but those in
    ``skip``), read from their logs, with the turns they started. ``memo``: a run's memo, so a
    log is read again only once it grew."""
    total = NOTHING_SPENT
    for child in fold.features.children.values():
        thread_id = child.child_thread_id
        if thread_id in skip:
            continue
        total = total.plus(await _subtree(store, thread_id, memo or SpendMemo()))
    return total


async def _subtree(store: Store, thread_id: str, memo: SpendMemo) -> Spend:
    """A subagent thread's spend and its whole subtree's."""
    try:
        branch = await store.root_branch(thread_id)
    except NotFoundError:
        return NOTHING_SPENT  # never created: spent nothing
    head = (branch.head_seq, branch.head_hash)
    seen = memo.get(branch.branch_id, head)
    if seen is None:
        chain = await store.read_chain(branch.branch_id)
        theirs = chain.fold(store.clock.now_ms())
        spent = SpendTally().spent(theirs)
        seen = ThreadSpend(
            (chain.branch.head_seq, chain.branch.head_hash),
            spent.with_turns(started_turns(theirs)),
            tuple(theirs.features.children),
        )
        memo.put(branch.branch_id, seen)
    total = seen.spent
    for child in seen.children:
        total = total.plus(await _subtree(store, child, memo))
    return total


async def before_request(rt: Runtime) -> BudgetExhausted | None:
    """Refuse the next request when what its scope spent plus the request's bound (under the
    settings epoch in force) could cross a limit; an amount without a bound always could."""
    table = rt.fold.price_table()
    settings = rt.fold.settings
    reserve = Spend(
        1, table.input_bound(settings), table.output_bound(settings), table.bound(settings)
    )
    for scope in await _scopes(rt):
        budget, spent = scope.budget, scope.spent
        checks: list[tuple[BudgetLimit, int | None, int | None]] = [
            ("max_model_requests", budget.max_model_requests, spent.model_requests + 1),
            ("max_input_tokens", budget.max_input_tokens, plus(spent.input_tokens,
                                                                reserve.input_tokens)),
            ("max_output_tokens", budget.max_output_tokens, plus(spent.output_tokens,
                                                                  reserve.output_tokens)),
            ("max_cost_nanos", budget.max_cost_nanos, plus(spent.cost_nanos, reserve.cost_nanos)),
            ("max_turns", budget.max_turns, spent.turns),
        ]
        for limit, value, observed in checks:
            if value is None:
                continue
            if observed is None or observed > value:
                # a request or turn count is exact; spend includes the worst-case reservation,
                # and an amount with no bound is recorded as the largest the log carries
                upper = limit not in ("max_model_requests", "max_turns")
                seen = MAX_INT if observed is None else min(observed, MAX_INT)
                return await _exceeded(rt, scope, limit, value, seen, upper=upper)
        if budget.max_wall_ms is not None and rt.fold.turn is not None:
            elapsed = rt.now() - scope.started_ms
            if elapsed > budget.max_wall_ms:
                return await _exceeded(rt, scope, "max_wall_ms", budget.max_wall_ms, elapsed,
                                       upper=False)
    return None


async def _exceeded(
    rt: Runtime, scope: _Scope, limit: BudgetLimit, value: int, observed: int, *, upper: bool
) -> BudgetExhausted:
    data: BudgetExceededData = {
        "limit": limit,
        "limit_value": value,
        "observed": observed,
        "observed_is_upper_bound": upper,
        "scope": scope.scope,
    }
    if scope.owner is not None:
        data["owner_thread_id"] = scope.owner
    drafts = [draft("budget_exceeded", data, HOST)]
    if rt.fold.turn is not None:
        drafts.append(draft("turn_completed", {"reason": "budget_exhausted"}, HOST))
    await rt.writer.append(drafts)
    return BudgetExhausted(rt.thread, BudgetInfo(limit, value, observed, scope.scope, upper))
