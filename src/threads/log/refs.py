"""The artifacts a log references: every ``ArtifactRef`` the format places in an event.

Refs sit in a fixed set of places (spec: ``ArtifactRef`` in the events' schema): a top-level
data field named ``ref`` or ending in ``_ref`` (request_ref, result_ref, dropped_ref,
summary_ref, ...), and the ``ref`` of a content part (an image, a document, reasoning). Free
JSON (tool input, model params) is never searched, so a tool argument that happens to look like
a ref is not one. A tool call id minted by normalization (``threads.models.normalize``) names the
artifact holding the provider's own id. Invariant: the result is in log order, without repeats.
``first_reference`` finds where a missing artifact is first needed, so a verifier reports it at
that seq when it comes before any other failure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator

from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import Event

# ``pc_<sha256>``: a call id normalization minted; the artifact holds the provider's id.
PROVIDER_CALL_ID = re.compile(r"^pc_([0-9a-f]{64})$")
PROVIDER_CALL_ID_MEDIA_TYPE = "application/json"


def referenced_artifacts(events: Iterable[Event]) -> dict[str, str]:
    """sha256 → media type of each artifact ``events`` reference, once, in log order."""
    refs: dict[str, str] = {}
    for event in events:
        for sha256, media_type in _refs(event.data):
            refs.setdefault(sha256, media_type)
    return refs


def first_reference(
    events: Iterable[Event], wanted: Collection[str], *, before: int | None = None
) -> tuple[Event, str] | None:
    """The first event (seq below ``before``, if given) referencing one of ``wanted``, and
    that artifact's sha256."""
    for event in events:
        if before is not None and event.seq >= before:
            return None
        for sha256, _ in _refs(event.data):
            if sha256 in wanted:
                return event, sha256
    return None


def _refs(data: JsonObject) -> Iterator[tuple[str, str]]:
    for key, value in data.items():
        if key == "ref" or key.endswith("_ref"):
            yield from _ref(value)
    content = data.get("content")
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        yield from _ref(part.get("ref"))
        call_id = part.get("call_id") if part.get("type") == "tool_use" else None
        match = PROVIDER_CALL_ID.match(call_id) if isinstance(call_id, str) else None
        if match is not None:
            yield match.group(1), PROVIDER_CALL_ID_MEDIA_TYPE


def _ref(value: JsonValue) -> Iterator[tuple[str, str]]:
    sha256 = value.get("sha256") if isinstance(value, dict) else None
    if isinstance(value, dict) and isinstance(sha256, str):
        yield sha256, str(value.get("media_type", "application/octet-stream"))
