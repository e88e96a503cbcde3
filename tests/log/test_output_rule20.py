"""Rule 20 with the digest's evaluator: an ``output_validated{accepted}`` whose value breaks the
pinned schema, a ``format`` alone included, is refused at its seq (``invalid_transition``), by
the fold and by an import into either store (nothing stored); a schema outside the dialect
accepts nothing. A property ties the reader to the run's own judge: for random schemas and
values, the run accepts a candidate exactly when the reader accepts it recorded."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_output_eval import schemas
from test_reader_rules import Log

from threads.errors import LogError
from threads.log.hashing import value_hash
from threads.log.render import render
from threads.run.output_schema import schema_errors
from threads.store.bundle import write_bundle
from threads.store.protocol import Store
from threads.store.transfer import import_log

TENANT = "local"
WHEN = {"properties": {"when": {"format": "date-time", "type": "string"}},
        "required": ["when"], "type": "object"}


def accepted_log(schema: Any, value: Any) -> Log:
    """A native-mode thread pinning ``schema`` whose one response is accepted as ``value``."""
    log = Log(output={"max_retries": 2, "mode": "native", "schema": schema,
                      "schema_sha256": value_hash(schema)})
    log.user()
    response = log.respond(log.request())
    log.add("output_validated", {"outcome": "accepted", "schema_sha256": value_hash(schema),
                                 "source_event_id": response.event_id, "value": value})
    return log


def reader_accepts(log: Log) -> bool:
    try:
        log.read()
    except LogError as err:
        refused = (err.code, err.seq)
    else:
        return True
    assert refused == ("invalid_transition", log.events[-1].seq)
    return False


@pytest.mark.parametrize(("schema", "good", "bad"), [
    (WHEN, {"when": "2026-12-03T10:00:00Z"}, {"when": "2026-12-03T10:00:00"}),
    ({"format": "date"}, "2024-02-29", "2023-02-29"),
    ({"format": "time"}, "23:59:59+01:00", "23:59:60+01:00"),
    ({"format": "email"}, "a@b.example", "a@localhost"),
    ({"format": "uri"}, "https://x.example/", "x.example"),
    ({"format": "uuid"}, "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
])
def test_an_accepted_value_breaking_only_a_format_is_refused_at_its_seq(
    schema: Any, good: Any, bad: Any
) -> None:
    assert accepted_log(schema, good).read().features.accepted_output == good
    refused = accepted_log(schema, bad).refused()
    assert "accepted a value its schema refuses" in refused.message


def test_a_schema_outside_the_dialect_accepts_nothing() -> None:
    schema = {"type": "array", "uniqueItems": True}
    refused = accepted_log(schema, [1, 2]).refused()
    assert "uniqueItems" in refused.message


def test_multiple_of_is_exact_in_decimal() -> None:
    assert reader_accepts(accepted_log({"multipleOf": 0.1}, 0.3))
    assert not reader_accepts(accepted_log({"multipleOf": 0.1}, 0.35))


# ---- the same refusal through an import, on both stores ------------------------------------


def bundle(log: Log) -> bytes:
    """The export with the request bytes its model_requests reference."""
    events = log.events
    artifacts = {}
    for index, event in enumerate(events):
        if event.type == "model_request":
            rendered = render(events[0].data, events[:index])
            artifacts[rendered.request_ref()["sha256"]] = rendered.data
    return write_bundle(log.log.export(), artifacts)


async def test_an_import_refuses_the_format_breaking_acceptance(store: Store) -> None:
    bad = accepted_log(WHEN, {"when": "2026-12-03T10:00:00"})
    with pytest.raises(LogError) as refused:
        await import_log(store, bundle(bad), tenant_id=TENANT)
    assert (refused.value.code, refused.value.seq) == ("invalid_transition", bad.events[-1].seq)
    assert await store.list_threads(TENANT) == []
    good = accepted_log(WHEN, {"when": "2026-12-03T10:00:00+01:00"})
    assert (await import_log(store, bundle(good), tenant_id=TENANT)).stored


# ---- the run's judge and the reader agree ----------------------------------------------------

_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(
        ["a", "ab", "2026-12-03", "2026-12-03T10:00:00Z", "10:00:00", "a@b.c", "x:y", ""])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
    max_leaves=6,
)
_with_formats = st.one_of(
    schemas,
    st.builds(lambda f: {"format": f},
              st.sampled_from(["date", "time", "date-time", "email", "uri", "uuid"])),
    st.builds(lambda f, s: {"properties": {"a": {"format": f}}, **s},
              st.sampled_from(["date", "date-time", "email"]), schemas),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_formats, _values)
def test_the_run_and_the_reader_agree(schema: dict[str, Any], value: Any) -> None:
    run_accepts = schema_errors(schema, value) == []
    assert reader_accepts(accepted_log(schema, value)) == run_accepts, (schema, value)
