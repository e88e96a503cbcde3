"""The reader's rules for ``woken`` (rules 32 and 45): a wake names, once and exactly, the late
results of background children recorded just before it, all spawned by one run whose principal
is the wake's, with no thread or tree cancel after their spawns and no turn of that run ended
other than ``end_turn``. Each broken rule is refused at the ``woken``'s seq
(``invalid_transition``) next to the same log written correctly."""

from __future__ import annotations

from typing import Any

import pytest
from test_reader_rules import Log

from threads.log.lines import Event
from threads.testing.sample_log import USER

BOB = {"kind": "user", "principal": {"issuer": "api", "subject": "bob", "tenant": "local"}}
TOOL_ACTOR = {"kind": "tool"}


def child(n: int) -> str:
    return f"0192a000-0000-7000-8000-0000000000c{n}"


def spawn(log: Log, call_id: str, n: int, mode: str = "background") -> None:
    log.called(call_id=call_id, name="do", agent="reviewer")
    log.add("agent_spawned", {
        "agent_name": "reviewer", "call_id": call_id, "child_thread_id": child(n),
        "isolation": "none", "mode": mode,
    })
    log.result(call_id, origin="deferred")


def run(log: Log, *calls: tuple[str, int], actor: dict[str, Any] = USER,
        ending: dict[str, Any] | None = None, mode: str = "background") -> None:
    """One run (a turn) that spawns ``calls`` as background children, then ends."""
    log.add("user_input", {"source": "api", "text": "go"}, actor)
    for call_id, n in calls:
        spawn(log, call_id, n, mode)
    log.respond(log.request())
    log.add("turn_completed", ending or {"reason": "end_turn"})


def ended(log: Log, call_id: str, n: int) -> Event:
    log.add("agent_finished", {
        "child_thread_id": child(n), "status": "completed",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    })
    return log.add("tool_result_late", {
        "call_id": call_id, "completeness": "complete", "is_error": False, "preview": "ok",
    }, TOOL_ACTOR)


def woken(log: Log, *causes: Event, actor: dict[str, Any] = USER) -> Event:
    return log.add("woken", {"causes": [c.event_id for c in causes]}, actor)


def test_a_wake_for_the_children_of_one_run_opens_a_turn() -> None:
    log = Log()
    run(log, ("c1", 1), ("c2", 2))
    first, second = ended(log, "c1", 1), ended(log, "c2", 2)
    woken(log, first, second)
    assert log.read().status == "in_turn"


def test_a_cause_named_twice_in_one_wake() -> None:
    log = Log()
    run(log, ("c1", 1))
    late = ended(log, "c1", 1)
    woken(log, late, late)
    log.refused()


def test_a_cause_woken_twice() -> None:
    log = Log()
    run(log, ("c1", 1), ("c2", 2))
    first = ended(log, "c1", 1)
    woken(log, first)
    log.respond(log.request())
    log.done()
    ended(log, "c2", 2)
    woken(log, first)
    log.refused()


def test_a_wake_leaves_out_no_late_result_after_its_first_cause() -> None:
    log = Log()
    run(log, ("c1", 1), ("c2", 2))
    first = ended(log, "c1", 1)
    ended(log, "c2", 2)
    woken(log, first)
    log.refused()


def test_a_wake_never_names_an_older_result_past_other_events() -> None:
    log = Log()
    run(log, ("c1", 1), ("c2", 2))
    first = ended(log, "c1", 1)
    log.add("user_input", {"source": "api", "text": "meanwhile"}, USER)
    log.respond(log.request())
    log.done()
    second = ended(log, "c2", 2)
    woken(log, first, second)
    log.refused()


def test_causes_from_two_runs_in_one_wake() -> None:
    log = Log()
    run(log, ("c1", 1))
    run(log, ("c2", 2))
    first, second = ended(log, "c1", 1), ended(log, "c2", 2)
    woken(log, first, second)
    log.refused()


@pytest.mark.parametrize("by_bob", [False, True])
def test_the_wake_is_the_spawning_runs_principal(by_bob: bool) -> None:
    """Bob's run spawned the child: only a wake with Bob's principal is the run's (rule 45)."""
    log = Log()
    run(log, ("c1", 1), actor=BOB)
    late = ended(log, "c1", 1)
    woken(log, late, actor=BOB if by_bob else USER)
    if by_bob:
        assert log.read().status == "in_turn"
    else:
        log.refused()


def test_a_wake_needs_a_background_spawn() -> None:
    log = Log()
    log.user()
    log.called()
    log.result(origin="deferred")
    log.respond(log.request())
    log.done()
    late = log.add("tool_result_late", {
        "call_id": "c1", "completeness": "complete", "is_error": False, "preview": "ok",
    }, TOOL_ACTOR)
    woken(log, late)
    log.refused()


def test_no_wake_after_a_tree_cancel_that_followed_the_spawn() -> None:
    log = Log()
    run(log, ("c1", 1))
    log.add("cancel_requested", {"reason": "stop everything", "scope": "tree"}, USER)
    late = ended(log, "c1", 1)
    woken(log, late)
    log.refused()


def test_no_wake_for_a_run_whose_turn_did_not_end_end_turn() -> None:
    log = Log()
    run(log, ("c1", 1), ending={"reason": "max_turns"})
    late = ended(log, "c1", 1)
    woken(log, late)
    log.refused()
