"""Vendor the threads event schema into the package: ``src/threads/log/events.v1.schema.json``.

Reads the shared conformance schema, removes every ``description`` annotation (only at schema
positions: a property that happens to be *named* ``description`` inside a ``properties`` map,
such as ToolSpec's, stays), and writes compact JSON with sorted keys. ``--check`` exits 1 when
the vendored file differs from what this script would write, so CI catches a stale copy.
It then writes the log's vocabulary as types (``src/threads/log/vocabulary.py`` and
``event_types.py``, made by ``tools/vocabulary.py`` from the vendored schema and its declared
extension, ``events.ext.schema.json``), which ``--check`` compares too.
Invariant: the vendored file is a pure function of the upstream schema, and the vocabulary of
the vendored file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vocabulary import generate, generate_types, with_extension

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = ROOT.parent / "shared" / "conformance" / "events.v1.schema.json"
TARGET = ROOT / "src" / "threads" / "log" / "events.v1.schema.json"
VOCABULARY = ROOT / "src" / "threads" / "log" / "vocabulary.py"
EVENT_TYPES = ROOT / "src" / "threads" / "log" / "event_types.py"

# Keywords whose value is one subschema, a list of subschemas, or a map name -> subschema.
_ONE = frozenset({
    "additionalProperties", "contains", "else", "if", "items", "not", "propertyNames", "then",
    "unevaluatedItems", "unevaluatedProperties",
})
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"$defs", "definitions", "dependentSchemas", "patternProperties", "properties"})


def strip_descriptions(schema: Any) -> Any:
    """``schema`` without its ``description`` annotations; non-schema values are kept as is."""
    if not isinstance(schema, dict):
        return schema  # a boolean schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in _ONE:
            out[key] = strip_descriptions(value)
        elif key in _LIST and isinstance(value, list):
            out[key] = [strip_descriptions(item) for item in value]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: strip_descriptions(sub) for name, sub in value.items()}
        else:
            out[key] = value
    return out


def render(source: Path) -> bytes:
    schema = json.loads(source.read_text(encoding="utf-8"))
    stripped = strip_descriptions(schema)
    return json.dumps(stripped, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--check", action="store_true", help="exit 1 if the vendored file differs")
    args = parser.parse_args(argv)
    wanted = render(args.source)
    written = {TARGET: wanted, **vocabulary(wanted)}
    if args.check:
        stale = [path for path, content in written.items()
                 if (path.read_bytes() if path.exists() else b"") != content]
        for path in stale:
            print(f"{path} is stale; run tools/sync_schema.py", file=sys.stderr)
        return 1 if stale else 0
    for path, content in written.items():
        path.write_bytes(content)
    return 0


def vocabulary(vendored: bytes) -> dict[Path, bytes]:
    """The generated modules (``threads.log.vocabulary``, ``threads.log.event_types``) for the
    vendored schema's bytes and the declared extension beside it."""
    schema = with_extension(json.loads(vendored))
    return {VOCABULARY: generate(schema).encode(), EVENT_TYPES: generate_types(schema).encode()}


if __name__ == "__main__":
    sys.exit(main())
