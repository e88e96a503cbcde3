"""The reader's ``ask_user`` rules, each a log refused at the breaking event's seq
(``invalid_transition``) next to the same log written correctly: a park on input names a pending
``ask_user`` whose input can be asked (rule 48: two or more options, non-empty and distinct
under ``norm``, no comma or line break with ``multi_select``, which needs options); an answer
with options is one offered option exactly, or distinct offered options joined by LF (rule 25);
``answer_rejected`` keeps the question open and needs one (rule 49). Also the matching the writer
uses (``match_answer``), built on the same ``norm``."""

from __future__ import annotations

from typing import Any

import pytest
from test_reader_rules import Log

from threads.log.fold.questions import input_problem, match_answer, norm
from threads.testing.sample_log import USER

DELIVERY = {
    "channel": "slack", "conversation": "C1", "delivery_id": "d1", "installation": "local",
    "item_key": "slack:d1", "text": "purple",
}


def asked(log: Log, park: bool = True, **question: Any) -> None:
    log.user()
    log.called(name="ask_user", question="Which color?", **question)
    if park:
        log.add("parked", {"address": {"id": "c1", "kind": "input"}, "reason": "awaiting_input"})


def answer(log: Log, text: str) -> None:
    log.add("tool_result", {
        "call_id": "c1", "completeness": "complete", "is_error": False, "origin": "answered",
        "preview": text,
    }, USER)


BAD_OPTIONS: list[dict[str, Any]] = [
    {"options": ["red"]},
    {"options": ["red", "  RED\u2028"]},
    {"options": ["Red", "red "]},
    {"options": ["red", "\ufeff\t"]},
    {"options": ["red, dark", "blue"], "multi_select": True},
    {"options": ["red\rdark", "blue"], "multi_select": True},
    {"multi_select": True},
]


@pytest.mark.parametrize("question", BAD_OPTIONS)
def test_a_park_on_a_question_that_cannot_be_asked_is_refused(question: dict[str, Any]) -> None:
    log = Log()
    asked(log, **question)
    log.refused()


@pytest.mark.parametrize("question", [
    {}, {"options": ["red", "Straße", "STRASSE"]}, {"options": ["\x1c", "red"]},
])
def test_a_question_that_can_be_asked_parks(question: dict[str, Any]) -> None:
    """Case is folded for ASCII only (Straße and STRASSE are two options) and only the
    ECMAScript white space is trimmed (U+001C is text)."""
    log = Log()
    asked(log, **question)
    assert log.read().status == "parked"


def test_a_park_on_input_names_a_pending_ask_user_call() -> None:
    log = Log()
    log.user()
    log.called(name="do", question="Which color?")
    log.add("parked", {"address": {"id": "c1", "kind": "input"}, "reason": "awaiting_input"})
    log.refused()


@pytest.mark.parametrize(("question", "text", "ok"), [
    ({"options": ["red", "blue"]}, "blue", True),
    ({"options": ["red", "blue"]}, "Blue", False),
    ({"options": ["red", "blue"]}, "green", False),
    ({"options": ["red", "blue"], "multi_select": True}, "blue\nred", True),
    ({"options": ["red", "blue"], "multi_select": True}, "blue\nblue", False),
    ({"options": ["red", "blue"], "multi_select": True}, "blue, red", False),
    ({}, "anything at all", True),
])
def test_an_answer_is_one_of_the_options(question: dict[str, Any], text: str, ok: bool) -> None:
    log = Log()
    asked(log, **question)
    answer(log, text)
    if ok:
        assert log.read().status == "in_turn"
    else:
        log.refused()


def test_a_rejected_answer_keeps_the_question_open() -> None:
    log = Log()
    asked(log, options=["red", "blue"])
    delivery = log.add("channel_delivery", DELIVERY, USER)
    log.add("answer_rejected", {
        "call_id": "c1", "delivery_event_id": delivery.event_id, "reason": "not_an_option",
    })
    fold = log.read()
    assert fold.status == "parked"
    assert ("input", "c1") in fold.parks
    answer(log, "red")
    assert log.read().status == "in_turn"


@pytest.mark.parametrize("park", [False, True])
def test_a_rejection_needs_an_open_question_and_its_delivery(park: bool) -> None:
    log = Log()
    asked(log, park=park, options=["red", "blue"])
    other = log.add("channel_delivery", DELIVERY, USER) if not park else log.events[-1]
    log.add("answer_rejected", {
        "call_id": "c1", "delivery_event_id": other.event_id, "reason": "not_an_option",
    })
    log.refused()


def test_a_rejection_after_the_answer_is_refused() -> None:
    log = Log()
    asked(log, options=["red", "blue"])
    delivery = log.add("channel_delivery", DELIVERY, USER)
    answer(log, "red")
    log.add("answer_rejected", {
        "call_id": "c1", "delivery_event_id": delivery.event_id, "reason": "not_an_option",
    })
    log.refused()


def test_norm_trims_the_ecmascript_set_and_folds_ascii_only() -> None:
    assert norm("\ufeff\u00a0\u2028 Ab\u3000") == "ab"
    assert norm("\x1cA") == "\x1ca"  # not ECMAScript white space (str.strip would drop it)
    assert norm("ÄB") == "Äb"


@pytest.mark.parametrize(("question", "reply", "recorded"), [
    ({"options": ["Red", "Blue"]}, " blue ", "Blue"),
    ({"options": ["Red", "Blue"]}, "2", "Blue"),
    ({"options": ["Red", "Blue"], "multi_select": True}, "blue, RED\nblue", "Blue\nRed"),
    ({"options": ["Red", "Blue"], "multi_select": True}, ["1", "blue"], "Red\nBlue"),
    ({}, ["line one", "line two"], "line one\nline two"),
])
def test_matching_records_the_offered_spelling(
    question: dict[str, Any], reply: str | list[str], recorded: str
) -> None:
    assert match_answer(question, reply) == recorded


@pytest.mark.parametrize(("question", "reply"), [
    ({"options": ["1", "2", "three"]}, "3"),  # an option is a number: no numbering
    ({"options": ["Red", "Blue"]}, "3"),
    ({"options": ["Red", "Blue"]}, ["red", "blue"]),
    ({}, "  \u2028"),
])
def test_matching_refuses_what_is_not_an_answer(
    question: dict[str, Any], reply: str | list[str]
) -> None:
    with pytest.raises(ValueError, match="answer"):
        match_answer(question, reply)


def test_input_problem_names_the_rule() -> None:
    assert input_problem({"question": "q", "options": ["a", "b"]}) is None
    assert "two" in (input_problem({"question": "q", "options": ["a"]}) or "")
    assert "needs options" in (input_problem({"question": "q", "multi_select": True}) or "")
