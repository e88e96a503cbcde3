"""Server-side paging of the host's lists (threads, inbox): ``?limit=`` and an opaque
``?cursor=`` naming the sort key of the last item the previous page held; the next page's
address goes in a ``Link: <...>; rel="next"`` header (none on the last page).

Invariant: a page holds the items whose sort key comes strictly after the cursor's, in key
order, so paging never repeats or skips an item that kept its place, whatever was added or
changed between two pages. A cursor this host did not make is 400 ``invalid_cursor``; a limit
outside 1..``max_limit`` is 400 ``invalid_request``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse

from threads.host.failure import HostError

T = TypeVar("T")
Key = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int
    after: Key | None


def page_request(
    request: Request, shape: tuple[type, ...], *, default_limit: int, max_limit: int
) -> PageRequest:
    """The page the query asks for; ``shape``: the types of the sort key, in order."""
    raw_limit = request.query_params.get("limit")
    limit = default_limit
    if raw_limit is not None:
        digits = raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 6
        if not digits or not 1 <= int(raw_limit) <= max_limit:
            raise HostError("invalid_request", f"limit is a whole number from 1 to {max_limit}")
        limit = int(raw_limit)
    raw = request.query_params.get("cursor")
    return PageRequest(limit, None if raw is None else decode(raw, shape))


def page(
    items: Sequence[T], key: Callable[[T], Key], asked: PageRequest
) -> tuple[list[T], Key | None]:
    """The items after the cursor in key order, at most ``limit`` of them, and the key the
    next page starts after (None when nothing is left)."""
    ordered = sorted(items, key=key)
    if asked.after is not None:
        after = asked.after
        ordered = [item for item in ordered if key(item) > after]
    chosen = ordered[: asked.limit]
    more = len(ordered) > asked.limit
    return chosen, key(chosen[-1]) if more and chosen else None


def paged_response(request: Request, body: list[object], next_key: Key | None) -> JSONResponse:
    headers = {}
    if next_key is not None:
        url = request.url.include_query_params(cursor=encode(next_key))
        headers["link"] = f'<{url.path}?{url.query}>; rel="next"'
    return JSONResponse(body, headers=headers)


def encode(key: Key) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode(raw: str, shape: tuple[type, ...]) -> Key:
    bad = HostError("invalid_cursor", "this cursor was not made by this host's listing; start over")
    if not raw or len(raw) > 2048 or not raw.isascii():
        raise bad
    try:
        value = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if (
        not isinstance(value, list)
        or len(value) != len(shape)
        or any(type(part) is not kind for part, kind in zip(value, shape, strict=True))
    ):
        raise bad
    return tuple(value)
