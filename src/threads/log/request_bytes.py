"""A rendered request's bytes as the pieces they are made of, joined only where whole bytes are
needed (``bytes(request)``).

A conversation's next request is the previous one plus its newest lines, and joining it into
one bytes object costs time linear in the conversation, every step. A store that keeps requests
as deltas (``threads.store.request_deltas``) needs only what the request extends (``base``) and
the bytes it adds (``added``), and the tail of the base (``last``). Invariant: ``parts[:count]``
are the request's bytes, ``size`` long with sha256 ``sha256``, and ``starts[i]`` is the offset
of ``parts[i]`` in them; with a ``base``, ``parts[:base.count]`` are the bytes of request
``base.sha256`` (``base.size`` long). ``parts`` and ``starts`` may be lists that grow later (a
renderer's, kept to be extended): only their first ``count`` items belong to this request, and
those never change.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["Extends", "RequestBytes"]


@dataclass(frozen=True, slots=True)
class Extends:
    """The request another one starts with: its sha256, length and number of parts."""

    sha256: str
    size: int
    count: int


@dataclass(frozen=True, slots=True)
class RequestBytes:
    parts: list[bytes]
    starts: list[int]
    count: int
    size: int
    sha256: str
    base: Extends | None = None

    def __bytes__(self) -> bytes:
        if self.count == len(self.parts):
            return b"".join(self.parts)
        return b"".join(self.parts[: self.count])

    def __len__(self) -> int:
        return self.size

    def added(self) -> bytes:
        """The bytes after ``base`` (all of them without one)."""
        return b"".join(self.parts[0 if self.base is None else self.base.count : self.count])

    def last(self, limit: int) -> bytes:
        """The request's last ``limit`` bytes (all of them when it is shorter)."""
        offset = max(self.size - limit, 0)
        first = max(bisect_right(self.starts, offset, 0, self.count) - 1, 0)
        tail = b"".join(self.parts[first : self.count])
        return tail[offset - self.starts[first] :] if self.count else tail
