"""Generate ``src/threads/log/vocabulary.py`` from the event schema: the log's vocabulary as types.

For every event type the schema knows (its ``ev_<type>`` definitions, plus those of the declared
extension when there is one) the module gets a TypedDict of the event's ``data`` (``<Type>Data``),
and for every object definition those reach, a TypedDict of its own; every other definition they
reach (an enum, a union, a scalar with bounds) becomes a type alias. It also gets
``EventType = Literal[...]`` and, per event type, an overload of ``draft`` (build a ``Draft``
with data of the right shape) and of ``data_of`` (read an event's data as its type's TypedDict).

How a schema maps to a type: ``const`` and ``enum`` to ``Literal``; ``string``, ``integer``,
``number``, ``boolean``, ``null`` to ``str``, ``int``, ``float``, ``bool``, ``None``; an array to
``list`` of its items; an object with ``properties`` to a TypedDict (required keys plain, the
rest ``NotRequired``), one without to ``dict[str, ...]`` of its ``additionalProperties``
(``JsonValue`` when unsaid); ``oneOf``/``anyOf`` to the union of the members that say a type;
``allOf`` to the first member that says one. Constraints (bounds, patterns, ``if``/``then``,
``not``, a member that only lists ``required`` keys) are the reader's to check and are dropped.
Invariant: the output is a pure function of the schema files, so ``sync_schema.py --check``
can compare it byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG = Path(__file__).resolve().parent.parent / "src" / "threads" / "log"

HEADER = '''"""The log's vocabulary as types, generated from the event schema by
``tools/sync_schema.py``: do not edit (``tools/sync_schema.py --check`` fails when it is stale).

``EventType`` names every event type the reader knows; ``<Type>Data`` is the TypedDict of an
event's ``data``; the other TypedDicts and aliases are the schema's definitions those use.
``draft(type, data, actor)`` builds an event to append with data of its type's shape, and
``data_of(event, type)`` reads an event's data as that shape (``LogError`` when the event is of
another type). TypedDicts are plain dicts at run time: reading a branch builds nothing extra.
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict, overload

from threads.errors import LogError
from threads.log.event_types import {envelope}
from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import Draft, Event
'''

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_BUILTIN = {"JsonValue", "JsonObject"}
# The envelope's definitions: written to ``event_types`` (``threads.log.lines`` types an event's
# actor with them, and may not import ``vocabulary``), imported by ``vocabulary``.
_ENVELOPE = ("Actor",)


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


@dataclass
class _Writer:
    defs: dict[str, Any]
    emitted: dict[str, str] = field(default_factory=dict)  # name -> source
    order: list[str] = field(default_factory=list)
    pending: set[str] = field(default_factory=set)

    def ref(self, name: str) -> str:
        """The Python name for definition ``name``, emitting it on first use."""
        if name in _BUILTIN:
            return name
        if name not in self.emitted and name not in self.pending:
            self.pending.add(name)
            self._emit_def(name, self.defs[name])
            self.pending.discard(name)
        return name

    def _emit_def(self, name: str, schema: Any) -> None:
        if _is_object(schema):
            self._typed_dict(name, schema)
        else:
            self._put(name, f"{name}: TypeAlias = {self._quoted(self.type_of(schema, name))}\n")

    def _put(self, name: str, source: str) -> None:
        self.emitted[name] = source
        self.order.append(name)

    @staticmethod
    def _quoted(annotation: str) -> str:
        return f"'{annotation}'"

    def type_of(self, schema: Any, context: str) -> str:
        """The annotation for ``schema``; ``context`` names an inline object's TypedDict."""
        found = self._type_or_none(schema, context)
        return found if found is not None else "JsonValue"

    def _type_or_none(self, schema: Any, context: str) -> str | None:
        if schema is True or schema == {}:
            return "JsonValue"
        if not isinstance(schema, dict):
            return None
        if "$ref" in schema:
            return self.ref(schema["$ref"].rsplit("/", 1)[-1])
        if "const" in schema:
            return f"Literal[{_literal(schema['const'])}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(_literal(v) for v in schema["enum"]) + "]"
        for key in ("oneOf", "anyOf"):
            if key in schema:
                members = [self._type_or_none(m, f"{context}{i}") for i, m in
                           enumerate(schema[key])]
                said = _unique([m for m in members if m is not None])
                if said:
                    return " | ".join(said)
        if _is_object(schema):
            self._typed_dict(context, schema)
            return context
        kind = schema.get("type")
        if isinstance(kind, list):
            return " | ".join(_unique([self._single(k, schema, context) for k in kind]))
        if isinstance(kind, str):
            return self._single(kind, schema, context)
        for member in schema.get("allOf", []):
            found = self._type_or_none(member, context)
            if found is not None:
                return found
        return None

    def _single(self, kind: str, schema: dict[str, Any], context: str) -> str:
        if kind == "array":
            return f"list[{self.type_of(schema.get('items', True), context + 'Item')}]"
        if kind == "object":
            extra = schema.get("additionalProperties", True)
            return f"dict[str, {self.type_of(extra, context + 'Value')}]"
        return _SCALARS[kind]

    def _field(self, schema: Any, context: str) -> str:
        """A property's annotation; an inline ``enum`` is named ``context`` (an alias), so a
        writer can spell the values a field takes without repeating them."""
        if isinstance(schema, dict) and "enum" in schema and "$ref" not in schema:
            alias = self._quoted(self.type_of(schema, context))
            self._put(context, f"{context}: TypeAlias = {alias}\n")
            return context
        return self.type_of(schema, context)

    def _typed_dict(self, name: str, schema: dict[str, Any]) -> None:
        required = set(schema.get("required", []))
        for member in schema.get("allOf", []):  # a ref to an object merges its keys
            if isinstance(member, dict) and "$ref" in member:
                target = self.defs[member["$ref"].rsplit("/", 1)[-1]]
                if _is_object(target):
                    schema = {**schema, "properties": {**target["properties"],
                                                       **schema["properties"]}}
                    required |= set(target.get("required", []))
        fields = []
        for key in sorted(schema["properties"]):
            annotation = self._field(schema["properties"][key], name + _camel(key))
            fields.append((key, annotation if key in required else f"NotRequired[{annotation}]"))
        if not fields:
            self._put(name, f"class {name}(TypedDict):\n    pass\n")
        elif all(k.isidentifier() and not keyword.iskeyword(k) for k, _ in fields):
            body = "".join(f"    {k}: {a}\n" for k, a in fields)
            self._put(name, f"class {name}(TypedDict):\n{body}")
        else:
            body = "".join(f"        \"{k}\": '{a}',\n" for k, a in fields)
            self._put(name, f'{name} = TypedDict(\n    "{name}",\n    {{\n{body}    }},\n)\n')


def _is_object(schema: Any) -> bool:
    return isinstance(schema, dict) and "properties" in schema and schema.get("type") == "object"


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return repr(value).replace("'", '"') if '"' not in value else repr(value)
    if value is None:
        return "None"
    return repr(value)


def _unique(items: list[str]) -> list[str]:
    seen: list[str] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def with_extension(vendored: dict[str, Any]) -> dict[str, Any]:
    """``vendored`` with the declared extension merged in, as the reader merges it
    (``threads.log.schema_ext``, loaded by path: the package may not import while its generated
    modules are being rewritten)."""
    spec = importlib.util.spec_from_file_location("schema_ext", LOG / "schema_ext.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    extension = json.loads((LOG / "events.ext.schema.json").read_text(encoding="utf-8"))
    merged: dict[str, Any] = module.merge_extension(vendored, extension)
    return merged


def event_types(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Event type -> the schema of its ``data``, for each ``ev_<type>`` definition."""
    out: dict[str, dict[str, Any]] = {}
    for name, definition in sorted(schema["$defs"].items()):
        if name.startswith("ev_"):
            out[definition["properties"]["type"]["const"]] = definition["properties"]["data"]
    return out


def generate(schema: dict[str, Any]) -> str:
    """The source of ``threads.log.vocabulary`` for ``schema`` (the vendored schema merged with
    its declared extension, if any)."""
    envelope = _envelope(schema).order
    writer = _Writer(schema["$defs"], emitted=dict.fromkeys(envelope, ""))
    types = event_types(schema)
    data_names = {}
    for event_type, data in types.items():
        name = _camel(event_type) + "Data"
        if _is_object(data):
            writer._typed_dict(name, data)
        else:
            writer._put(name, f"{name}: TypeAlias = {writer._quoted(writer.type_of(data, name))}\n")
        data_names[event_type] = name
    writer.ref("ActorWithPrincipal")
    body = "".join(f"\n{writer.emitted[name]}\n" for name in writer.order) + _overloads(data_names)
    used = [name for name in envelope if re.search(rf"\b{name}\b", body)]
    header = HEADER.format(envelope=", ".join(sorted([*used, "EventType"])))
    return (header + body).rstrip("\n") + "\n"


DRAFT = '''

