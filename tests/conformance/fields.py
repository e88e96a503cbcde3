"""Which fields of the case format each kind's runner acts on, and the check that a case uses
no other: a case must never pass or fail because the runner skipped part of its script.

Every document of a case (``case.json``, its expected file, ``model.json``, ``sandbox.json``)
is walked along ``case.schema.json``: an object with ``properties`` is a record (each key is a
path segment), one with only ``additionalProperties`` a map (its keys are ``*``), an array's
items are ``[]``. Each leaf path the case uses must be honoured by its kind, that is listed in
``HONOURED`` (itself, or a value the runner compares whole, ``<path>.**``); else the case fails with
``unsupported field <document>.<path>``. A field the schema doesn't define fails the same way
unless a runner honours it (``sandbox.tools.*.decision``: the suite's permission script, newer
than the vendored schema). Enumerated values a runner acts on only in part are listed in
``HONOURED_VALUES``; any other value fails with ``unsupported value``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from shared_data import CASES

_CASE_COMMON = frozenset({
    "case.name", "case.family", "case.kind", "case.description", "case.clock.now",
})
_OUTCOME = frozenset({"expected.outcome", "expected.error.code", "expected.error.seq"})
_APPENDED = frozenset({
    "expected.appended[].type", "expected.appended[].seq", "expected.appended[].actor_kind",
    "expected.appended[].epoch", "expected.appended[].branch_id",
    "expected.appended[].critical", "expected.appended[].data.**",
})
_MODEL = frozenset({
    "model.responses", "model.responses[].content.**", "model.responses[].stop_reason",
    "model.responses[].usage.**", "model.responses[].error.reason",
    "model.responses[].error.http_status", "model.responses[].error.retry_after_ms",
    "model.lookup.*.result", "model.lookup.*.final", "model.lookup.*.response.**",
    "model.lookup.*.provider_request_id",
})
_SANDBOX_TOOLS = frozenset({
    "sandbox.tools.*.output", "sandbox.tools.*.is_error", "sandbox.tools.*.executed_keys.*",
    "sandbox.tools.*.lookup.*.result", "sandbox.tools.*.lookup.*.final",
    "sandbox.tools.*.lookup.*.output", "sandbox.tools.*.process", "sandbox.tools.*.decision",
})
_SNAPSHOTS = frozenset({
    "sandbox.snapshots.*.restore_sandbox_id", "sandbox.snapshots.*.restore_response",
    "sandbox.snapshots.*.create_lookup", "sandbox.snapshots.*.manifest.**",
})

# A path ending ``.**`` is a value the runner compares (or plays) whole: everything under it.
HONOURED: dict[str, frozenset[str]] = {
    "reduce": _CASE_COMMON | _OUTCOME | frozenset({
        "expected.state.**", "expected.committed_bytes", "expected.head_verified",
        "expected.projections.**", "expected.appended",  # a reduce case appends nothing
    }),
    "recover": _CASE_COMMON | _OUTCOME | _APPENDED | _MODEL | _SANDBOX_TOOLS | frozenset({
        "case.model_script", "case.sandbox_script", "expected.state.**",
        "expected.committed_bytes", "expected.head_verified", "expected.appended",
        "expected.sandbox.dispatches.*", "expected.sandbox.new_executions.*",
        "expected.sandbox.lookups.*",
    }),
    "fork": _CASE_COMMON | _OUTCOME | _APPENDED | _SNAPSHOTS | frozenset({
        "case.sandbox_script", "case.input.fork_at_event_id", "case.input.new_branch_id",
        "case.input.knowledge_policy", "expected.state.**", "expected.appended",
        "expected.fork.child_created", "expected.fork.at_seq", "expected.fork.parent_unchanged",
        "expected.fork.child_state.**", "expected.fork.knowledge_revision",
        "expected.resources.**",
    }),
    "render": _CASE_COMMON | _OUTCOME | frozenset({
        "expected.state.**", "expected.render.next_request_sha256",
        "expected.render.declared_prefix.**", "expected.appended",
    }),
}


HONOURED_VALUES: dict[str, frozenset[Any]] = {
    "sandbox.snapshots.*.restore_response": frozenset({"ok", "lost", "crash"}),
    "sandbox.snapshots.*.create_lookup": frozenset({"found", "unsupported"}),
    "sandbox.tools.*.process": frozenset({"running", "terminated", "unknown"}),
    "sandbox.tools.*.decision": frozenset({"allow", "ask", "deny"}),
}

# the schema definition each document is described by
_DOCUMENTS = {"case": "Case", "expected": "Expected", "model": "ModelScript",
              "sandbox": "SandboxScript"}


class UnsupportedFieldError(AssertionError):
    """The case uses a field (or value) its kind's runner does not act on."""


