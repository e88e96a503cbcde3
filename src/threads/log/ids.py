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

POOL_BYTES = 4096  # OS randomness read at once: one getrandom call per ~400 ids


class _Entropy:
    """Bytes from ``os.urandom``, read a pool at a time. Each call to ``os.urandom`` lets go of
    the GIL, and taking it back behind a busy store thread cost ~40 µs per id under load; the
    bytes are the same OS randomness, each handed out once. A forked child drops the pool it
    inherited (its parent hands out the same bytes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0

    def take(self, count: int) -> bytes:
        with self._lock:
            if self._at + count > len(self._pool):
                self._pool, self._at = os.urandom(max(POOL_BYTES, count)), 0
            start = self._at
            self._at = start + count
            return self._pool[start : start + count]

    def forget(self) -> None:
        self._lock = threading.Lock()  # a lock held by another thread at the fork stays held
        self._pool, self._at = b"", 0


_entropy = _Entropy()
os.register_at_fork(after_in_child=_entropy.forget)


def random_bytes(count: int) -> bytes:
    """``count`` bytes of OS randomness (``os.urandom``'s), from the pool."""
    return _entropy.take(count)


_MS_BITS = (1 << 48) - 1
_VERSION_AND_VARIANT = 0x7 << 76 | 0b10 << 62
_RAND_B_BITS = (1 << 62) - 1


def uuid7(now_ms: int) -> str:
    """A UUIDv7 for ``now_ms``; ids minted in the same millisecond still increase (a 12-bit
    counter seeded randomly fills ``rand_a``)."""
    global _last_ms, _counter
    rand = int.from_bytes(random_bytes(10), "big")  # 62 bits of rand_b, 11 to seed a counter
    with _lock:
        if now_ms <= _last_ms:
            now_ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:
                now_ms += 1
                _counter = 0
        else:
            _counter = (rand >> 64) & 0x7FF
        _last_ms = now_ms
        counter = _counter
    value = (now_ms & _MS_BITS) << 80 | _VERSION_AND_VARIANT | counter << 64 | rand & _RAND_B_BITS
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def effect_key(branch_id: str, call_id: str) -> str:
    """The provider idempotency key of a tool call: stable across every retry of that call."""
    return f"{branch_id}:{call_id}"