def draft(type: EventType, data: object, actor: Actor | ActorWithPrincipal) -> Draft:
    """An event to append: ``type`` with ``data`` of that type's shape, by ``actor``."""
    return Draft(type, data, actor)  # type: ignore[arg-type]
'''

DATA_OF = '''

def data_of(event: Event, type: EventType) -> object:
    """``event``'s data as ``type``'s TypedDict; ``LogError`` when it is another type's."""
    if event.type != type:
        raise LogError(
            "invalid_transition", f"expected a {type} event, found {event.type}", seq=event.seq
        )
    return event.data
'''


TYPES_HEADER = '''"""Every event type the reader knows, generated from the event schema by
``tools/sync_schema.py``: do not edit. ``EventType`` is what ``Event.type`` holds for a known
event, and ``Actor`` (with the ``Principal`` it may carry) what ``Event.actor`` holds;
``threads.log.vocabulary`` has each type's data.
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict, get_args

'''


def generate_types(schema: dict[str, Any]) -> str:
    """The source of ``threads.log.event_types`` for ``schema``."""
    listed = "".join(f'    "{t}",\n' for t in event_types(schema))
    envelope = _envelope(schema)
    defined = "".join(f"\n{envelope.emitted[name]}\n" for name in envelope.order)
    return (
        f"{TYPES_HEADER}EventType = Literal[\n{listed}]\n"
        "EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))\n"
        f"\n{defined}".rstrip("\n") + "\n"
    )


def _envelope(schema: dict[str, Any]) -> _Writer:
    """The envelope's definitions (``_ENVELOPE`` and what they use), written for ``event_types``."""
    writer = _Writer(schema["$defs"])
    for name in _ENVELOPE:
        writer.ref(name)
    return writer


def _overloads(data_names: dict[str, str]) -> str:
    out = ["\n"]
    for event_type, name in data_names.items():
        out.append(
            f'\n@overload\ndef draft(type: Literal["{event_type}"], data: {name},'
            " actor: Actor | ActorWithPrincipal) -> Draft: ...\n"
        )
    out.append(DRAFT)
    for event_type, name in data_names.items():
        out.append(
            f'\n@overload\ndef data_of(event: Event, type: Literal["{event_type}"])'
            f" -> {name}: ...\n"
        )
    out.append(DATA_OF)
    return "".join(out)
