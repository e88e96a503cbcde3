"""The output-schema evaluator (UPSTREAM-DIGEST-2 §4): each asserted format as the digest defines
it, the keywords where JSON Schema engines differ (exact decimal multipleOf, JSON equality, code
points, the portable pattern subset), the dialect refusing what it can't evaluate, and a
differential property against jsonschema on the keywords where both must agree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from threads.log.output_eval import UnsupportedSchemaError, compile_schema, issues_of

FORMAT_CASES: dict[str, tuple[list[str], list[str]]] = {
    "date": (
        ["2026-12-03", "2024-02-29", "2000-02-29", "0000-01-01", "1999-04-30"],
        ["2023-02-29", "1900-02-29", "2026-13-01", "2026-00-10", "2026-04-31", "2026-1-01",
         "2026-12-03\n", "٢٠٢٦-١٢-٠٣", "20261203", "2026-12-03T00:00:00Z"],
    ),
    "time": (
        ["10:00:00Z", "23:59:59z", "00:00:00.123456+05:30", "12:30:45-23:59"],
        ["10:00:00", "23:59:60Z", "24:00:00Z", "10:60:00Z", "10:00:00+24:00", "10:00:00+05:60",
         "10:00Z", "10:00:00.Z", "1:00:00Z", "10:00:00 Z"],
    ),
    "date-time": (
        ["2026-12-03T10:00:00Z", "2026-12-03t10:00:00.5+01:00", "2024-02-29T23:59:59-08:00"],
        ["2026-12-03T10:00:00", "2026-12-03 10:00:00Z", "2026-12-03T23:59:60Z",
         "2023-02-29T10:00:00Z", "2026-12-03T10:00:00Zjunk"],
    ),
    "email": (
        ["a@example.com", "first.last+tag@mail.example.org", "ü@bücher.de"],
        ["a@localhost", "@example.com", "a@@example.com", "a b@example.com", "a@example.",
         "a@.com", "a@exa mple.com", "plain"],
    ),
    "uri": (
        ["https://example.com/a?b=c", "mailto:a@example.com", "urn:isbn:0451450523", "x:"],
        ["example.com", "1http://x", "https://exa mple.com", "https://x\n", "://x", ""],
    ),
    "uuid": (
        ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-02D3-F456-426614174000"],
        ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
         "g23e4567-e89b-12d3-a456-426614174000", "{123e4567-e89b-12d3-a456-426614174000}"],
    ),
}


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_each_format_accepts_exactly_what_the_digest_defines(name: str) -> None:
    good, bad = FORMAT_CASES[name]
    schema = compile_schema({"type": "string", "format": name})
    assert [v for v in good if not schema.accepts(v)] == []
    refused = [v for v in bad if not schema.accepts(v)]
    assert refused == bad
    assert schema.issues(bad[0]) == [{"path": "", "message": f"is not a valid {name}"}]


def test_a_format_constrains_strings_only() -> None:
    schema = compile_schema({"format": "date"})
    assert all(schema.accepts(v) for v in (1, None, True, [], {}))


@pytest.mark.parametrize(("schema", "good", "bad"), [
    ({"multipleOf": 0.1}, [0.3, 1, 0.7, -2.2], [0.35, 1e-07]),
    ({"multipleOf": 3}, [9, 9.0, 0], [10, 4.5]),
    ({"enum": [1, "a", [1, 2], {"k": False}]}, [1, 1.0, "a", [1, 2], {"k": False}],
     [True, [2, 1], {"k": 0}, "A"]),
    ({"const": False}, [False], [0, None, []]),
    ({"const": {"a": [1, {"b": None}]}}, [{"a": [1.0, {"b": None}]}], [{"a": [1, {}]}]),
    ({"type": "integer"}, [1, 1.0, -7], [1.5, True, "1"]),
    ({"minLength": 2, "maxLength": 2}, ["😀😀", "ab"], ["😀", "abc"]),
    ({"pattern": "b"}, ["abc"], ["ac"]),
    ({"pattern": "^a$"}, ["a"], ["a\n", "ba"]),
    ({"pattern": "^a.c$"}, ["abc"], ["a\rc", "a\u2028c", "a\nc"]),
    ({"pattern": "^\\d+$"}, ["123"], ["١٢٣"]),
    ({"pattern": "^\\w+$"}, ["a_1"], ["é"]),
    ({"pattern": "^[a-c&|]+\\0?$"}, ["a&|", "b\x00"], ["d"]),
    ({"exclusiveMinimum": 0, "maximum": 10}, [0.5, 10], [0, 10.5]),
    ({"required": ["constructor"], "minProperties": 2}, [{"constructor": 1, "b": 2}],
     [{"b": 1, "c": 2}, {"constructor": 1}]),
    ({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}},
     ["ab", 3], ["a", 3.5]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 0}]}, [-1, 0.5], [2]),
    ({"not": {"type": "null"}, "anyOf": [{"type": "string"}, {"type": "array"}]},
     ["x", []], [None, 1]),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
     [{"a": "x"}, {}], [{"a": 1}, {"b": 1}]),
    ({"items": {"$ref": "#/$defs/pos"}, "minItems": 1, "maxItems": 2,
      "$defs": {"pos": {"exclusiveMinimum": 0}}}, [[1], [1, 2]], [[], [0], [1, 2, 3]]),
    ({"properties": {"next": {"$ref": "#"}}, "required": ["v"]},
     [{"v": 1, "next": {"v": 2}}], [{"v": 1, "next": {}}]),
    (True, [None, {"any": 1}], []),
    ({"properties": {"x": False}}, [{}], [{"x": None}]),
])
def test_keywords_judge_values_as_the_digest_says(
    schema: Any, good: list[Any], bad: list[Any]
) -> None:
    compiled = compile_schema(schema)
    assert [v for v in good if not compiled.accepts(v)] == []
    assert [v for v in bad if compiled.accepts(v)] == []


def test_issues_name_the_json_pointer_of_each_failure() -> None:
    schema = {"properties": {"a/b": {"items": {"format": "uuid"}}, "n": {"type": "string"}}}
    issues = issues_of(schema, {"a/b": ["x"], "n": 1})
    assert [i["path"] for i in issues] == ["/a~1b/0", "/n"]


@pytest.mark.parametrize(("schema", "why"), [
    ({"uniqueItems": True}, "unsupported keyword 'uniqueItems'"),
    ({"properties": {"a": {"prefixItems": []}}}, "#/properties/a: unsupported keyword"),
    ({"format": "duration"}, "#/format: must be one of"),
    ({"format": "ipv4"}, "#/format: must be one of"),
    ({"$ref": "#/$defs/missing"}, "#/$ref: must be"),
    ({"$ref": "https://example.com/s.json"}, "#/$ref: must be"),
    ({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}}},
     "cycle"),
    ({"allOf": [{"$ref": "#"}]}, "cycle"),
    ({"type": "float"}, "JSON type names"),
    ({"multipleOf": 0}, "above 0"),
    ({"minLength": -1}, "integer >= 0"),
    ({"anyOf": []}, "non-empty array"),
    ({"pattern": "(?<=a)b"}, "no lookbehind"),
    ({"pattern": "(?<name>a)"}, "no lookbehind"),
    ({"pattern": "(?i)a"}, "flags"),
    ({"pattern": "(a)\\1"}, "backreference"),
    ({"pattern": "\\p{L}"}, "not portable"),
    ({"pattern": "\\u0041"}, "not portable"),
    ({"pattern": "\\x41"}, "not portable"),
    ({"pattern": "[^]"}, "empty classes"),
    ({"pattern": "a{1001}"}, "repetition bound over 1000"),
    ({"pattern": "a" * 1001}, "longer than 1000"),
    ({"pattern": "(" * 33 + ")" * 33}, "deeper than 32"),
    ([], "object or a boolean"),
])
def test_the_dialect_refuses_what_it_cannot_evaluate(schema: Any, why: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as refused:
        compile_schema(schema)
    assert why in str(refused.value)
    [issue] = issues_of(schema, None)  # fails closed: nothing validates under it
    assert issue["path"] == ""
    assert "not supported" in issue["message"]


def test_a_ref_cycle_that_descends_into_the_value_is_allowed() -> None:
    compile_schema({"$defs": {"t": {"properties": {"kids": {"items": {"$ref": "#/$defs/t"}}}}},
                    "$ref": "#/$defs/t"})


# ---- differential: where the dialect is plain JSON Schema, it agrees with jsonschema ---------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text("ab", max_size=3))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=8,
)


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    small = st.integers(0, 3)
    return st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(
            ["null", "boolean", "object", "array", "number", "integer", "string"])),
        st.builds(lambda n: {"minimum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"exclusiveMaximum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"multipleOf": n}, st.integers(1, 3)),
        st.builds(lambda n: {"minLength": n}, small),
        st.builds(lambda n: {"maxItems": n}, small),
        st.builds(lambda n: {"minProperties": n}, small),
        st.builds(lambda r: {"required": r}, st.lists(st.sampled_from("abc"), max_size=2)),
        st.builds(lambda v: {"const": v}, _values),
        st.builds(lambda vs: {"enum": vs}, st.lists(_values, min_size=1, max_size=3)),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(["a", "^b", "a$", "^(ab)+$"])),
    )


schemas = st.recursive(
    _leaf_schemas(),
    lambda inner: st.one_of(
        st.builds(lambda k, s: {k: s}, st.sampled_from(["not", "items", "additionalProperties"]),
                  inner),
        st.builds(lambda k, ss: {k: ss}, st.sampled_from(["allOf", "anyOf", "oneOf"]),
                  st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda ps: {"properties": ps}, st.dictionaries(st.sampled_from("abc"), inner,
                                                                  max_size=2)),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, inner, inner, inner),
        st.builds(lambda a, b: {**a, **b}, inner, inner),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas, _values)
def test_it_agrees_with_jsonschema_on_the_plain_keywords(schema: dict[str, Any],
                                                         value: Any) -> None:
    ours = compile_schema(schema).accepts(value)
    assert ours == Draft202012Validator(schema).is_valid(value), (schema, value)