def check_fields(kind: str, documents: Mapping[str, Any], schema_path: Path | None = None) -> None:
    """Fail with ``unsupported field <path>`` for the first field ``documents`` use that
    ``kind``'s runner does not honour (``documents``: name in ``_DOCUMENTS`` -> parsed JSON)."""
    honoured = HONOURED.get(kind, frozenset())
    defs = _schema_defs(str(schema_path or CASES.parent / "case.schema.json"))
    for name, doc in documents.items():
        if doc is None:
            continue
        for path, value in _leaves(doc, {"$ref": f"#/$defs/{_DOCUMENTS[name]}"}, defs, name):
            if not any(_covers(h, path) for h in honoured):
                raise UnsupportedFieldError(
                    f"unsupported field {path}: the {kind} runner does not act on it")
            allowed = HONOURED_VALUES.get(path)
            if allowed is not None and value not in allowed:
                raise UnsupportedFieldError(
                    f"unsupported value {path} = {value!r}: the {kind} runner acts on"
                    f" {sorted(allowed)} only")


def _covers(honoured: str, path: str) -> bool:
    if not honoured.endswith(".**"):
        return path == honoured
    whole = honoured.removesuffix(".**")
    return path == whole or path.startswith((whole + ".", whole + "["))


@cache
def _schema_defs(path: str) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text(encoding="utf-8"))["$defs"])


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    """Follow local ``$ref`` pointers (``#/$defs/...``); another document's refs stay opaque."""
    while isinstance(schema, dict) and str(schema.get("$ref", "")).startswith("#/$defs/"):
        target: Any = defs
        for part in schema["$ref"].removeprefix("#/$defs/").split("/"):
            target = target[int(part)] if isinstance(target, list) else target[part]
        schema = target
    return schema


def _leaves(value: Any, schema: Any, defs: dict[str, Any], path: str) -> Iterator[
        tuple[str, Any]]:
    """(path, value) of every leaf of ``value`` as ``schema`` describes it (``None``: a part the
    schema doesn't describe, named by its own keys)."""
    schema = _branch(value, _resolve(schema, defs), defs)
    described = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict) and value:
        properties = described.get("properties")
        extra = described.get("additionalProperties")
        for key, item in value.items():
            if properties is not None:  # a record
                yield from _leaves(item, properties.get(key), defs, f"{path}.{key}")
            elif isinstance(extra, dict):  # a map: its keys are names, not fields
                yield from _leaves(item, extra, defs, f"{path}.*")
            else:
                yield from _leaves(item, None, defs, f"{path}.{key}")
    elif isinstance(value, list) and value:
        for item in value:
            yield from _leaves(item, described.get("items"), defs, f"{path}[]")
    else:
        yield path, value


def _branch(value: Any, schema: Any, defs: dict[str, Any]) -> Any:
    """The ``oneOf`` branch whose properties hold every key of ``value`` (a model response is
    content or an error), else the schema itself."""
    if not isinstance(schema, dict) or "oneOf" not in schema or not isinstance(value, dict):
        return schema
    for option in (_resolve(o, defs) for o in schema["oneOf"]):
        if value.keys() <= option.get("properties", {}).keys():
            return option
    return schema
