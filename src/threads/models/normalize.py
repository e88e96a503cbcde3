"""Provider output made recordable: what a model returned, mapped onto what the log can hold.

A provider's reply is data from outside; the log admits only format-valid lines. Where a
faithful mapping exists it is applied here: a call id that breaks the ``call_id`` pattern (or
repeats one already on the thread) gets a minted id ``pc_<sha256>`` naming an artifact that holds
the provider's own id (adapters send that id back: ``ModelRequest.provider_call_ids``); an integer
past 2^53 that a double holds exactly becomes that double; a token count that is negative, past
2^53-1 or not an integer is recorded as unknown (``null``); a lone surrogate in text becomes
U+FFFD; an unknown stop reason is ``other``. What has no faithful form (NaN or infinite numbers,
an integer a double can't hold, a tool name outside the pattern, arguments that are not an
object, a reply too large or too deep for one line) raises ``Unrecordable``: the run fails with
``model_error`` and nothing of the reply is recorded.
Invariant: ``normalize_output`` never changes a reply that was already recordable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any, cast, get_args

from threads.log.canonical import MAX_DEPTH, MAX_SAFE_INT, canonical
from threads.log.hashing import sha256_hex
from threads.log.refs import PROVIDER_CALL_ID, PROVIDER_CALL_ID_MEDIA_TYPE
from threads.log.vocabulary import OutputPart, TextPart, ToolUsePart
from threads.models.protocol import ModelCallError, ModelOutput, StopReason, Usage

CALL_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


class Unrecordable(Exception):  # noqa: N818 - a refusal, raised and caught inside the loop
    """The reply has no faithful form in the log; ``str()`` says what and why."""


@dataclass(frozen=True, slots=True)
class Normalized:
    output: ModelOutput
    # Artifacts (bytes, media type) the normalized output references: provider call ids.
    artifacts: list[tuple[bytes, str]]


def normalize_output(output: ModelOutput, taken_call_ids: Set[str]) -> Normalized:
    """``output`` as the log can hold it; ``taken_call_ids`` are the ids already on the thread
    (a call id is unique along the chain; only read)."""
    taken = _Taken(taken_call_ids)
    artifacts: list[tuple[bytes, str]] = []
    content: list[OutputPart] = []
    given: Sequence[object] = output.content  # a Model may hand anything: it is checked here
    for part in given:
        if not isinstance(part, Mapping):
            raise Unrecordable(f"a reply part is not an object: {part!r:.80}")
        # Each part leaves as the OutputPart its type names; line admission then checks it
        # against the schema before anything is written.
        if part.get("type") == "tool_use":
            content.append(_tool_use(part, taken, artifacts))
        elif part.get("type") == "text" and isinstance(text := part.get("text"), str):
            content.append(cast(TextPart, {**part, "text": valid_text(text)}))
        else:
            content.append(cast(OutputPart, {k: _json(v, f"part {k}") for k, v in part.items()}))
    stop = output.stop_reason if output.stop_reason in _STOP_REASONS else "other"
    usage = Usage(*(_tokens(getattr(output.usage, f)) for f in _USAGE_FIELDS))
    normalized = replace(output, content=content, stop_reason=stop, usage=usage)
    return Normalized(normalized, artifacts)


class _Taken:
    """The call ids in use: the thread's (read, never copied: there is one per call so far)
    and those this reply has taken."""

    def __init__(self, thread: Set[str]) -> None:
        self._thread = thread
        self._reply: set[str] = set()

    def __contains__(self, call_id: str) -> bool:
        return call_id in self._reply or call_id in self._thread

    def add(self, call_id: str) -> None:
        self._reply.add(call_id)


def unrecordable_reply(why: str) -> ModelCallError:
    return ModelCallError(
        f"the model's reply can't be recorded faithfully ({why}); nothing of it was kept. The"
        " provider (or a proxy in front of it) sent output outside the format: check it, then"
        " run the thread again",
        reason="provider_error",
        provider_outcome="unknown",
        code="model_error",
    )


def minted_sha256(call_id: str) -> str | None:
    """The artifact sha256 a minted call id names, or None for an id the provider chose."""
    match = PROVIDER_CALL_ID.match(call_id)
    return match.group(1) if match else None


_USAGE_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
)


def _tool_use(
    part: Mapping[str, Any], taken: _Taken, artifacts: list[tuple[bytes, str]]
) -> ToolUsePart:
    name = part.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise Unrecordable(f"the model called a tool named {name!r:.80}, which no tool can have")
    arguments = part.get("input")
    if not isinstance(arguments, Mapping):
        raise Unrecordable(f"the arguments of tool call {name!r} are not an object")
    raw_id = part.get("call_id")
    provider_id = raw_id if isinstance(raw_id, str) else ""
    call_id = provider_id
    if not CALL_ID.match(call_id) or call_id in taken or minted_sha256(call_id) is not None:
        call_id = _mint(provider_id, taken, artifacts)
    taken.add(call_id)
    arguments = _json(dict(arguments), f"{name} arguments")
    return cast(ToolUsePart, {**part, "call_id": call_id, "input": arguments})


def _mint(provider_id: str, taken: _Taken, artifacts: list[tuple[bytes, str]]) -> str:
    """A valid, unused id naming the artifact that keeps ``provider_id``; deterministic (the
    same reply on the same thread mints the same ids), and distinct for repeats of one id."""
    occurrence = 1
    while True:
        artifact = canonical({"occurrence": occurrence, "provider_call_id": provider_id})
        call_id = f"pc_{sha256_hex(artifact)}"
        if call_id not in taken:
            artifacts.append((artifact, PROVIDER_CALL_ID_MEDIA_TYPE))
            return call_id
        occurrence += 1


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (no UTF-8 form) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _json(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as exact JSON: text made valid, big integers as the double that holds them."""
    if depth > MAX_DEPTH:
        raise Unrecordable(f"{where} nest deeper than a log line may ({MAX_DEPTH} levels)")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) <= MAX_SAFE_INT:
            return value
        as_double = float(value) if abs(value) < 2**1024 else math.inf
        if math.isfinite(as_double) and int(as_double) == value:
            return as_double
        raise Unrecordable(f"{where} hold the integer {value}, which JSON readers can't keep exact")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unrecordable(f"{where} hold {value}, which has no JSON form")
        return value
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, Mapping):
        return {valid_text(str(k)): _json(v, where, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v, where, depth + 1) for v in value]
    raise Unrecordable(f"{where} hold a {type(value).__name__}, which is not JSON")


def _tokens(value: Any) -> int | None:
    """A token count as recorded: a measured count, else unknown (never a made-up number)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SAFE_INT:
        return value
    return None
