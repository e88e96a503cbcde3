"""What a person is told about a parked effect (``threads.run.park_info.explain``): what threads
proved, what it could not (by effect class, lookup finality, dispatches, an earlier holder's
window), and what each resolution risks; the words follow the clock, the facts do not."""

from __future__ import annotations

import dataclasses

from threads.run.holders import EarlierHolder, iso
from threads.run.park_info import ParkFacts, detail, explain

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


# The one paragraph (``detail``: a run's Parked result, ``threads approvals``) and the inbox's
# words (``explain``) by what is known of the holder that dispatched the call, for a tool with a
# final lookup and one without (unguarded). "Other host" is a holder that can't be proven gone:
# it reads as alive, its window stands.
ALIVE = EarlierHolder(epoch=2, until=NOW + 30_000)
GONE = EarlierHolder(epoch=2, until=NOW + 30_000, gone=True)
WITH_LOOKUP = {"effect_class": "reconcilable", "finality": "final", "tool": "refund"}
WITHOUT = {"effect_class": "unguarded", "finality": None, "tool": "send_email"}


def test_a_holder_alive_or_unprovable_may_still_send() -> None:
    unguarded = detail(facts(window=ALIVE, **WITHOUT), NOW)
    assert "An earlier holder of this thread (epoch 2) may still be running it until" in unguarded
    assert "assume_not_done is refused until then" in unguarded
    assert "lookup" not in unguarded  # send_email has none: no lookup is promised
    assert "Resolve it assume_done now if the provider shows it" in unguarded
    looked_up = detail(facts(window=ALIVE, **WITH_LOOKUP), NOW)
    assert "a not-found proves nothing yet and assume_not_done is refused" in looked_up
    assert "its final lookup is asked again" in looked_up
    words = explain(facts(window=ALIVE, **WITHOUT), NOW)
    assert words.not_done_refused_until == ALIVE.until
    assert "may still be running it" in words.proved


def test_a_holder_proven_dead_sends_nothing() -> None:
    unguarded = detail(facts(window=GONE, **WITHOUT), NOW)
    assert (
        "The earlier holder of this thread (epoch 2) is gone: its process no longer runs on this"
        " host, so it sends nothing more; whether the call took effect before it died is unknown."
    ) in unguarded
    assert unguarded.endswith(
        "send_email has no lookup, so only a person can tell: check the provider, then resolve"
        " it assume_done (it happened) or assume_not_done (it did not)."
    )
    assert "may still" not in unguarded
    assert "refused" not in unguarded
    looked_up = detail(facts(window=GONE, **WITH_LOOKUP), NOW)
    assert "is gone" in looked_up
    assert looked_up.endswith(
        "Run the thread again (refund's lookup is asked again), or check the provider and"
        " resolve it assume_done or assume_not_done."
    )
    words = explain(facts(window=GONE, **WITHOUT), NOW)
    assert words.not_done_refused_until is None
    assert "is gone: its process no longer runs on this host" in words.proved
    assert "only a person who checks the provider can tell" in words.unproved
    assert "Refused" not in words.if_not_done


def test_no_earlier_holder_offers_what_applies() -> None:
    assert detail(facts(**WITHOUT), NOW).endswith("or assume_not_done (it did not).")
    assert "lookup is asked again" in detail(facts(**WITH_LOOKUP), NOW)
    unknown = detail(facts(known_tool=False, max_attempts=None, effect_class="idempotent"), NOW)
    assert unknown.endswith(" Check the provider, then resolve it assume_done or assume_not_done.")
    # the log itself says the call was unguarded: no lookup, whoever reads it
    assert "charge has no lookup" in detail(facts(known_tool=False, max_attempts=None), NOW)
