"""Who is calling: ``authenticate(request) -> Principal | None``, and bearer tokens from a file.

Every ``/v1`` request is authenticated before anything else; no principal is 401
``unauthenticated``. The local operator principal (``api/local/operator``) is never accepted:
a host acts only for the principals its callers prove. ``tokens_file`` reads a JSON object
``{"<token>": {"issuer", "tenant", "subject"}}`` once; a presented token is compared with every
known one in constant time (``hmac.compare_digest``), and no token is ever logged or echoed.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import HTTPConnection

from threads.errors import ConfigError
from threads.principal import LOCAL_OPERATOR, Principal

Authenticate = Callable[[HTTPConnection], Awaitable[Principal | None] | Principal | None]


def bearer(request: HTTPConnection) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class BearerTokens:
    """An ``Authenticate`` over a fixed token → principal table."""

    def __init__(self, table: dict[str, Principal]) -> None:
        for principal in table.values():
            if principal == LOCAL_OPERATOR:
                raise ConfigError(
                    "invalid_config",
                    "a host token may not map to the local operator (api/local/operator);"
                    " give each caller its own issuer, tenant and subject",
                )
        self._table = [(token.encode(), principal) for token, principal in table.items()]

    def __call__(self, request: HTTPConnection) -> Principal | None:
        presented = bearer(request)
        if presented is None:
            return None
        given = presented.encode()
        found: Principal | None = None
        for token, principal in self._table:  # every entry is compared: no early exit
            if hmac.compare_digest(token, given):
                found = principal
        return found


def tokens_file(path: str | Path) -> BearerTokens:
    """Read ``{"<token>": {"issuer", "tenant", "subject"}}``; a bad file is ``invalid_config``
    naming the entry's position, never the token."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError("invalid_config", f"cannot read the tokens file {path}: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            "invalid_config",
            f"{path} must hold a non-empty JSON object of token -> {{issuer, tenant, subject}}",
        )
    table: dict[str, Principal] = {}
    for n, (token, who) in enumerate(raw.items(), start=1):
        fields = who if isinstance(who, dict) else {}
        try:
            if not token or set(fields) != {"issuer", "tenant", "subject"}:
                raise ValueError("needs exactly issuer, tenant and subject")
            table[token] = Principal(fields["issuer"], fields["tenant"], fields["subject"])
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                "invalid_config", f"{path}: entry {n} is not a valid principal ({exc})"
            ) from None
    return BearerTokens(table)
