"""Schema validation of parsed log lines against the vendored ``events.v1.schema.json`` and the
declared extension over it (``events.ext.schema.json``, merged by ``threads.log.schema_ext``).

Events are dispatched by ``type`` instead of going through the schema's top-level ``oneOf``:
a known ``(type, type_version)`` is checked against ``Envelope`` + ``ev_<type>`` (one validator
per type, cached), an unknown one against ``Envelope`` alone and then the critical rule.

Speed: ``jsonschema`` (Draft 2020-12, ``referencing`` registry) is the reference, but it spends
~0.5-2 ms per event walking ``$ref``s. So each schema is also compiled here into plain Python
predicates covering exactly the keywords the vendored schema uses (compilation fails loudly on
any other keyword); with the ``fast`` extra, ``jsonschema-rs`` takes the predicate's place
(~5x faster). The fast path's "valid" is final (~20 µs per event compiled); on "invalid",
``jsonschema`` runs to name the failing path, and if it finds nothing the line is admitted, so
a predicate that is too strict costs only speed. A predicate that is too lenient would admit a
bad line: tests cross-check the two on the conformance lines and on thousands of mutations.
Invariant: a value these functions accept is valid under the schema, and every refusal is a
``LogError`` with a wire code (``invalid_line`` or ``unsupported_critical_event``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from threads.errors import LogError
from threads.log.json_types import JsonObject
from threads.log.schema_ext import json_array, json_object, known_tags, merge_extension

SCHEMA_ID = "urn:threads:schema:events:v1"
_MAX_MESSAGE = 160

Predicate = Callable[[Any], bool]


def _load(name: str) -> JsonObject:
    text = resources.files("threads.log").joinpath(name).read_text("utf-8")
    return json_object(json.loads(text), name)


@cache
def _schema() -> JsonObject:
    """The vendored schema with the declared extension merged in (``threads.log.schema_ext``)."""
    return merge_extension(_load("events.v1.schema.json"), _load("events.ext.schema.json"))


@cache
def _registry() -> Registry[Any]:
    resource: Resource[Any] = Resource.from_contents(_schema())
    registry: Registry[Any] = Registry().with_resource(SCHEMA_ID, resource)
    return registry


@cache
def known_types() -> frozenset[str]:
    """The event types this reader knows (all at ``type_version`` 1): ``$defs/KnownTag`` of the
    vendored schema plus the extension's ``event_types``."""
    return frozenset(str(tag) for tag in known_tags(_schema()))


# --- the compiled fast path --------------------------------------------------------------------

def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_TYPES: dict[str, Predicate] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    # JSON Schema counts 1.0 as an integer; canonical admission never lets one through anyway.
    "integer": lambda v: _is_number(v) and (isinstance(v, int) or float(v).is_integer()),
}


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema means it: true is not 1, 1 is 1.0, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


