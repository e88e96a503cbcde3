"""The reader's cost and usage projections follow the format: an attempt without usage is
bounded by its epoch's pinned ``max_tokens`` and the highest input-side price; a ``max_tokens``
that isn't a positive integer, or a model without a price, leaves the cost unbounded (never a
made-up 0); no currency means no cost projection; nothing wraps past 2^53-1."""

from __future__ import annotations

from typing import Any

import pytest

from cost_logs import CAP, PRICE, WINDOW, CostLog, entry
from threads.log.fold.cost import MAX_INT

POLICY: dict[str, Any] = {"currency": "USD", "models": [entry(), entry("scripted-small")]}
# the attempt bound: a full window at the highest input-side price (cache_write), the pinned
# max_tokens (1024, not the entry's max_output_tokens) at the output price
BOUND = WINDOW * PRICE["cache_write"] + 1024 * PRICE["output"]


def cost(log: CostLog) -> Any:
    return log.read().projections()["cost"]


def usd(known: int, upper: int, *, complete: bool, bounded: bool) -> dict[str, Any]:
    return {"bounded": bounded, "complete": complete, "currency": "USD", "known_nanos": known,
            "upper_bound_nanos": upper}


def test_the_bound_is_pinned_max_tokens_at_the_highest_input_side_price() -> None:
    assert BOUND == 765_360_000  # the figure the budget-exceeded-terminal case reserves
    assert WINDOW * PRICE["input"] + CAP * PRICE["output"] != BOUND  # the old guess
    log = CostLog(POLICY)
    log.answered()  # the stream broke before its usage report
    assert cost(log) == usd(0, BOUND, complete=False, bounded=True)
    log.abandoned("unknown", "crash")  # may have been billed: at its bound too
    log.request()  # in flight
    assert cost(log) == usd(0, 3 * BOUND, complete=False, bounded=True)


def test_a_partial_usage_report_adds_what_it_knows_and_the_bound() -> None:
    log = CostLog(POLICY)
    log.answered(input_tokens=100, output_tokens=10, cache_read_tokens=None)
    known = 100 * PRICE["input"] + 10 * PRICE["output"]
    assert cost(log) == usd(known, known + BOUND, complete=False, bounded=True)


def test_a_full_usage_report_is_exact_at_every_price() -> None:
    log = CostLog(POLICY)
    log.answered(input_tokens=100, output_tokens=10, cache_read_tokens=1000,
                 cache_write_tokens=50)
    known = 100 * 3000 + 10 * 15000 + 1000 * 300 + 50 * 3750
    assert cost(log) == usd(known, known, complete=True, bounded=True)


@pytest.mark.parametrize(
    ("outcome", "reason", "billing", "charged"),
    [
        ("not_sent", "cancelled", "not_billed", False),  # proven never billed
        ("failed", "rate_limited", "not_billed", False),
        ("failed", "server_error", None, True),  # a status code alone is no proof
        ("unknown", "timeout", "unknown", True),
    ],
)
def test_only_an_attempt_proven_unbilled_costs_nothing(
    outcome: str, reason: str, billing: str | None, charged: bool
) -> None:
    log = CostLog(POLICY)
    log.abandoned(outcome, reason, billing)
    bound = BOUND if charged else 0
    assert cost(log) == usd(0, bound, complete=not charged, bounded=True)


@pytest.mark.parametrize("max_tokens", [0, -5, 1.5, True, "1024", None])
def test_a_max_tokens_that_is_not_a_positive_integer_leaves_the_attempt_unbounded(
    max_tokens: object,
) -> None:
    log = CostLog(POLICY, max_tokens=max_tokens)
    log.answered(input_tokens=100, output_tokens=None)
    known = 100 * PRICE["input"]
    assert cost(log) == usd(known, known, complete=False, bounded=False)
    exact = CostLog(POLICY, max_tokens=max_tokens)
    exact.answered(input_tokens=100, output_tokens=10)  # no bound is needed when exact
    assert cost(exact)["bounded"] is True


