"""The one evaluator of output schemas: what rule 20 accepts, and what the run asks again for.

UPSTREAM-DIGEST-2 §4 fixes a small JSON Schema dialect, hand-written upstream in both languages;
this is ours, used by the reader (``threads.log.fold.features``, rule 20: an accepted value
validates) and by the run's own judge (``run/output_schema``), so the two can't disagree.
``compile_schema`` refuses any keyword outside the dialect (``UnsupportedSchemaError``: the agent
refuses it at setup, the reader fails closed); ``OutputSchema.issues`` lists what a value
breaks. Keywords: annotations (title description default examples $defs $schema $comment);
type properties required additionalProperties items minProperties enum const allOf anyOf
oneOf not if/then/else; ``$ref`` to ``#`` or ``#/$defs/<name>`` (no cycle through combinators
alone); minimum maximum exclusiveMinimum exclusiveMaximum multipleOf (exact, in decimal);
minLength maxLength (code points); minItems maxItems; pattern (``output_pattern``); format
(``output_formats``). Equality (enum, const) is JSON's: booleans equal only booleans, numbers
by value, arrays in order, objects by key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any, TypeAlias, TypedDict

from threads.log.json_types import JsonObject, JsonValue
from threads.log.output_formats import FORMATS
from threads.log.output_pattern import UnsupportedPatternError, compile_pattern

ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$defs", "$schema", "$comment"}
)
ASSERTIONS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "minProperties", "enum",
    "const", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
    "minItems", "maxItems", "pattern", "format",
})
TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_COMBINATORS = ("allOf", "anyOf", "oneOf")
_IN_PLACE = ("not", "if", "then", "else")  # subschemas applied to the same value
_DEFS = "#/$defs/"
MAX_ISSUES = 10


class SchemaIssue(TypedDict):
    """One thing a value breaks: ``output_validated.errors[]`` (path is a JSON pointer)."""

    path: str
    message: str


SchemaNode: TypeAlias = "CheckedSchema | bool"


class CheckedSchema(TypedDict, total=False):
    """A schema object ``compile_schema`` accepted: the keywords the walker reads of it, each of
    the type ``_check_keyword`` made sure of (annotations, ``$ref``, ``$defs`` and the
    combinators are read as JSON by the walker itself)."""

    type: str | list[str]
    properties: dict[str, SchemaNode]
    required: list[str]
    additionalProperties: SchemaNode
    items: SchemaNode
    minProperties: int
    enum: list[JsonValue]
    const: JsonValue
    minimum: float
    maximum: float
    exclusiveMinimum: float
    exclusiveMaximum: float
    multipleOf: float
    minLength: int
    maxLength: int
    minItems: int
    maxItems: int
    pattern: str
    format: str


class UnsupportedSchemaError(ValueError):
    """The schema is outside the dialect (or malformed); the message says where and why."""


@dataclass(frozen=True)
class OutputSchema:
    """A checked schema, ready to judge values."""

    root: Any

    def accepts(self, value: Any) -> bool:
        return next(self._walk(self.root, value, ""), None) is None

    def issues(self, value: Any) -> list[SchemaIssue]:
        """What ``value`` breaks, in schema order (at most ``MAX_ISSUES``)."""
        found: list[SchemaIssue] = []
        for issue in self._walk(self.root, value, ""):
            found.append(issue)
            if len(found) == MAX_ISSUES:
                break
        return found

    def _walk(self, schema: Any, value: Any, path: str) -> Iterator[SchemaIssue]:
        if schema is True:
            return
        if schema is False:
            yield _issue(path, "no value is allowed here")
            return
        if "$ref" in schema:
            yield from self._walk(self._target(schema["$ref"]), value, path)
        yield from _own(schema, value, path)
        for key in _COMBINATORS:
            if key in schema:
                yield from self._combine(key, schema[key], value, path)
        if "not" in schema and self.accepts_under(schema["not"], value):
            yield _issue(path, "the value matches the schema under not")
        if "if" in schema:
            branch = "then" if self.accepts_under(schema["if"], value) else "else"
            if branch in schema:
                yield from self._walk(schema[branch], value, path)
        yield from self._children(schema, value, path)

    def accepts_under(self, schema: Any, value: Any) -> bool:
        return next(self._walk(schema, value, ""), None) is None

    def _combine(self, key: str, branches: list[Any], value: Any, path: str) -> Iterator[
            SchemaIssue]:
        if key == "allOf":
            for branch in branches:
                yield from self._walk(branch, value, path)
            return
        matched = sum(self.accepts_under(branch, value) for branch in branches)
        if key == "anyOf" and matched == 0:
            yield _issue(path, "the value matches none of anyOf")
        if key == "oneOf" and matched != 1:
            yield _issue(path, f"the value matches {matched} of oneOf, not exactly one")

    def _children(self, schema: CheckedSchema, value: Any, path: str) -> Iterator[SchemaIssue]:
        if isinstance(value, dict):
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for key, item in value.items():
                sub = properties.get(key, extra)
                yield from self._walk(sub, item, f"{path}/{_escape(key)}")
        elif isinstance(value, list) and "items" in schema:
            for index, item in enumerate(value):
                yield from self._walk(schema["items"], item, f"{path}/{index}")

    def _target(self, ref: str) -> Any:
        return self.root if ref == "#" else self.root["$defs"][ref[len(_DEFS):]]


def compile_schema(schema: Any) -> OutputSchema:
    """``schema`` checked against the dialect, or ``UnsupportedSchemaError``."""
    return _compiled(json.dumps(schema, sort_keys=True))


@cache
def _compiled(schema_json: str) -> OutputSchema:
    root = json.loads(schema_json)
    _check(root, root, "#")
    _check_cycles(root)
    return OutputSchema(root)


def issues_of(schema: Any, value: Any) -> list[SchemaIssue]:
    """What ``value`` breaks under ``schema``; an unsupported schema is one issue at the root
    (it fails closed: nothing validates under a schema we can't evaluate)."""
    try:
        return compile_schema(schema).issues(value)
    except UnsupportedSchemaError as exc:
        return [_issue("", f"the schema is not supported: {exc}")]


# --- what one schema object asserts about the value itself ----------------------------------


def _own(schema: CheckedSchema, value: Any, path: str) -> Iterator[SchemaIssue]:
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, name) for name in names):
            yield _issue(path, f"{_json_type(value)} is not of type {' or '.join(names)}")
    if "const" in schema and not json_equal(value, schema["const"]):
        yield _issue(path, f"the value is not {json.dumps(schema['const'])}")
    if "enum" in schema and not any(json_equal(value, v) for v in schema["enum"]):
        yield _issue(path, "the value is not one of enum")
    if _is_number(value):
        yield from _numeric(schema, value, path)
    elif isinstance(value, str):
        yield from _string(schema, value, path)
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            yield _issue(path, f"fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield _issue(path, f"more than {schema['maxItems']} items")
    elif isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                yield _issue(path, f"required property {key!r} is missing")
        if len(value) < schema.get("minProperties", 0):
            yield _issue(path, f"fewer than {schema['minProperties']} properties")


def _numeric(schema: CheckedSchema, value: float, path: str) -> Iterator[SchemaIssue]:
    if "minimum" in schema and value < schema["minimum"]:
        yield _issue(path, f"{value} is less than the minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        yield _issue(path, f"{value} is more than the maximum {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        yield _issue(path, f"{value} is not more than {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        yield _issue(path, f"{value} is not less than {schema['exclusiveMaximum']}")
    step = schema.get("multipleOf")
    if step is not None and (_decimal(value) / _decimal(step)).denominator != 1:
        yield _issue(path, f"{value} is not a multiple of {schema['multipleOf']}")


def _string(schema: CheckedSchema, value: str, path: str) -> Iterator[SchemaIssue]:
    if len(value) < schema.get("minLength", 0):
        yield _issue(path, f"shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        yield _issue(path, f"longer than {schema['maxLength']} characters")
    if "pattern" in schema and compile_pattern(schema["pattern"]).search(value) is None:
        yield _issue(path, f"does not match the pattern {schema['pattern']!r}")
    if "format" in schema and not FORMATS[schema["format"]](value):
        yield _issue(path, f"is not a valid {schema['format']}")


def _decimal(number: float) -> Fraction:
    """The number as the decimal its JSON text shows (``0.1`` is exactly one tenth)."""
    return Fraction(repr(number)) if isinstance(number, float) else Fraction(number)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: booleans only equal booleans, numbers by value, arrays in order,
    objects by key."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return _is_number(value) and (isinstance(value, int) or float(value).is_integer())
    if name == "number":
        return _is_number(value)
    return _json_type(value) == name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _issue(path: str, message: str) -> SchemaIssue:
    return {"message": message, "path": path}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


# --- the dialect check ------------------------------------------------------------------------


def _check(schema: Any, root: Any, where: str) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError(f"{where}: a schema is an object or a boolean")
    unknown = sorted(schema.keys() - ANNOTATIONS - ASSERTIONS)
    if unknown:
        raise UnsupportedSchemaError(f"{where}: unsupported keyword {unknown[0]!r}")
    for key, value in schema.items():
        _check_keyword(key, value, root, f"{where}/{_escape(key)}")


def _check_keyword(key: str, value: Any, root: Any, where: str) -> None:
    if key in ("properties", "$defs"):
        _need(isinstance(value, dict), where, "an object of schemas")
        for name, sub in value.items():
            _check(sub, root, f"{where}/{_escape(name)}")
    elif key in _COMBINATORS:
        _need(isinstance(value, list) and len(value) > 0, where, "a non-empty array of schemas")
        for index, sub in enumerate(value):
            _check(sub, root, f"{where}/{index}")
    elif key in ("additionalProperties", "items", *_IN_PLACE):
        _check(value, root, where)
    elif key == "type":
        names = value if isinstance(value, list) else [value]
        _need(bool(names) and all(n in TYPES for n in names), where, "JSON type names")
    elif key == "required":
        _need(isinstance(value, list) and all(isinstance(n, str) for n in value), where,
              "an array of strings")
    elif key == "enum":
        _need(isinstance(value, list), where, "an array")
    elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        _need(_is_number(value), where, "a number")
    elif key == "multipleOf":
        _need(_is_number(value) and value > 0, where, "a number above 0")
    elif key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties"):
        _need(isinstance(value, int) and not isinstance(value, bool) and value >= 0, where,
              "an integer >= 0")
    elif key == "pattern":
        _need(isinstance(value, str), where, "a string")
        try:
            compile_pattern(value)
        except UnsupportedPatternError as exc:
            raise UnsupportedSchemaError(f"{where}: {exc}") from None
    elif key == "format":
        _need(value in FORMATS, where, f"one of {', '.join(sorted(FORMATS))}")
    elif key == "$ref":
        _need(_ref_exists(value, root), where, "'#' or an existing '#/$defs/<name>'")


def _need(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise UnsupportedSchemaError(f"{where}: must be {what}")


def _ref_exists(ref: Any, root: Any) -> bool:
    if ref == "#":
        return True
    if not isinstance(ref, str) or not ref.startswith(_DEFS):
        return False
    defs = root.get("$defs") if isinstance(root, dict) else None
    return isinstance(defs, dict) and ref[len(_DEFS):] in defs


def _check_cycles(root: Any) -> None:
    """A ``$ref`` chain that comes back to its start through combinators, ``not`` and
    ``if/then/else`` alone (never descending into a property or item) would never end."""
    targets = {"#": root, **{_DEFS + k: v for k, v in (_defs(root)).items()}}
    edges = {ref: set(_refs_in_place(schema)) for ref, schema in targets.items()}
    done: set[str] = set()

    def visit(ref: str, trail: tuple[str, ...]) -> None:
        if ref in trail:
            raise UnsupportedSchemaError(f"{ref}: $ref cycle through combinators only")
        if ref in done:
            return
        for nxt in edges[ref]:
            visit(nxt, (*trail, ref))
        done.add(ref)

    for ref in targets:
        visit(ref, ())


def _defs(root: JsonValue) -> JsonObject:
    defs = root.get("$defs") if isinstance(root, dict) else None
    return defs if isinstance(defs, dict) else {}


def _refs_in_place(schema: Any) -> Iterator[str]:
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        yield schema["$ref"]
    for key in _COMBINATORS:
        for sub in schema.get(key, []):
            yield from _refs_in_place(sub)
    for key in _IN_PLACE:
        if key in schema:
            yield from _refs_in_place(schema[key])
