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
from typing import Any


def merge_extension(vendored: dict[str, Any], extension: dict[str, Any]) -> dict[str, Any]:
    """``vendored`` with ``extension``'s definitions and event types merged in (a new dict)."""
    merged = copy.deepcopy(vendored)
    defs: dict[str, Any] = merged["$defs"]
    replaces = set(extension.get("replaces", ()))
    sources = extension.get("sources", {})
    for name, definition in extension["$defs"].items():
        if (name in defs) != (name in replaces):
            state = "shadows a vendored definition" if name in defs else "replaces nothing"
            raise ValueError(f"schema extension: {name} {state} (see its 'replaces' list)")
        if name not in sources:
            raise ValueError(f"schema extension: {name} names no source in the digest")
        defs[name] = copy.deepcopy(definition)
    known: list[str] = defs["KnownTag"]["properties"]["type"]["enum"]
    for event_type in extension["event_types"]:
        if event_type in known:
            raise ValueError(f"schema extension: {event_type} is already a known type")
        if f"ev_{event_type}" not in extension["$defs"]:
            raise ValueError(f"schema extension: {event_type} has no ev_{event_type}")
        known.append(event_type)
    return merged
