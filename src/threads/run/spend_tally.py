"""``SpendTally``: what one fold's own model attempts spent (after a seq, for a run's scope), kept
as running totals, so the budget guard's read before each request does not grow with the thread.

Each attempt counts as ``threads.run.budget_check.spend`` counts it (unreported usage, and an
attempt still open, at its bound; the cost is its ``threads.log.fold.cost`` charge). An attempt
is added to the totals once it is settled: its outcome is recorded once (a response, recovered
or not, or an abandonment; the fold refuses a second) and never changes after that. Until
then it is counted afresh at each read, so a bound later replaced by the usage of a recovered
response is never summed twice.

A tally follows one fold: the attempts it gained since the last read are named by the
``model_request`` lines appended to ``fold.events`` since then. On another fold, another
``events`` list (a restored fold made whole in place), another price table, or a scope starting
before lines already counted, it counts every attempt of the fold again. ``fold.events`` need
not hold every line (a fold restored from a snapshot): only the lines appended after the first
read are scanned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from threads.log.fold import Fold, ModelAttempt
from threads.log.fold.cost import MAX_INT, PriceTable
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.run.budget import Spend


@dataclass(slots=True)
class _Totals:
    """Sums over attempts, with how many had no bound for each amount (a sum is then None)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    known_nanos: int = 0
    upper_nanos: int = 0
    unbounded_input: int = 0
    unbounded_output: int = 0
    unbounded_cost: int = 0

    def add(self, table: PriceTable, attempt: ModelAttempt) -> None:
        self.requests += 1
        if not table.billed(attempt):
            return
        usage: Mapping[str, object] = attempt.usage or {}
        settings = attempt.settings
        reported = usage.get("input_tokens")
        inp = reported if isinstance(reported, int) else table.input_bound(settings)
        reported = usage.get("output_tokens")
        out = reported if isinstance(reported, int) else table.output_bound(settings)
        if inp is None:
            self.unbounded_input += 1
        else:
            self.input_tokens += inp
        if out is None:
            self.unbounded_output += 1
        else:
            self.output_tokens += out
        charge = table.charge(attempt)
        assert charge is not None  # billed
        self.known_nanos += charge.known
        if charge.upper is None:
            self.unbounded_cost += 1
        else:
            self.upper_nanos += charge.upper

    def copy(self) -> _Totals:
        return _Totals(self.requests, self.input_tokens, self.output_tokens, self.known_nanos,
                       self.upper_nanos, self.unbounded_input, self.unbounded_output,
                       self.unbounded_cost)

    def spend(self, table: PriceTable) -> Spend:
        cost: int | None = self.upper_nanos
        if table.currency is None or self.unbounded_cost or max(
            self.known_nanos, self.upper_nanos
        ) > MAX_INT:
            cost = None  # no cost projection, an unbounded charge, or ``cost_overflow``
        return Spend(
            self.requests,
            None if self.unbounded_input else self.input_tokens,
            None if self.unbounded_output else self.output_tokens,
            cost,
        )


class SpendTally:
    """The running totals of one scope of one fold: its attempts after ``since_seq``; and the
    subagent threads whose ``agent_spawned`` line it read, with that line's seq."""

    def __init__(self) -> None:
        self._fold: Fold | None = None
        self._events: list[Event] | None = None
        self._scanned = 0  # lines of ``_events`` read
        self._through = 0  # the fold's last seq when they were
        self._table: PriceTable | None = None
        self._since = 0
        self._settled = _Totals()
        self._open: list[str] = []  # request event ids of attempts counted at each read
        self._spawned: dict[str, int] = {}  # child thread id -> seq of its agent_spawned

    def spent(self, fold: Fold, since_seq: int = 0) -> Spend:
        """What the attempts of ``fold`` after ``since_seq`` spent (no turns counted)."""
        table = fold.price_table()
        same = fold is self._fold and fold.events is self._events and table == self._table
        if not same or since_seq < self._since or (
            since_seq != self._since and since_seq < self._through
        ):
            self._recount(fold, table, since_seq)
        else:
            if since_seq != self._since:  # a new run: every attempt counted is before it
                self._since, self._settled, self._open = since_seq, _Totals(), []
            self._catch_up(fold)
        attempts = fold.attempts
        still_open: list[str] = []
        now = self._settled.copy()
        for key in self._open:
            attempt = attempts[key]
            if attempt.outcome is None:
                still_open.append(key)
                now.add(table, attempt)
            else:
                self._settled.add(table, attempt)
                now.add(table, attempt)
        self._open = still_open
        return now.spend(table)

    def _recount(self, fold: Fold, table: PriceTable, since_seq: int) -> None:
        self._fold, self._events, self._table, self._since = fold, fold.events, table, since_seq
        self._settled, self._open, self._spawned = _Totals(), [], {}
        for key, attempt in fold.attempts.items():
            if attempt.event.seq > since_seq:
                self._open.append(key)  # settled or not, sorted out by ``spent``
        self._scan(fold, 0, requests=False)

    def _catch_up(self, fold: Fold) -> None:
        self._scan(fold, self._scanned, requests=True)

    def _scan(self, fold: Fold, start: int, *, requests: bool) -> None:
        events = fold.events
        since = self._since
        for event in events[start:]:
            if event.type == "agent_spawned":
                self._spawned[data_of(event, "agent_spawned")["child_thread_id"]] = event.seq
            elif requests and event.type == "model_request" and event.seq > since:
                self._open.append(event.event_id)
        self._scanned, self._through = len(events), fold.last_seq

    def spawned_before(self) -> set[str]:
        """The children whose ``agent_spawned`` line (read from ``fold.events``) is at or
        before the scope's start, as of the last ``spent``: a child whose line was not read
        (a fold restored from a snapshot) is never taken for one."""
        since = self._since
        return {child for child, seq in self._spawned.items() if seq <= since}


@dataclass(slots=True)
class OwnSpend:
    """A run's tallies of its own fold: over the thread's life, and since its run's input."""

    thread: SpendTally = field(default_factory=SpendTally)
    run: SpendTally = field(default_factory=SpendTally)
