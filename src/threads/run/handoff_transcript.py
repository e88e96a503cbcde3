"""The transcript a handoff forwards (``handoff{forwarded: transcript}``): the conversation of the
source thread as ``text/plain`` lines joined by ``\\n``, stored as the handoff's
``forwarded_ref`` and shown to the target as an untrusted reference.

Lines, in log order: ``user: <text>`` per user input and steer, ``assistant: <text>`` per reply
with non-empty text (its text parts joined); and, for the handing-off turn only (after the last
``user_input`` or ``woken``), ``tool_call <call_id> <name>: <RFC 8785 input>`` (never the
handoff call itself) and ``tool_result <call_id>: <preview>`` (``(error)`` after the id for an
error). The tool lines together are kept within ``spill.threshold_bytes``: the oldest are dropped
and a ``[<n> earlier tool lines dropped]`` line stands where the first dropped one was.
Invariant: a pure function of the events and the pinned policy, so every run of the same log
forwards the same bytes (the artifact's hash is the same).
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.log.canonical import canonical
from threads.log.lines import Event
from threads.log.vocabulary import InputPart, Policy, data_of

DEFAULT_SPILL_BYTES = 32_768  # the digest's default spill.threshold_bytes
TURN_OPENERS = ("user_input", "woken")


def spill_threshold(policy: Policy) -> int:
    """``policy.context.spill.threshold_bytes``, or its default when no context is pinned."""
    context = policy.get("context")
    return DEFAULT_SPILL_BYTES if context is None else context["spill"]["threshold_bytes"]


def transcript(events: Sequence[Event], handoff_call_id: str, threshold_bytes: int) -> bytes:
    """The forwarded transcript of ``events`` (the source's log through the handing-off
    reply's calls), UTF-8."""
    turn_start = max((e.seq for e in events if e.type in TURN_OPENERS), default=0)
    lines: list[str] = []
    tool_at: list[int] = []  # the index in ``lines`` of each tool line
    for event in events:
        line = _line(event, handoff_call_id, in_turn=event.seq >= turn_start)
        if line is None:
            continue
        if event.type in ("tool_call", "tool_result"):
            tool_at.append(len(lines))
        lines.append(line)
    return "\n".join(_capped(lines, tool_at, threshold_bytes)).encode("utf-8")


def _line(event: Event, handoff_call_id: str, *, in_turn: bool) -> str | None:
    kind = event.type
    if kind in ("user_input", "steer"):
        said = data_of(event, "user_input") if kind == "user_input" else data_of(event, "steer")
        return f"user: {_input_text(said.get('text'), said.get('content', []))}"
    if kind in ("model_response", "model_response_recovered"):
        content = data_of(event, "model_response")["content"] if kind == "model_response" else (
            data_of(event, "model_response_recovered")["content"]
        )
        text = "".join(part["text"] for part in content if part["type"] == "text")
        return f"assistant: {text}" if text else None
    if not in_turn:
        return None
    if kind == "tool_call":
        call = data_of(event, "tool_call")
        if call["call_id"] == handoff_call_id:
            return None
        return f"tool_call {call['call_id']} {call['name']}: {canonical(call['input']).decode()}"
    if kind == "tool_result":
        result = data_of(event, "tool_result")
        if result["call_id"] == handoff_call_id:
            return None
        error = " (error)" if result["is_error"] else ""
        return f"tool_result {result['call_id']}{error}: {result['preview']}"
    return None


def _input_text(text: str | None, content: Sequence[InputPart]) -> str:
    if text is not None:
        return text
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def _capped(lines: list[str], tool_at: list[int], threshold_bytes: int) -> list[str]:
    """``lines`` with the oldest tool lines dropped until the rest (each with its line break)
    fit in ``threshold_bytes``; the marker takes the place of the first dropped line."""
    sizes = [len(lines[i].encode("utf-8")) + 1 for i in tool_at]
    total, dropped = sum(sizes), 0
    while total > threshold_bytes and dropped < len(tool_at):
        total -= sizes[dropped]
        dropped += 1
    if dropped == 0:
        return lines
    gone = set(tool_at[:dropped])
    out: list[str] = []
    for i, line in enumerate(lines):
        if i == tool_at[0]:
            out.append(f"[{dropped} earlier tool lines dropped]")
        if i not in gone:
            out.append(line)
    return out
