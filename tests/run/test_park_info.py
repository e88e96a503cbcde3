"""What a person is told about a parked effect (``threads.run.park_info.explain``): what threads
proved, what it could not (by effect class, lookup finality, dispatches, an earlier holder's
window), and what each resolution risks; the words follow the clock, the facts do not."""

from __future__ import annotations

import dataclasses

from threads.run.holders import EarlierHolder, iso
from threads.run.park_info import ParkFacts, explain

NOW = 1_790_000_000_000
FACTS = ParkFacts(
    effect_key="b:call_1", call_id="call_1", tool="charge", input={"amount": 5},
    effect_class="unguarded", attempts=1, unknown_reason="crash_after_begin",
    dedup_window_end=None, parked_at=NOW - 10, window=None, known_tool=True, max_attempts=3,
    finality=None,
)


def facts(**changes: object) -> ParkFacts:
    return dataclasses.replace(FACTS, **changes)  # type: ignore[arg-type]


def test_an_unguarded_call_after_a_crash() -> None:
    words = explain(FACTS, NOW)
    assert "the process that sent it is gone" in words.proved
    assert "dispatched once" in words.proved
    assert "unguarded" in words.unproved
    assert "no lookup and no deduplication" in words.unproved
    assert "without sending it again" in words.if_done
    assert "happens twice, with these arguments" in words.if_not_done
    assert "b:call_1" in words.if_not_done
    assert "unless the provider" not in words.if_not_done
    assert words.not_done_refused_until is None


def test_each_reason_is_said_in_words() -> None:
    assert "timed out" in explain(facts(unknown_reason="timeout"), NOW).proved
    assert "connection failed" in explain(facts(unknown_reason="transport_error"), NOW).proved


def test_an_idempotent_call_past_its_dedup_window() -> None:
    end = NOW - 60_000
    words = explain(facts(effect_class="idempotent", dedup_window_end=end, attempts=2), NOW)
    assert f"deduplicates the key only until {iso(end)}" in words.unproved
    assert "dispatched 2 times" in words.proved
    assert "unless the provider still recognises that key" in words.if_not_done


def test_a_reconcilable_call_by_its_lookup_finality() -> None:
    nonfinal = explain(facts(effect_class="reconcilable", finality="nonfinal"), NOW)
    assert "lookup is not final" in nonfinal.unproved
    final = explain(facts(effect_class="reconcilable", finality="final"), NOW)
    assert "could not say whether it happened" in final.unproved


def test_an_earlier_holder_still_sending_refuses_a_resend_until_its_window_ends() -> None:
    holder = EarlierHolder(epoch=2, until=NOW + 30_000)
    inside = explain(facts(effect_class="reconcilable", finality="final", window=holder), NOW)
    assert "An earlier holder of this thread (epoch 2) may still be running it" in inside.proved
    assert "proves nothing while an earlier holder may still send" in inside.unproved
    assert inside.not_done_refused_until == holder.until
    assert f"Refused until {iso(holder.until)}" in inside.if_not_done
    after = explain(facts(effect_class="reconcilable", finality="final", window=holder),
                    holder.until)
    assert after.not_done_refused_until is None
    assert "that window ended" in after.proved
    assert "nothing is sending it now" in after.proved


def test_all_dispatches_used_and_a_tool_no_agent_here_has() -> None:
    spent = explain(facts(attempts=3), NOW)
    assert "dispatched 3 times, all the tool allows" in spent.unproved
    unknown = explain(facts(known_tool=False, max_attempts=None), NOW)
    assert unknown.unproved.startswith("No agent here has the charge tool")
    assert "all the tool allows" not in unknown.unproved
