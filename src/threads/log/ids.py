"""Identifiers: UUIDv7 minting (time-ordered, lowercase) and the derived effect key.

Writers mint UUIDv7 from an injected clock so ids sort by creation; readers accept any lowercase
UUID. The effect key ``<branch_id>:<call_id>`` is derived, never stored.
"""

from __future__ import annotations

import os
import re
import threading

UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
CALL_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def uuid7(now_ms: int) -> str:
    """A UUIDv7 for ``now_ms``; ids minted in the same millisecond still increase (a 12-bit
    counter seeded randomly fills ``rand_a``)."""
    global _last_ms, _counter
    with _lock:
        if now_ms <= _last_ms:
            now_ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:
                now_ms += 1
                _counter = 0
        else:
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        _last_ms = now_ms
        counter = _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (now_ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def effect_key(branch_id: str, call_id: str) -> str:
    """The provider idempotency key of a tool call: stable across every retry of that call."""
    return f"{branch_id}:{call_id}"
