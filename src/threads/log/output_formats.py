"""The ``format`` values an output schema may assert, and what each accepts.

UPSTREAM-DIGEST-2 §4 names six formats and defines each; anything else is unsupported (the
evaluator refuses such a schema, it never ignores the keyword). A format constrains strings
only: for any other JSON type the predicate is not asked. Every pattern here is matched whole
(``fullmatch``) with ASCII digits, so ``"2026-12-03\\n"`` or Arabic-Indic digits never pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
# RFC 3339 §5.6 partial-time + time-offset. Seconds stop at 59: the digest's ``time`` has no
# leap second, although RFC 3339 allows time-second 60.
_TIME = re.compile(
    r"(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))", re.ASCII
)
_DATE_TIME = re.compile(r"(.{10})[Tt](.*)", re.ASCII | re.DOTALL)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\t\n\f\r ]*", re.DOTALL)
_UUID = re.compile(
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
)
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _leap(year: int) -> bool:
    """Proleptic Gregorian: every 4th year, but not centuries unless divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def is_date(text: str) -> bool:
    """RFC 3339 full-date ``YYYY-MM-DD`` with the month's real length (29 Feb in leap years)."""
    match = _DATE.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(g) for g in match.groups())
    if not 1 <= month <= 12:
        return False
    days = 29 if month == 2 and _leap(year) else _DAYS[month - 1]
    return 1 <= day <= days


def is_time(text: str) -> bool:
    """RFC 3339 full-time: ``HH:MM:SS``, an optional fraction, then ``Z``/``z`` or ``±HH:MM``
    (the offset is required); hours 00-23, minutes and seconds 00-59 (no leap second)."""
    match = _TIME.fullmatch(text)
    if match is None:
        return False
    hour, minute, second, off_hour, off_minute = match.groups()
    if not (int(hour) <= 23 and int(minute) <= 59 and int(second) <= 59):
        return False
    return off_hour is None or (int(off_hour) <= 23 and int(off_minute) <= 59)


def is_date_time(text: str) -> bool:
    """RFC 3339 date-time: a full-date, ``T`` or ``t``, a full-time."""
    match = _DATE_TIME.fullmatch(text)
    return match is not None and is_date(match.group(1)) and is_time(match.group(2))


def is_email(text: str) -> bool:
    """A local part of characters other than ``@`` and whitespace, one ``@``, then a domain of
    at least two non-empty dot-separated labels of the same characters."""
    local, at, domain = text.partition("@")
    if not at or not local or any(c.isspace() or c == "@" for c in text.replace("@", "", 1)):
        return False
    labels = domain.split(".")
    return len(labels) >= 2 and all(labels)


def is_uri(text: str) -> bool:
    """A scheme (``[A-Za-z][A-Za-z0-9+.-]*``), ``:``, then anything without ASCII whitespace
    (tab, line feed, form feed, carriage return, space: the WHATWG set)."""
    return _URI.fullmatch(text) is not None


def is_uuid(text: str) -> bool:
    """8-4-4-4-12 hex digits, either case, any version or variant."""
    return _UUID.fullmatch(text) is not None


FORMATS: dict[str, Callable[[str], bool]] = {
    "date": is_date,
    "time": is_time,
    "date-time": is_date_time,
    "email": is_email,
    "uri": is_uri,
    "uuid": is_uuid,
}
