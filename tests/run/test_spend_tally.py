"""The budget guard's running totals (``threads.run.spend_tally``) are exactly what summing every
attempt again gives: for random threads (answered turns with any usage report, abandoned
attempts of every outcome and billing, attempts left in doubt and later recovered or
abandoned, settings epochs with and without a price or a ``max_tokens``, a fold restored from a
snapshot or made whole mid-way), read at random points with the same tallies, the thread's
and the run's spend equal the full recomputation, and the cost equals the ``Cost``
projection's bound (None past 2^53-1); so do a thread's with a summarizer's side request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction_log import CompactionLog
from cost_logs import CostLog, entry
from threads.errors import ThreadsError
from threads.log.fold import Fold, ModelAttempt
from threads.log.fold.cost import PriceTable
from threads.log.fold.saved import RestoredFold, dump, restore
from threads.log.lines import Event
from threads.run.budget import Spend, plus
from threads.run.spend_tally import SpendTally
from threads.testing.sample_log import MODEL

POLICY: dict[str, Any] = {
    "currency": "USD", "models": [entry(), entry("scripted-small"), entry("free", price=None)],
}
# up to sums past 2^53-1 nanos (``cost_overflow``: no cost figure)
TOKENS = st.one_of(st.none(), st.integers(0, 300_000), st.integers(2**36, 2**44))


def reference(table: PriceTable, attempts: list[ModelAttempt]) -> Spend:
    """The sum as the guard made it before the tallies: every attempt, each time."""
    inp: int | None = 0
    out: int | None = 0
    for attempt in attempts:
        if not table.billed(attempt):
            continue
        usage: Mapping[str, object] = attempt.usage or {}
        reported = usage.get("input_tokens")
        inp = plus(inp, reported if isinstance(reported, int)
                   else table.input_bound(attempt.settings))
        reported = usage.get("output_tokens")
        out = plus(out, reported if isinstance(reported, int)
                   else table.output_bound(attempt.settings))
    cost = None
    if table.currency is not None:
        try:
            total = table.total(attempts)
            cost = total.upper_bound_nanos if total.bounded else None
        except ThreadsError as exc:
            if exc.code != "cost_overflow":
                raise
    return Spend(len(attempts), inp, out, cost)


class Thread:
    """A log written op by op and a fold that follows it line by line."""

    def __init__(self) -> None:
        self.log = CostLog(POLICY)
        self.fold: Fold = Fold(now_ms=0)
        self.fold.header(self.log.log.header)
        self.applied = 0
        self.open: Event | None = None  # a request left in doubt
        self.follow()

    def follow(self) -> None:
        events = self.log.log.events
        for event in events[self.applied:]:
            self.fold.apply(event)
        self.applied = len(events)

    def usage(self, inp: int | None, out: int | None, cache: int | None) -> dict[str, Any]:
        return {"input_tokens": inp, "output_tokens": out, "cache_read_tokens": cache}

    def settle(self, op: tuple[Any, ...]) -> None:
        """End the request left in doubt: a recovered response, or an abandonment."""
        assert self.open is not None
        add = self.log.log.add
        if op[0] == "recovered":
            add("model_response_recovered", {
                "completeness": "complete", "content": [{"text": "ok", "type": "text"}],
                "provider_request_id": "req-1", "request_event_id": self.open.event_id,
                "stop_reason": "end_turn", "usage": self.usage(*op[1:]),
            }, MODEL)
            add("turn_completed", {"reason": "end_turn"})
        else:
            data = {"provider_outcome": op[1], "reason": "crash",
                    "request_event_id": self.open.event_id}
            if op[2] is not None:
                data["billing"] = op[2]
            add("model_attempt_abandoned", data)
            add("turn_completed", {"reason": "error"})
        self.open = None

    def do(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if self.open is not None:
            self.settle(op if kind in ("recovered", "abandoned") else ("recovered", 7, 3, 0))
        elif kind == "answered":
            self.log.answered(**self.usage(*op[1:]))
        elif kind == "abandoned":
            self.log.abandoned(op[1], "crash", op[2])
        elif kind == "in_doubt":
            self.open = self.log.request()
        elif kind == "switch":
            self.log.switch(op[1], op[2])
        elif kind == "recovered":
            self.log.answered(**self.usage(*op[1:]))
        self.follow()
        if kind == "snapshot":  # a fold restored from a snapshot, its events start late
            self.fold = restore(dump(self.fold), 0)
        elif kind == "whole" and isinstance(self.fold, RestoredFold):
            whole = Fold(now_ms=0)
            whole.header(self.log.log.header)
            whole.extend(self.log.log.events)
            self.fold.become(whole)

    def since(self) -> int:
        """The seq of the last input: the run's scope."""
        inputs = [e.seq for e in self.log.log.events if e.type == "user_input"]
        return inputs[-1] if inputs else 0


