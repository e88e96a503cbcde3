"""Model retries and fallback in the real loop: backoff ``base × 2^(k−1)`` or ``Retry-After``,
each wait a recorded ``retry_scheduled`` waited out on the store's clock (a restarted run waits
for the recorded ``not_before`` too), bounded by the pinned ``RetryPolicy``; after
``fallback_after`` overloads the agent's fallback model is asked (``settings_changed{fallback}``,
the request rendered and sent with the fallback's params), and a turn-scoped fallback reverts
at the next input."""

from __future__ import annotations

import pytest

from threads import (
    Budget,
    BudgetExhausted,
    Completed,
    Failed,
    Price,
    Principal,
    RetryPolicy,
    agent,
)
from threads.errors import ConfigError
from threads.log.lines import Event
from threads.log.render import prefix_digest, prefix_line
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing import overloaded, rate_limited, say, scripted_model

ALICE = Principal("api", "acme", "alice")


def of_type(events: list[Event], *types: str) -> list[Event]:
    return [e for e in events if e.type in types]


async def test_overloads_back_off_then_fall_back_then_revert(store: Store) -> None:
    primary = scripted_model([overloaded(), overloaded(), say("never"), say("primary again")])
    small = scripted_model([say("from the small model")], name="scripted-small",
                           max_output_tokens=512)
    bot = agent(name="t", model=primary, fallback=[small], retry=RetryPolicy(fallback_after=2))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "from the small model"
    events = await result.thread.timeline()
    [wait] = of_type(events, "retry_scheduled")
    assert (wait.data["delay_ms"], wait.data["basis"]) == (1000, "backoff")
    assert wait.data["not_before"] == wait.time + 1000
    [switch] = of_type(events, "settings_changed")
    assert switch.data["reason"] == "fallback"
    assert switch.data["settings"]["model"] == {"name": "scripted-small", "provider": "scripted"}
    assert [e.data["attempt"] for e in of_type(events, "model_request")] == [1, 2, 3]
    # the fallback's request is rendered and sent with the fallback's settings, not the pinned
    last_request = of_type(events, "model_request")[-1]
    assert last_request.data["declared_prefix"] == prefix_digest(
        prefix_line(events[0].data, switch.data["settings"])
    )
    assert small.requests[0].params == {"max_tokens": 512}
    assert len(primary.requests) == 2

    again = await bot.run("and again?", store=store, thread=result.thread.id, principal=ALICE)
    assert isinstance(again, Completed)
    assert again.output == "primary again"
    events = await again.thread.timeline()
    revert = of_type(events, "settings_changed")[-1]
    assert revert.data["reason"] == "revert"
    assert revert.data["cause_event_id"] == of_type(events, "user_input")[-1].event_id
    assert primary.requests[-1].params == {"max_tokens": 1024}
    replayed = await again.thread.replay()  # every request re-renders to its recorded bytes
    assert replayed.requests == 4
    assert replayed.mismatch is None


async def test_thread_scoped_fallback_sticks(store: Store) -> None:
    primary = scripted_model([overloaded(), overloaded(), say("never")])
    small = scripted_model([say("small one"), say("small two")], name="scripted-small")
    bot = agent(name="t", model=primary, fallback=[small],
                retry=RetryPolicy(fallback_after=2, fallback_scope="thread"))
    first = await bot.run("hi", store=store, principal=ALICE)
    again = await bot.run("more", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(again, Completed)
    assert again.output == "small two"
    assert len(of_type(await again.thread.timeline(), "settings_changed")) == 1


async def test_retries_follow_the_policy_then_end_model_unavailable(store: Store) -> None:
    model = scripted_model([rate_limited(None), rate_limited(None), rate_limited(7_000),
                            rate_limited(None), say("never")])
    bot = agent(name="t", model=model, retry=RetryPolicy(max_retries=3, base_delay_ms=500))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "model_unavailable"
    events = await result.thread.timeline()
    waits = [(e.data["delay_ms"], e.data["basis"]) for e in of_type(events, "retry_scheduled")]
    assert waits == [(500, "backoff"), (1000, "backoff"), (7000, "retry_after")]
    assert of_type(events, "turn_completed")[-1].data == {"reason": "model_unavailable"}


async def test_a_restarted_run_waits_for_the_recorded_not_before(store: Store) -> None:
    """A writer died right after recording a retry wait: the next run, in another writer,
    sends nothing before the recorded ``not_before`` (on the store's clock)."""
    model = scripted_model([say("hello"), say("after the wait")])
    bot = agent(name="t", model=model)
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "the-writer-that-died", 60_000)
    writer = BranchWriter(store, lease, (await store.read_chain(branch.branch_id)).fold(0))
    user = {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"source": "api", "text": "again"}, user)])
    prefix = prefix_digest(prefix_line(writer.fold.thread_started))
    ref = {"bytes": 1, "media_type": "application/x-ndjson", "sha256": "0" * 64}
    [request] = await writer.append(
        [("model_request", {"attempt": 1, "declared_prefix": prefix, "request_ref": ref},
          {"kind": "host"})]
    )
    not_before = store.clock.now_ms() + 30_000
    host = {"kind": "host"}
    await writer.append([
        ("model_attempt_abandoned", {"provider_outcome": "failed", "reason": "rate_limited",
                                     "request_event_id": request.event_id, "http_status": 429},
         host),
        ("retry_scheduled", {"basis": "backoff", "delay_ms": 30_000, "not_before": not_before,
                             "request_event_id": request.event_id}, host),
    ])
    await store.release_lease(writer.lease)
    result = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "after the wait"
    resent = of_type(await result.thread.timeline(), "model_request")[-1]
    assert resent.data["attempt"] == 2
    assert resent.time >= not_before


def test_fallback_and_retry_are_checked_when_the_agent_is_made() -> None:
    model = scripted_model([])
    with pytest.raises(ConfigError) as same:
        agent(name="t", model=model, fallback=[scripted_model([])])
    assert same.value.code == "duplicate_name"
    with pytest.raises(ConfigError) as bad:
        RetryPolicy(base_delay_ms=0)
    assert bad.value.code == "invalid_config"
    priced = scripted_model([], price=Price(input=1, output=1))
    with pytest.raises(ConfigError) as unpriced:
        agent(name="t", model=priced, fallback=[scripted_model([], name="free")],
              budget=Budget(max_cost_nanos=10**9))
    assert unpriced.value.code == "budget_unenforceable"


async def test_a_budget_reserves_for_the_model_each_request_goes_to(
    store: Store,
) -> None:
    """Each request is checked at the bound of the settings epoch it is sent under (the
    format's attempt bound): the cheap model is asked; once a fallback switches to the costly
    one, its request is refused before it is sent."""
    cheap = scripted_model([overloaded(), say("never")], price=Price(input=1, output=1))
    costly = scripted_model([say("never")], name="costly", price=Price(input=100, output=100))
    limit = 200_000 * 1 + 1024 * 1  # one worst-case attempt on the cheap model, exactly
    bot = agent(name="t", model=cheap, fallback=[costly], budget=Budget(max_cost_nanos=limit),
                retry=RetryPolicy(fallback_after=1))
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)
    assert len(cheap.requests) == 1
    assert costly.requests == []
    events = await result.thread.timeline()
    assert [e.type for e in events][-4:] == [
        "model_attempt_abandoned", "settings_changed", "budget_exceeded", "turn_completed"]
