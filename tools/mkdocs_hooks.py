"""MkDocs hook (``hooks:`` in mkdocs.yml): the references generated at build time.

A page holding ``<!-- generated: cli -->`` gets the ``threads`` command's reference, written from
its argparse parser (``threads.cli.main.build_parser``); one holding ``<!-- generated: http-api
-->`` gets the host's routes and bodies, written from its OpenAPI document
(``threads.host.openapi.document``). Invariant: nothing here is copied by hand, so the site can
never disagree with the parser or the routes it was built from.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

CLI_MARKER = "<!-- generated: cli -->"
HTTP_MARKER = "<!-- generated: http-api -->"
HELP_WIDTH = "80"  # argparse wraps help at $COLUMNS: a fixed width keeps the page stable


def on_page_markdown(markdown: str, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if HTTP_MARKER in markdown:
        markdown = markdown.replace(HTTP_MARKER, http_api_markdown())
    return markdown


# --- the CLI ---------------------------------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser's subcommands by name, in the order ``threads --help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_text(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def cli_markdown() -> str:
    from threads.cli.main import build_parser

    parser = build_parser()
    summaries = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {a.dest: a.help or "" for a in action._choices_actions}
    parts = ["```text", _help_text(parser), "```", ""]
    for name, sub in subcommands(parser).items():
        parts += [f"## threads {name}", "", f"{_sentence(summaries.get(name, ''))}", "",
                  "```text", _help_text(sub), "```", ""]
    return "\n".join(parts)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return ""
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


# --- the HTTP API ----------------------------------------------------------------------------


def http_api_markdown() -> str:
    from threads.host.openapi import document

    doc = document()
    parts: list[str] = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            parts += _operation(method.upper(), path, op)
    parts += ["## Bodies", "",
              "Every body named above, as the host checks it. A field that is not listed is"
              " refused (`invalid_request`) where the body says *closed*.", ""]
    for name, schema in sorted(doc["components"]["schemas"].items()):
        parts += _schema(name, schema)
    return "\n".join(parts)


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"## {method} {path}", "", _sentence(op.get("summary", "")), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | required | value |", "|---|---|---|---|"]
        for p in params:
            lines.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'}"
                         f" | {_type(p.get('schema', {}))} |")
        lines.append("")
    body = op.get("requestBody")
    if body:
        schema = body["content"]["application/json"]["schema"]
        lines += [f"Body: {_type(schema)}", ""]
    lines += ["| status | means | body |", "|---|---|---|"]
    for status, answer in op["responses"].items():
        content = answer.get("content", {})
        if "text/event-stream" in content:
            shape = "Server-Sent Events"
        elif "application/json" in content and content["application/json"]["schema"]:
            shape = _type(content["application/json"]["schema"])
        else:
            shape = ""
        lines.append(f"| {status} | {answer.get('description', '')} | {shape} |")
    lines.append("")
    return lines


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    closed = " (closed)" if schema.get("additionalProperties") is False else ""
    lines = [f"### {name}", "", f"An object{closed}:", "",
             "| field | required | value |", "|---|---|---|"]
    required = set(schema.get("required", []))
    for field, spec in schema.get("properties", {}).items():
        default = f" (default `{json.dumps(spec['default'])}`)" if "default" in spec else ""
        lines.append(f"| `{field}` | {'yes' if field in required else 'no'} |"
                     f" {_type(spec)}{default} |")
    lines.append("")
    return lines


def _type(spec: dict[str, Any]) -> str:
    """One JSON Schema, as a short phrase with links to the bodies it names."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in spec:
        return " or ".join(_type(s) for s in spec["anyOf"])
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    kind = spec.get("type", "any")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}))}"
    limits = [f"{word} {spec[key]}" for key, word in
              (("minLength", "min length"), ("maxLength", "max length"),
               ("minItems", "min items"), ("maxItems", "max items"),
               ("minimum", "min"), ("maximum", "max"), ("pattern", "pattern"))
              if key in spec]
    if "pattern" in spec:
        limits[-1] = f"pattern `{spec['pattern']}`"
    return f"{kind}" + (f" ({', '.join(limits)})" if limits else "")
