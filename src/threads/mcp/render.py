"""How what an MCP server sends back becomes the text the log records and the model reads.

Server-originated text is untrusted: it is wrapped as
``<reference source="mcp" id="<tool>" untrusted="true">…</reference>`` with ``&``, ``<`` and
``>`` escaped, so nothing inside can close the wrapper or pass for the host's own words. Text
parts are joined by newlines; any other part shows as ``[<type> content omitted]``. Invariants:
the text is valid UTF-8, holds none of the server's configured secrets, and is at most
``MAX_RESULT_CHARS`` long before wrapping (the rest is cut, and the text says so).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

import mcp_types

from threads.mcp.secrets import Secrets
from threads.tools.encode import valid_text

MAX_RESULT_CHARS = 1_000_000


def untrusted(source_id: str, text: str, secrets: Secrets) -> str:
    body = html.escape(_capped(secrets.scrub(valid_text(text))), quote=False)
    return (
        f'<reference source="mcp" id="{html.escape(source_id)}" untrusted="true">'
        f"{body}</reference>"
    )


def content_text(parts: Sequence[object], structured: object = None) -> str:
    """A tool result's content as text (its structured content when it sent no parts)."""
    if not parts and structured is not None:
        return json.dumps(structured, sort_keys=True, ensure_ascii=False, default=str)
    shown = []
    for part in parts:
        if isinstance(part, mcp_types.TextContent):
            shown.append(part.text)
        else:
            shown.append(f"[{getattr(part, 'type', 'unknown')} content omitted]")
    return "\n".join(shown)


def resource_text(contents: Sequence[object]) -> str:
    shown = []
    for item in contents:
        if isinstance(item, mcp_types.TextResourceContents):
            shown.append(item.text)
        else:
            shown.append("[blob content omitted]")
    return "\n".join(shown)


def _capped(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    cut = len(text) - MAX_RESULT_CHARS
    return f"{text[:MAX_RESULT_CHARS]}\n[threads cut the last {cut} characters of this result]"