class _Compiler:
    """Turns schema nodes into predicates. A ``$ref`` target is compiled once; only a ref that
    is still being compiled (a cycle, such as JsonValue) goes through an indirection cell."""

    _IGNORED = frozenset({"$defs", "$id", "$schema", "title", "description", "then", "else"})
    _OBJECT = frozenset({"properties", "required", "additionalProperties"})

    def __init__(self, root: JsonObject) -> None:
        self._defs = json_object(root["$defs"], "$defs")
        self._done: dict[str, Predicate] = {}
        self._cells: dict[str, list[Predicate]] = {}

    def ref(self, ref: str) -> Predicate:
        name = ref.removeprefix(SCHEMA_ID).removeprefix("#/$defs/")
        if name in self._done:
            return self._done[name]
        if name in self._cells:  # a cycle: resolve through the cell once compiled
            cell = self._cells[name]
            return lambda v: cell[0](v)  # noqa: PLW0108 - cell[0] is filled in later
        self._cells[name] = cell = []
        pred = self.node(self._defs[name])
        cell.append(pred)
        self._done[name] = pred
        return pred

    def node(self, schema: Any) -> Predicate:
        if schema is True:
            return lambda v: True
        if schema is False:
            return lambda v: False
        checks: list[Predicate] = []
        if schema.get("type") == "object" or self._OBJECT & schema.keys():
            checks.append(self._object(schema))
        if "type" in schema and schema["type"] != "object":
            checks.append(self._type(schema["type"]))
        for key, val in schema.items():
            if key in self._IGNORED or key in self._OBJECT or key == "type":
                continue
            method = getattr(self, "_kw_" + key.lstrip("$"), None)
            if method is None:
                raise ValueError(f"schema keyword {key!r} is not supported by the fast validator")
            checks.append(method(val, schema))
        return _conjunction(checks)

    def _object(self, schema: JsonObject) -> Predicate:
        """type object + properties + required + additionalProperties as one loop."""
        if "patternProperties" in schema:
            raise ValueError("patternProperties is not supported by the fast validator")
        strict = schema.get("type") == "object"
        required = tuple(json_array(schema.get("required", []), "required"))
        properties = json_object(schema.get("properties", {}), "properties")
        props = {name: self.node(sub) for name, sub in properties.items()}
        extra_schema = schema.get("additionalProperties", True)
        extra = None if extra_schema is True else self.node(extra_schema)

        def check(v: Any) -> bool:
            if not isinstance(v, dict):
                return not strict
            for key in required:
                if key not in v:
                    return False
            for key, item in v.items():
                pred = props.get(key, extra)
                if pred is not None and not pred(item):
                    return False
            return True

        return check

    def _type(self, val: str | list[str]) -> Predicate:
        if isinstance(val, str):
            return _TYPES[val]
        preds = [_TYPES[n] for n in val]
        return lambda v: any(p(v) for p in preds)

    def _kw_ref(self, val: str, _: Any) -> Predicate:
        return self.ref(val)

    def _kw_const(self, val: Any, _: Any) -> Predicate:
        if isinstance(val, str):
            return lambda v: v == val and isinstance(v, str)
        return lambda v: _json_equal(v, val)

    def _kw_enum(self, val: list[Any], _: Any) -> Predicate:
        if all(isinstance(x, str) for x in val):
            options = frozenset(val)
            return lambda v: isinstance(v, str) and v in options
        return lambda v: any(_json_equal(v, x) for x in val)

    def _kw_pattern(self, val: str, _: Any) -> Predicate:
        search = re.compile(val).search
        return lambda v: not isinstance(v, str) or search(v) is not None

    def _kw_minLength(self, val: int, _: Any) -> Predicate:  # noqa: N802 - keyword spelling
        return lambda v: not isinstance(v, str) or len(v) >= val

    def _kw_minimum(self, val: float, _: Any) -> Predicate:
        return lambda v: not _is_number(v) or v >= val

    def _kw_maximum(self, val: float, _: Any) -> Predicate:
        return lambda v: not _is_number(v) or v <= val

    def _kw_minItems(self, val: int, _: Any) -> Predicate:  # noqa: N802
        return lambda v: not isinstance(v, list) or len(v) >= val

    def _kw_minProperties(self, val: int, _: Any) -> Predicate:  # noqa: N802
        return lambda v: not isinstance(v, dict) or len(v) >= val

    def _kw_items(self, val: Any, _: Any) -> Predicate:
        item = self.node(val)

        def check(v: Any) -> bool:
            if isinstance(v, list):
                for x in v:
                    if not item(x):
                        return False
            return True

        return check

    def _kw_propertyNames(self, val: Any, _: Any) -> Predicate:  # noqa: N802
        name = self.node(val)
        return lambda v: not isinstance(v, dict) or all(name(k) for k in v)

    def _kw_allOf(self, val: list[Any], _: Any) -> Predicate:  # noqa: N802
        return _conjunction([self.node(s) for s in val])

    def _kw_anyOf(self, val: list[Any], _: Any) -> Predicate:  # noqa: N802
        subs = [self.node(s) for s in val]
        return lambda v: any(s(v) for s in subs)

    def _kw_oneOf(self, val: list[Any], _: Any) -> Predicate:  # noqa: N802
        subs = [self.node(s) for s in val]
        types = [s.get("type") if isinstance(s, dict) else None for s in val]
        if _disjoint_types(types):
            # Branches that each pin a different type: at most the first type match can pass.
            guarded = [(_TYPES[t], s) for t, s in zip(types, subs, strict=True) if t is not None]

            def dispatch(v: Any) -> bool:
                for is_type, sub in guarded:
                    if is_type(v):
                        return sub(v)
                return False

            return dispatch
        return lambda v: sum(1 for s in subs if s(v)) == 1

    def _kw_not(self, val: Any, _: Any) -> Predicate:
        sub = self.node(val)
        return lambda v: not sub(v)

    def _kw_if(self, val: Any, schema: JsonObject) -> Predicate:
        cond = self.node(val)
        then = self.node(schema.get("then", True))
        other = self.node(schema.get("else", True))
        return lambda v: then(v) if cond(v) else other(v)


