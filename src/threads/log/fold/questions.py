"""``ask_user`` questions as the log format judges them: the input rule (rule 48 upstream; the
issue calls it 46), the answer-matching rule (rule 25) and ``answer_rejected`` (rule 49).

One definition serves the writer and the reader: ``threads.run.questions`` checks a call's input
and matches a person's answer with these functions, and the fold (``threads.log.fold``) refuses
a log whose park, answer or rejection breaks them, at that event's seq (``invalid_transition``).
``norm`` trims the ECMAScript WhiteSpace and LineTerminator set at both ends and lowercases ASCII
A-Z only: no Unicode folding, so both implementations agree byte for byte.
Invariant: pure functions of the values given; nothing here does I/O.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from threads.errors import LogError
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import ToolResultData, data_of

ASK_USER = "ask_user"
LINE_BREAKS = frozenset("\n\r\u2028\u2029")
_ES_SPACE = frozenset("\t\v\f \u00a0\ufeff") | LINE_BREAKS
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _is_space(char: str) -> bool:
    return char in _ES_SPACE or unicodedata.category(char) == "Zs"


def norm(text: str) -> str:
    """``text`` as options are compared: ECMAScript trim, then ASCII-only lowercase."""
    start, end = 0, len(text)
    while start < end and _is_space(text[start]):
        start += 1
    while end > start and _is_space(text[end - 1]):
        end -= 1
    return text[start:end].translate(_ASCII_LOWER)


def input_problem(data: Mapping[str, Any]) -> str | None:
    """Why an ``ask_user`` input can't be asked (rule 48), or None when it can."""
    options = data.get("options")
    multi = data.get("multi_select", False)
    if options is None:
        return "multi_select needs options" if multi is True else None
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        return "options must be a list of strings"
    if len(options) < 2:
        return "options must offer at least two choices"
    keys = [norm(o) for o in options]
    if "" in keys:
        return "every option must have text"
    if len(set(keys)) != len(keys):
        return "options must be distinct ignoring case and surrounding spaces"
    if multi is True and any("," in o or LINE_BREAKS & set(o) for o in options):
        return "with multi_select, no option may contain a comma or a line break"
    return None


def _numbered(options: Sequence[str]) -> bool:
    """Whether a 1-based number may pick an option: no option reads as ASCII digits."""
    return not any(norm(o).isascii() and norm(o).isdigit() for o in options)


def _pick(options: Sequence[str], item: str) -> str | None:
    key = norm(item)
    for option in options:
        if norm(option) == key:
            return option
    if _numbered(options) and key.isascii() and key.isdigit() and 1 <= int(key) <= len(options):
        return options[int(key) - 1]
    return None


def match_answer(data: Mapping[str, Any], answer: str | Sequence[str]) -> str:
    """The recorded text of ``answer`` to the question ``data`` asks; ``ValueError`` says why it
    is not an answer. No options: any non-blank text as given (a list joined by LF). Options:
    one option (by ``norm``, or a 1-based number when no option is a number); ``multi_select``:
    items split on commas and line breaks, each an option, kept once in reply order, recorded as
    offered and joined by LF."""
    items = [answer] if isinstance(answer, str) else list(answer)
    if not all(isinstance(item, str) for item in items):
        raise ValueError("an answer is text (or, with multi_select, a list of texts)")
    options = data.get("options")
    if options is None:
        text = "\n".join(items)
        if not norm(text):
            raise ValueError("answer with some text")
        return text
    hint = f"answer one of: {', '.join(options)}"
    if data.get("multi_select", False) is True:
        items = [piece for item in items for piece in _split(item)]
    elif len(items) != 1:
        raise ValueError(hint)
    picked = [_pick(options, item) for item in items]
    if not picked or None in picked:
        raise ValueError(hint)
    return "\n".join(dict.fromkeys(p for p in picked if p is not None))


def _split(item: str) -> list[str]:
    for sep in LINE_BREAKS:
        item = item.replace(sep, ",")
    return [piece for piece in item.split(",") if norm(piece)]


def answer_fits(data: Mapping[str, Any], preview: str) -> bool:
    """Rule 25: with options, an answered result's text is one offered option exactly, or with
    ``multi_select`` distinct offered options joined by LF."""
    options = data.get("options")
    if options is None:
        return True
    if data.get("multi_select", False) is not True:
        return preview in options
    chosen = preview.split("\n")
    return len(set(chosen)) == len(chosen) and all(c in options for c in chosen)


# ---- the reader's rules ---------------------------------------------------------------------


class AskedCall(Protocol):
    """The part of a recorded call these rules read."""

    @property
    def name(self) -> str: ...

    @property
    def input(self) -> JsonObject: ...

    @property
    def result(self) -> ToolResultData | None: ...


def _fail(event: Event, message: str) -> LogError:
    return LogError("invalid_transition", message, seq=event.seq)


def check_question_park(event: Event, call: AskedCall | None) -> None:
    """A park on input names a pending ``ask_user`` call whose input meets rule 48."""
    call_id = data_of(event, "parked")["address"]["id"]
    if call is None or call.name != ASK_USER or call.result is not None:
        raise _fail(event, f"parked on input for {call_id!r}, which is no pending ask_user call")
    problem = input_problem(call.input)
    if problem is not None:
        raise _fail(event, f"parked on question {call_id!r} whose input can't be asked: {problem}")


def check_answer(event: Event, call: AskedCall) -> None:
    """An answered result of an ``ask_user`` call is one its options allow (rule 25)."""
    data = data_of(event, "tool_result")
    if call.name == ASK_USER and not answer_fits(call.input, data["preview"]):
        raise _fail(event, f"the answer to {data['call_id']!r} is not one of its options")


def check_rejection(event: Event, open_question: bool, delivery: Event | None) -> None:
    """Rule 49: ``answer_rejected`` names an open question and the delivery it refused."""
    if not open_question:
        call_id = data_of(event, "answer_rejected")["call_id"]
        raise _fail(event, f"answer_rejected for {call_id!r}, which has no open "
                    "question (parked on input)")
    if delivery is None or delivery.type != "channel_delivery":
        raise _fail(event, "answer_rejected names no channel_delivery on this chain")