OPS = st.one_of(
    st.tuples(st.just("answered"), TOKENS, TOKENS, TOKENS),
    st.tuples(st.just("abandoned"), st.sampled_from(["not_sent", "unknown", "failed"]),
              st.sampled_from([None, "not_billed", "unknown"])),
    st.tuples(st.just("in_doubt")),
    st.tuples(st.just("recovered"), TOKENS, TOKENS, TOKENS),
    st.tuples(st.just("switch"), st.sampled_from(["scripted-1", "scripted-small", "free"]),
              st.sampled_from([1024, 4096, None, 0])),
    st.tuples(st.just("snapshot")),
    st.tuples(st.just("whole")),
    st.tuples(st.just("read")),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(OPS, max_size=30), st.data())
def test_running_totals_equal_the_full_sum(ops: list[tuple[Any, ...]], data: Any) -> None:
    thread = Thread()
    own, run, anywhere = SpendTally(), SpendTally(), SpendTally()
    for op in [*ops, ("read",)]:
        thread.do(op)
        if op[0] not in ("read", "in_doubt"):
            continue
        fold = thread.fold
        table = fold.price_table()
        attempts = sorted(fold.attempts.values(), key=lambda a: a.event.seq)
        assert own.spent(fold) == reference(table, attempts)
        since = thread.since()
        assert run.spent(fold, since) == reference(
            table, [a for a in attempts if a.event.seq > since])
        cut = data.draw(st.integers(0, fold.last_seq), label="since")
        assert anywhere.spent(fold, cut) == reference(
            table, [a for a in attempts if a.event.seq > cut])
        try:
            projected = fold.cost()
        except ThreadsError:
            projected = None  # cost_overflow
        expected = None if projected is None or not projected.bounded else \
            projected.upper_bound_nanos
        assert own.spent(fold).cost_nanos == expected


def test_a_recovered_response_replaces_the_bound_it_was_counted_at() -> None:
    thread = Thread()
    tally = SpendTally()
    thread.do(("answered", 100, 10, 0))
    thread.do(("in_doubt",))
    table = thread.fold.price_table()
    bound = table.input_bound(thread.fold.settings)
    assert bound is not None
    assert tally.spent(thread.fold).input_tokens == 100 + bound
    thread.do(("recovered", 5, 1, 0))
    assert tally.spent(thread.fold) == Spend(2, 105, 11, (105 * 3000 + 11 * 15000))


def test_a_summarizers_side_requests_count_like_any_other() -> None:
    """A compaction's side request is an attempt of the thread like a turn's: read after each
    line, the totals are the full sum, side requests included."""
    log = CompactionLog(currency="USD", models=[entry()])
    a, b = log.turn("a"), log.turn("b")
    log.user("c")
    log.summarize(a[0], b[-1], "a and b")
    request = log.request()
    log.respond(request)
    log.done()
    fold = Fold(now_ms=0)
    fold.header(log.log.header)
    own, run = SpendTally(), SpendTally()
    inputs = 0
    for event in log.events:
        fold.apply(event)
        inputs = event.seq if event.type == "user_input" else inputs
        table = fold.price_table()
        attempts = sorted(fold.attempts.values(), key=lambda a: a.event.seq)
        assert own.spent(fold) == reference(table, attempts)
        assert run.spent(fold, inputs) == reference(
            table, [a for a in attempts if a.event.seq > inputs])
    assert own.spent(fold) == Spend(4, 40, 8, 4 * (10 * 3000 + 2 * 15000))  # with the summary
    assert run.spent(fold, inputs).model_requests == 2  # the summary and the reply
