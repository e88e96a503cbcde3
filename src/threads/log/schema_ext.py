"""The declared extension over the vendored event schema: what the reference writes today that
``events.v1.schema.json`` (upstream f91d8b5c) predates.

``events.ext.schema.json`` sits beside the vendored copy, which stays a pure function of the
shared schema (``tools/sync_schema.py --check`` still guards it). The extension lists
``event_types`` it adds to ``$defs/KnownTag``, ``$defs`` of its own (an ``ev_<type>`` for each
added type) and, under ``replaces``, the vendored definitions it widens. Each entry names its
source in the upstream digest under ``sources``. Merging refuses an extension that would shadow a
vendored definition without declaring it, re-add a known type, or add a type without its
``ev_<type>``: the merge is explicit or it fails loudly at load.
Invariant: the result is a pure function of the two files; neither is modified.
"""

from __future__ import annotations

import copy

from threads.log.json_types import JsonObject, JsonValue


def json_object(value: JsonValue, where: str) -> JsonObject:
    """``value`` when it is a JSON object; ``ValueError`` naming ``where`` else (a schema file
    of the wrong shape fails loudly at load)."""
    if not isinstance(value, dict):
        raise ValueError(f"schema: {where} is not an object")
    return value


def json_array(value: JsonValue, where: str) -> list[JsonValue]:
    """``value`` when it is a JSON array; ``ValueError`` naming ``where`` else."""
    if not isinstance(value, list):
        raise ValueError(f"schema: {where} is not an array")
    return value


def known_tags(schema: JsonObject) -> list[JsonValue]:
    """``$defs/KnownTag/properties/type/enum`` of ``schema``: the event types it knows."""
    known = json_object(json_object(schema["$defs"], "$defs")["KnownTag"], "KnownTag")
    tag = json_object(json_object(known["properties"], "KnownTag.properties")["type"], "type")
    return json_array(tag["enum"], "KnownTag's type enum")


def merge_extension(vendored: JsonObject, extension: JsonObject) -> JsonObject:
    """``vendored`` with ``extension``'s definitions and event types merged in (a new dict)."""
    merged = copy.deepcopy(vendored)
    defs = json_object(merged["$defs"], "$defs")
    replaces = set(json_array(extension.get("replaces", []), "replaces"))
    sources = json_object(extension.get("sources", {}), "sources")
    added = json_object(extension["$defs"], "the extension's $defs")
    for name, definition in added.items():
        if (name in defs) != (name in replaces):
            state = "shadows a vendored definition" if name in defs else "replaces nothing"
            raise ValueError(f"schema extension: {name} {state} (see its 'replaces' list)")
        if name not in sources:
            raise ValueError(f"schema extension: {name} names no source in the digest")
        defs[name] = copy.deepcopy(definition)
    known = known_tags(merged)
    for event_type in json_array(extension["event_types"], "event_types"):
        if event_type in known:
            raise ValueError(f"schema extension: {event_type} is already a known type")
        if f"ev_{event_type}" not in added:
            raise ValueError(f"schema extension: {event_type} has no ev_{event_type}")
        known.append(event_type)
    return merged
