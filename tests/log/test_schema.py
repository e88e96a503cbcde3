"""Schema validation: the dispatch by type, the critical rule, error messages, and agreement
of the compiled fast path with jsonschema (the reference) on real and mutated lines."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared_data import CASES, SCHEMA, needs
from threads.errors import LogError
from threads.log import schema
from threads.log.schema import known_types, validate_event, validate_head, validate_header

REPO = Path(__file__).resolve().parents[2]
VENDORED = Path(schema.__file__).with_name("events.v1.schema.json")

EVENT: dict[str, Any] = {
    "actor": {"kind": "host"}, "branch_id": "0192b000-0000-7000-8000-000000000001",
    "critical": True, "data": {"reason": "end_turn"}, "epoch": 1,
    "event_id": "0192e000-0000-7000-8000-00000000000a", "prev_hash": "a" * 64, "seq": 10,
    "thread_id": "0192a000-0000-7000-8000-000000000001", "time": 1, "type": "turn_completed",
    "type_version": 1,
}


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    value = copy.deepcopy(base)
    value.update(changes)
    return value


def test_known_types_come_from_the_schema() -> None:
    """The vendored schema's 70 types, and the two the declared extension adds."""
    assert "turn_completed" in known_types()
    assert len(known_types()) == 72
    assert {"tools_loaded", "answer_rejected"} <= known_types()


def test_known_event_validates() -> None:
    assert validate_event(EVENT, seq=10) is True


def test_unknown_non_critical_event_is_admitted() -> None:
    assert validate_event(with_(EVENT, type="future_thing", critical=False), seq=10) is False


@pytest.mark.parametrize(
    "changes", [{"type": "future_thing"}, {"type_version": 2}], ids=["type", "version"]
)
def test_unknown_critical_event_refuses(changes: dict[str, Any]) -> None:
    with pytest.raises(LogError) as caught:
        validate_event(with_(EVENT, **changes), seq=10)
    assert (caught.value.code, caught.value.seq) == ("unsupported_critical_event", 10)


def test_unknown_event_still_needs_a_valid_envelope() -> None:
    with pytest.raises(LogError) as caught:
        validate_event(with_(EVENT, type="future_thing", critical=False, seq=0), seq=10)
    assert caught.value.code == "invalid_line"
    assert "$.seq" in caught.value.message


def test_error_names_the_json_path() -> None:
    with pytest.raises(LogError) as caught:
        validate_event(with_(EVENT, data={"reason": "nope"}), seq=10)
    assert caught.value.code == "invalid_line"
    assert "$.data.reason" in caught.value.message


def test_pinned_critical_flag_is_checked() -> None:
    with pytest.raises(LogError, match="critical"):
        validate_event(with_(EVENT, critical=False), seq=10)


def test_header_and_head() -> None:
    with pytest.raises(LogError, match=r"header line .* 'thread_id' is a required property"):
        validate_header({"format": "threads.log", "format_version": 1, "writer": {}}, seq=0)
    with pytest.raises(LogError):
        validate_head({"format": "threads.head", "format_version": 1}, seq=4)


def test_vendored_schema_keeps_property_named_description() -> None:
    vendored = json.loads(VENDORED.read_text())
    tool_spec = vendored["$defs"]["ToolSpec"]
    assert "description" in tool_spec["properties"]
    assert "description" not in vendored["$defs"]["Envelope"]


@needs(SCHEMA, "the shared event schema")
def test_vendored_schema_is_current() -> None:
    check = [sys.executable, str(REPO / "tools" / "sync_schema.py"), str(SCHEMA), "--check"]
    assert subprocess.run(check, check=False).returncode == 0


# --- the fast path agrees with jsonschema ------------------------------------------------------

def _validators_for(value: dict[str, Any]) -> Iterator[Any]:
    fmt = value.get("format")
    if fmt == "threads.log":
        yield schema._validator("Header")
    elif fmt == "threads.head":
        yield schema._validator("Head")
    else:
        yield schema._validator("Envelope")
        if schema.is_known(value):
            yield schema._event_validator(value["type"])


WRONG_VALUES: tuple[Any, ...] = (None, "x", -1, 1.5, [], {}, True)
WRONG_DATA: tuple[Any, ...] = (None, "", 0, [], {"x": 1})


def _mutations(value: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each field of the line and of its data dropped, retyped or joined by a stranger."""
    yield with_(value, unexpected=1)
    for key in value:
        yield {k: v for k, v in value.items() if k != key}
        for wrong in WRONG_VALUES:
            yield with_(value, **{key: wrong})
    data = value.get("data")
    if isinstance(data, dict):
        yield with_(value, data={**data, "unexpected": 1})
        for key in data:
            yield with_(value, data={k: v for k, v in data.items() if k != key})
            for wrong in WRONG_DATA:
                yield with_(value, data={**data, key: wrong})


def _case_lines(per_kind: int = 3) -> list[dict[str, Any]]:
    """Distinct lines of every case log, at most ``per_kind`` per event type (or format): the
    reference validator is slow, and more of the same shape adds little."""
    seen: set[str] = set()
    kinds: dict[str, int] = {}
    values = []
    for log in sorted(CASES.glob("*/*.jsonl")):
        for raw in log.read_bytes().splitlines():
            try:
                value = json.loads(raw)
            except ValueError:
                continue  # torn or deliberately broken lines
            if not isinstance(value, dict):
                continue
            key = json.dumps(value, sort_keys=True)
            kind = str(value.get("type", value.get("format")))
            if key in seen or kinds.get(kind, 0) >= per_kind:
                continue
            seen.add(key)
            kinds[kind] = kinds.get(kind, 0) + 1
            values.append(value)
    return values


@needs(CASES, "the conformance case logs")
def test_fast_path_agrees_with_jsonschema() -> None:
    checked = 0
    for line in _case_lines():
        for value in (line, *_mutations(line)):
            for validator in _validators_for(line):
                reference = validator._reference.is_valid(value)
                # both fast paths: jsonschema-rs (the fast extra) and the compiled predicate
                assert validator._fast(value) == reference, (validator, value)
                assert validator._compiled(value) == reference, (validator, value)
                checked += 1
    assert checked > 5_000
