"""How the CLI shows values to a person: times (ISO and relative), principals, lease holders,
tool arguments (pretty JSON with long values cut) and tables.

Invariant: rendering only; nothing here reads a store or decides anything. What is cut is
marked (``…(+N chars)``), so a shortened value never reads as the whole value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from threads.clock import utc_iso
from threads.principal import Principal
from threads.store.holder import parse, provably_gone
from threads.store.protocol import LeaseState

MAX_STRING = 200  # characters of one string argument shown before it is cut
MAX_ITEMS = 20  # items of one list (or keys of one object) shown before it is cut


def iso(ms: int) -> str:
    """``2026-12-01T09:15:03.120Z``: a Unix-ms time in UTC, to the millisecond."""
    return utc_iso(ms)


def relative(ms: int, now_ms: int) -> str:
    """``in 23.4 s``, ``5 min ago``, ``in 2 h 5 min``, ``3 d ago``."""
    delta = (ms - now_ms) / 1000
    span = abs(delta)
    if span < 60:
        text = f"{span:.1f} s"
    elif span < 3600:
        text = f"{int(span // 60)} min"
    elif span < 86_400:
        text = f"{int(span // 3600)} h {int(span % 3600 // 60)} min"
    else:
        text = f"{int(span // 86_400)} d"
    return f"in {text}" if delta >= 0 else f"{text} ago"


def when(ms: int, now_ms: int) -> str:
    return f"{iso(ms)} ({relative(ms, now_ms)})"


def principal(value: Principal | Mapping[str, Any] | None) -> str:
    """``issuer/tenant/subject``, or ``-`` for none."""
    if value is None:
        return "-"
    if isinstance(value, Principal):
        return f"{value.issuer}/{value.tenant}/{value.subject}"
    return f"{value.get('issuer')}/{value.get('tenant')}/{value.get('subject')}"


def lease(state: LeaseState | None) -> str:
    """One phrase for a branch's lease: free, held (by whom, until when), or held by a dead
    process of this host (the next run takes it over at once)."""
    if state is None or state.expires_at == 0:
        return "free"
    if not state.live:
        return f"free (expired {relative(state.expires_at, state.now)})"
    holder = parse(state.holder_id)
    if provably_gone(holder):
        return f"free: {holder.describe()} died (its lease is taken over at once)"
    return f"held by {holder.describe()}, expires {relative(state.expires_at, state.now)}"


def arguments(value: Any, *, indent: str = "") -> str:
    """Pretty JSON of tool arguments, with long strings and lists cut (and marked)."""
    text = json.dumps(_cut(value), indent=2, ensure_ascii=False, sort_keys=True)
    return "\n".join(indent + line for line in text.splitlines())


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_STRING:
        return f"{value[:MAX_STRING]}…(+{len(value) - MAX_STRING} chars)"
    if isinstance(value, list):
        shown = [_cut(item) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            shown.append(f"…(+{len(value) - MAX_ITEMS} items)")
        return shown
    if isinstance(value, dict):
        keys = sorted(value)
        shown_dict = {key: _cut(value[key]) for key in keys[:MAX_ITEMS]}
        if len(keys) > MAX_ITEMS:
            shown_dict["…"] = f"(+{len(keys) - MAX_ITEMS} keys)"
        return shown_dict
    return value


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in [header, *rows]
    ]
