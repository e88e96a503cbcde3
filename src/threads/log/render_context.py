"""What context management changes in Render v1: the summary line of a compacted range, tool
results cleared or redacted by ``context_edited``, the instruction a summarizer's request ends
with, and an output style's trusted context line (``<context source="output_style" ...>``, its
text escaped so nothing in it closes the wrapper).

A summary renders as one user line in the untrusted-reference wrapper, ``source="summary"``,
``id`` = the summary artifact's sha256, the text with ``&``, ``<`` and ``>`` escaped so nothing
in it closes the wrapper. A ``clear`` edit shows a result as one fixed text part; a ``redact``
edit replaces the merged UTF-8 byte spans of one text part with ``[redacted]``. Stored results
never change: edits apply only when rendering a request after them.
Invariant: pure functions of the events and texts given (no I/O).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from threads.log.lines import Event
from threads.log.render_lines import ToolLine
from threads.log.vocabulary import data_of

SUMMARIZE = (
    "Summarize the conversation so far for your own continuation. Keep the user's goals and"
    " constraints, decisions made, files and identifiers touched, open tasks with their status,"
    " and the next step. Reply with the summary only."
)
ADDITIONAL = "\n\nAdditional instructions:\n"
REDACTED = "[redacted]"
_GUIDE_HOOK = "before_compact"


def cleared_text(call_id: str) -> str:
    return f"[tool result cleared: call_id={call_id}; read it with read_tool_result]"


def style_body(name: str, text: str) -> str:
    """An output style: a trusted context line the model reads as the user's standing ask."""
    return (
        f'<context source="output_style" id="{html.escape(name)}">\n'
        f"{html.escape(text, quote=False)}\n</context>"
    )


def summary_body(text: str, sha256: str) -> str:
    return (
        f'<reference source="summary" id="{sha256}" untrusted="true">\n'
        f"{html.escape(text, quote=False)}\n</reference>"
    )


def merge_spans(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or adjacent half-open spans joined, in order."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with each merged UTF-8 byte span replaced by ``[redacted]``."""
    raw = text.encode("utf-8")
    out, at = bytearray(), 0
    for start, end in merge_spans(spans):
        out += raw[at:start] + REDACTED.encode()
        at = end
    out += raw[at:]
    return out.decode("utf-8")


@dataclass(slots=True)
class Edits:
    """The context edits recorded so far, by call."""

    cleared: set[str] = field(default_factory=set)
    spans: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.cleared or self.spans)

    def add(self, event: Event) -> None:
        for edit in data_of(event, "context_edited")["edits"]:
            if edit["action"] == "clear":
                self.cleared.add(edit["call_id"])
                continue
            key = (edit["call_id"], edit["part"])
            self.spans.setdefault(key, []).extend((s["start"], s["end"]) for s in edit["spans"])

    def touches(self, line: ToolLine) -> bool:
        call_id = line["call_id"]
        return call_id in self.cleared or any(key[0] == call_id for key in self.spans)

    def apply(self, line: ToolLine) -> ToolLine:
        """A rendered tool line as the edits show it."""
        call_id = line["call_id"]
        if call_id in self.cleared:
            return {**line, "content": [{"type": "text", "text": cleared_text(call_id)}]}
        content = list(line["content"])
        for index, part in enumerate(content):
            spans = self.spans.get((call_id, index))
            if spans and part["type"] == "text":
                content[index] = {**part, "text": redact(part["text"], spans)}
        return {**line, "content": content}


def summary_instruction(guides: Sequence[str], instructions: str | None = None) -> str:
    """The last line of a summarizer's request: the fixed ask, then what the operator's
    request and the ``before_compact`` guides add."""
    extra = ([instructions] if instructions else []) + list(guides)
    return SUMMARIZE + (ADDITIONAL + "\n".join(extra) if extra else "")


def summary_guides(events: Sequence[Event], cause: Event | None = None) -> list[str]:
    """Reasons of the ``before_compact`` guides a summarizer's request carries: those recorded
    after the compaction request it serves, else since the previous ``model_request``."""
    reasons: list[str] = []
    for event in reversed(events):
        if cause is not None and event.seq <= cause.seq:
            break
        if cause is None and event.type == "model_request":
            break
        if event.type != "hook_decision":
            continue
        data = data_of(event, "hook_decision")
        reason = data.get("reason")
        if data["hook"] == _GUIDE_HOOK and data["decision"] == "guide" and reason:
            reasons.append(reason)
    return reasons[::-1]