def _disjoint_types(types: list[Any]) -> bool:
    """Whether every branch pins one JSON type and no value can have two of them."""
    if not all(isinstance(t, str) for t in types) or len(set(types)) != len(types):
        return False
    return not {"number", "integer"} <= set(types)


def _conjunction(checks: list[Predicate]) -> Predicate:
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    return lambda v: all(c(v) for c in checks)


@cache
def _compiler() -> _Compiler:
    return _Compiler(_schema())


# --- validators --------------------------------------------------------------------------------

class _Validator:
    """One schema: the compiled predicate decides, jsonschema explains (and confirms) refusals."""

    def __init__(self, *defs: str) -> None:
        refs = [{"$ref": f"{SCHEMA_ID}#/$defs/{name}"} for name in defs]
        schema = refs[0] if len(refs) == 1 else {"allOf": refs}
        self._compiled = _conjunction([_compiler().ref(name) for name in defs])
        self._fast = _native(defs, self._compiled) or self._compiled
        # No format checker: the schema pins formats with patterns (and 2020-12 makes format
        # assertion opt-in anyway).
        self._reference = Draft202012Validator(schema, registry=_registry())

    def error(self, value: Any) -> str | None:
        """None when ``value`` is valid, else a short message naming the JSON path."""
        if self._fast(value):
            return None
        found: ValidationError | None = best_match(self._reference.iter_errors(value))
        if found is None:
            return None
        detail = f"{found.json_path}: {found.message}"
        return detail if len(detail) <= _MAX_MESSAGE else detail[: _MAX_MESSAGE - 1] + "…"


def _native(defs: tuple[str, ...], compiled: Predicate) -> Predicate | None:
    """The same schema checked by ``jsonschema-rs`` (the ``fast`` extra; ~5x faster than the
    compiled predicate), or None without it. A value it can't take in (it converts every Python
    value first) is judged by the compiled predicate instead."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": _schema()["$defs"],
        "allOf": [{"$ref": f"#/$defs/{name}"} for name in defs],
    }
    native = jsonschema_rs.validator_for(schema)

    def valid(value: Any) -> bool:
        try:
            return bool(native.is_valid(value))
        except (ValueError, TypeError, OverflowError):
            return compiled(value)

    return valid


@cache
def _validator(name: str) -> _Validator:
    return _Validator(name)


@cache
def _event_validator(event_type: str) -> _Validator:
    return _Validator("Envelope", f"ev_{event_type}")


def _check(validator: _Validator, value: Any, what: str, seq: int | None) -> None:
    detail = validator.error(value)
    if detail is not None:
        message = f"{what} does not match the event schema at {detail}"
        raise LogError("invalid_line", message, seq=seq)


def validate_header(value: Any, *, seq: int | None = 0) -> None:
    _check(_validator("Header"), value, "header line", seq)


def validate_head(value: Any, *, seq: int | None) -> None:
    _check(_validator("Head"), value, "head line", seq)


def is_known(value: JsonObject) -> bool:
    """Whether this reader knows the event's ``(type, type_version)``."""
    return value.get("type") in known_types() and value.get("type_version") == 1


def validate_event(value: Any, *, seq: int | None) -> bool:
    """Validate one event; returns whether its type is known (an unknown non-critical event is
    admitted, and reduce skips it). An unknown critical event refuses the whole log."""
    if isinstance(value, dict) and is_known(value):
        _check(_event_validator(value["type"]), value, f"{value['type']} event", seq)
        return True
    _check(_validator("Envelope"), value, "event line", seq)
    if value["critical"]:
        raise LogError(
            "unsupported_critical_event",
            f"event type {value['type']!r} version {value['type_version']} is unknown to this "
            "reader and marked critical; open the log with a newer threads",
            seq=seq,
        )
    return False
