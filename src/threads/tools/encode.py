"""How a tool's return value becomes the text the log records and the model reads.

A string is kept as it is; any other value is encoded the way Pydantic encodes it for JSON
(models, dataclasses, datetimes, decimals, UUIDs, enums, sets, tuples...), then written as JSON.
Text is always made valid UTF-8 (a lone surrogate becomes U+FFFD, and the text says so first).
Invariant: nothing here raises. A value that still can't be encoded becomes a text that says so,
because by then the tool has returned and its effect may have happened: such a result is a
success the model can read, never an error that would make it call again.
"""

from __future__ import annotations

import json
import logging

from pydantic_core import to_jsonable_python

from threads.log.canonical import canonical

log = logging.getLogger("threads")


def result_text(value: object) -> str:
    """The text for ``value``, a tool's return value (or a reconcile lookup's found value)."""
    if isinstance(value, str):
        return valid_text(value)
    try:
        jsonable = to_jsonable_python(value)
    except Exception as exc:
        return _unencodable(value, exc)
    failure: Exception | None = None
    # Canonical JSON first (one spelling, as before); plain JSON carries what it refuses (NaN,
    # a lone surrogate in a key) to the model all the same.
    for write in (_canonical, _plain):
        try:
            return valid_text(write(jsonable))
        except Exception as exc:
            failure = exc
    assert failure is not None
    return _unencodable(value, failure)


def _canonical(jsonable: object) -> str:
    return canonical(jsonable).decode("utf-8")


def _plain(jsonable: object) -> str:
    return json.dumps(jsonable, ensure_ascii=False, separators=(",", ":"))


def valid_text(text: str) -> str:
    """``text`` as valid UTF-8: lone surrogates replaced by U+FFFD, with a note in front (so the
    preview shows it) saying how many were replaced."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    # A surrogate pair spelled as two code points is joined; a lone one becomes U+FFFD.
    fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    replaced = sum(1 for ch in fixed if ch == "\ufffd") - text.count("\ufffd")
    note = f"[threads replaced {replaced} invalid character(s) (lone surrogates) with U+FFFD]"
    return f"{note}\n{fixed}"


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` for an exception a tool raised, even when its ``str`` raises."""
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    return valid_text(f"{type(exc).__name__}: {message}")


def _unencodable(value: object, exc: BaseException) -> str:
    kind = type(value).__name__
    log.warning("a tool returned a %s that threads cannot encode", kind, exc_info=exc)
    return valid_text(
        f"the tool finished, but it returned a {kind} that threads cannot encode as JSON"
        f" ({describe_exception(exc)}); its value is not shown. Do not call it again for this:"
        " it already ran."
    )
