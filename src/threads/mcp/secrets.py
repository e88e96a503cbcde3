"""What of an MCP server's configuration is secret, and scrubbing it from text.

Every header value and every ``env`` value given for a server is treated as a secret: it is
sent to the server (in the request headers, in the child's environment) and nowhere else. Any
text threads keeps or shows (a tool result the log records and the model reads, an error
message) passes through ``Secrets.scrub`` (``scrub_error`` for errors) first. Values shorter
than ``MIN_SECRET_CHARS`` are not scrubbed (``"1"`` would wreck every text) and are not
secrets worth the name.
Invariant: ``scrub`` never raises and is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from threads.adapters.errors import redact

MIN_SECRET_CHARS = 6


@dataclass(frozen=True, slots=True)
class Secrets:
    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, *groups: Iterable[str]) -> Secrets:
        found: set[str] = set()
        for value in (v for group in groups for v in group):
            # "Bearer <token>": the token alone is a secret too (a server may echo just it)
            for piece in (value, *value.split()):
                if len(piece) >= MIN_SECRET_CHARS:
                    found.add(piece)
        return cls(tuple(sorted(found, key=len, reverse=True)))

    def scrub(self, text: str) -> str:
        """``text`` with every secret value replaced by ``[redacted]``."""
        for value in self.values:
            text = text.replace(value, "[redacted]")
        return text

    def scrub_error(self, text: str) -> str:
        """An error's text: the secret values and anything shaped like a key scrubbed."""
        return redact(text, self.values)


def shown_url(url: str) -> str:
    """``url`` as errors show it: without userinfo, query or fragment (they can hold tokens)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:
        return "(an unreadable URL)"
