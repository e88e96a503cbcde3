"""``Thread.cost()`` and ``Thread.usage()`` on a stored thread, on every engine: the same
projection the reader computes from the log (``threads.log.fold.cost``), whatever store holds it."""

from __future__ import annotations

import pytest

from cost_logs import PRICE, WINDOW, CostLog, entry
from threads import Thread, ThreadCost, open_thread
from threads.errors import ThreadsError
from threads.log.fold.cost import MAX_INT
from threads.store.protocol import Store
from threads.store.transfer import import_log

BOUND = WINDOW * PRICE["cache_write"] + 1024 * PRICE["output"]


async def stored(store: Store, log: CostLog) -> Thread:
    await import_log(store, log.export(), tenant_id="local")
    return await open_thread(store, log.thread_id)


async def test_unknown_usage_is_read_back_at_its_format_bound(store: Store) -> None:
    log = CostLog({"currency": "EUR", "models": [entry()]})
    log.answered(input_tokens=10, output_tokens=2)
    log.answered()  # no usage report
    thread = await stored(store, log)
    known = 10 * PRICE["input"] + 2 * PRICE["output"]
    assert await thread.cost() == ThreadCost(
        "EUR", known, known + BOUND, complete=False, bounded=True
    )
    usage = await thread.usage()
    assert (usage.input_tokens, usage.output_tokens, usage.unknown_responses) == (10, 2, 1)


async def test_unpriced_unbounded_and_absent_costs_are_never_a_zero(store: Store) -> None:
    unpriced = CostLog({"currency": "USD", "models": [entry(price=None)]})
    unpriced.answered(input_tokens=10, output_tokens=2)
    cost = await (await stored(store, unpriced)).cost()
    assert (cost.complete, cost.bounded) == (False, False)
    unbounded = CostLog({"currency": "USD", "models": [entry()]}, max_tokens=0)
    unbounded.answered(input_tokens=10, output_tokens=None)
    cost = await (await stored(store, unbounded)).cost()
    assert (cost.known_nanos, cost.complete, cost.bounded) == (30_000, False, False)
    no_currency = CostLog({"models": [entry()]})
    no_currency.answered(input_tokens=10, output_tokens=2)
    assert await (await stored(store, no_currency)).cost() is None


async def test_sums_past_2_53_are_refused_not_wrapped(store: Store) -> None:
    log = CostLog({"currency": "USD", "models": [entry(price={"input": 1, "output": 2**40})]})
    log.answered(input_tokens=MAX_INT - 1, output_tokens=2**13)
    log.answered(input_tokens=2, output_tokens=1)  # input would pass 2^53-1
    thread = await stored(store, log)
    with pytest.raises(ThreadsError) as caught:
        await thread.cost()
    assert caught.value.code == "cost_overflow"
    usage = await thread.usage()
    assert (usage.input_tokens, usage.output_tokens, usage.unknown_responses) == (
        MAX_INT - 1, 2**13, 1)
