"""The threads host: runs, approvals and parked effects over HTTP, a resumable event stream,
and an operator console (extra ``threads[host]``: Starlette and uvicorn).

    from threads.host import host, tokens_file
    app = host(store, [bot], authenticate=tokens_file("tokens.json"))   # any ASGI server

Importing ``threads`` never imports this package; without the extra, importing it says which
extra to install.
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "threads.host needs the host extra: pip install 'threads[host]'"
    ) from exc

from threads.host.app import host
from threads.host.auth import Authenticate, BearerTokens, bearer, tokens_file

__all__ = ["Authenticate", "BearerTokens", "bearer", "host", "tokens_file"]
