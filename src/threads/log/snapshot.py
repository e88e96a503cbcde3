"""A read-only view of the first ``count`` items of a list that only grows (``Snapshot``): what
a renderer hands out of the lines it keeps extending, without copying them every request.

Invariant: the list is only ever appended to, so the view's items never change; it reads and
compares like a list of them (``==`` against any sequence of the same items).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import TypeVar, overload

__all__ = ["Snapshot"]

T = TypeVar("T")


class Snapshot(Sequence[T]):
    __slots__ = ("_count", "_items")

    def __init__(self, items: list[T], count: int | None = None) -> None:
        self._items = items
        self._count = len(items) if count is None else count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        picked = range(self._count)[index]  # IndexError past the end, as a list's
        if isinstance(picked, int):
            return self._items[picked]
        if picked.step == 1:
            return self._items[picked.start : picked.stop]
        return [self._items[i] for i in picked]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._count and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which have no hash

    def __repr__(self) -> str:
        return f"Snapshot({list(self)!r})"