def test_each_attempt_is_bounded_by_its_own_settings_epoch() -> None:
    small = {"input": 1, "output": 2}
    log = CostLog({"currency": "USD", "models": [entry(), entry("scripted-small", small)]})
    log.switch("scripted-small", max_tokens=100)
    log.answered()
    assert cost(log) == usd(0, WINDOW * 1 + 100 * 2, complete=False, bounded=True)
    log.switch("scripted-1", max_tokens=0)  # back to the priced model, with no output bound
    log.answered(input_tokens=1, output_tokens=None)
    assert cost(log) == usd(3000, WINDOW + 200 + 3000, complete=False, bounded=False)


def test_a_model_without_a_price_is_unpriced_not_free() -> None:
    log = CostLog({"currency": "USD", "models": [entry(price=None), entry("scripted-small")]})
    log.answered(input_tokens=100, output_tokens=10)  # fully reported, but nothing prices it
    assert cost(log) == usd(0, 0, complete=False, bounded=False)
    listed_elsewhere = CostLog({"currency": "USD", "models": [entry("scripted-small")]})
    listed_elsewhere.answered(input_tokens=100, output_tokens=10)  # its model is not listed
    assert cost(listed_elsewhere) == usd(0, 0, complete=False, bounded=False)
    unpriced_epoch = CostLog({"currency": "USD",
                              "models": [entry(), entry("scripted-small", price=None)]})
    unpriced_epoch.answered(input_tokens=1, output_tokens=1)
    unpriced_epoch.switch("scripted-small")
    unpriced_epoch.answered(input_tokens=1, output_tokens=1)
    assert cost(unpriced_epoch) == usd(18000, 18000, complete=False, bounded=False)


@pytest.mark.parametrize(
    "policy",
    [None, {"models": [entry()]}, {"currency": "USD"}],
    ids=["no-policy", "no-currency", "no-models"],
)
def test_no_currency_or_models_means_no_cost_projection(policy: dict[str, Any] | None) -> None:
    log = CostLog(policy)
    log.answered(input_tokens=100, output_tokens=10)
    fold = log.read()
    assert fold.projections()["cost"] is None
    assert fold.cost() is None
    assert fold.state()["usage"]["input_tokens"] == 100  # usage does not need a price


def test_a_cost_past_2_53_is_cost_overflow_never_wrapped() -> None:
    huge = {"input": 1, "output": 2**40}
    log = CostLog({"currency": "USD", "models": [entry(price=huge)]})
    log.answered(input_tokens=0, output_tokens=2**12)  # 2^52: still fits
    assert cost(log)["known_nanos"] == 2**52
    log.answered(input_tokens=0, output_tokens=2**12)  # the sum reaches 2^53
    assert cost(log) == {"error": "cost_overflow"}
    bounded_past = CostLog({"currency": "USD", "models": [entry(price=huge)]}, max_tokens=2**13)
    bounded_past.answered(input_tokens=0, output_tokens=None)  # the upper bound passes it
    assert cost(bounded_past) == {"error": "cost_overflow"}


def test_a_response_that_would_pass_2_53_tokens_counts_as_unknown() -> None:
    log = CostLog(POLICY)
    log.answered(input_tokens=MAX_INT - 10, output_tokens=5)
    log.answered(input_tokens=11, output_tokens=5)  # input would pass 2^53-1: adds neither
    log.answered(input_tokens=10, output_tokens=5)  # fits exactly
    assert log.read().state()["usage"] == {
        "input_tokens": MAX_INT, "output_tokens": 10, "unknown_responses": 1,
    }


def test_a_response_with_one_count_unknown_adds_neither() -> None:
    log = CostLog(POLICY)
    log.answered(input_tokens=100, output_tokens=None)
    log.answered(input_tokens=7, output_tokens=3)
    assert log.read().state()["usage"] == {
        "input_tokens": 7, "output_tokens": 3, "unknown_responses": 1,
    }
