"""The operator console: static HTML, CSS and JavaScript modules shipped in
``threads/host/ui/``, served by the host itself (no CDN, no build step, nothing fetched from
elsewhere, so it works on a machine with no network).

The pages carry no data and need no login of their own: the scripts in the viewer's browser
call the ``/v1`` API with the viewer's bearer token (given once as ``#token=...`` in the URL,
which never reaches the server, or typed in), so the console can do exactly what that token
can. Every answer carries a strict Content-Security-Policy (scripts and styles from this
origin only, no inline script, no framing), so even a log holding markup can't run script.
"""

from __future__ import annotations

import re
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from threads.host.failure import failure

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_NAME = re.compile(r"^[a-z][a-z0-9-]*\.(?:html|js|css|svg)$")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; object-src 'none';"
    " base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _files() -> frozenset[str]:
    folder = resources.files("threads.host").joinpath("ui")
    return frozenset(f.name for f in folder.iterdir() if _NAME.match(f.name))


FILES = _files()


def _file(name: str) -> Response:
    data = resources.files("threads.host").joinpath("ui", name).read_bytes()
    return Response(
        data,
        media_type=_TYPES[name[name.rindex("."):]],
        headers={
            "cache-control": "no-cache",
            "content-security-policy": CSP,
            "referrer-policy": "no-referrer",
            "x-content-type-options": "nosniff",
        },
    )


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in FILES:
        return failure("not_found", "no such file")
    return _file(name)


def ui_routes() -> list[Route]:
    async def threads(_request: Request) -> Response:
        return _file("index.html")

    async def inbox(_request: Request) -> Response:
        return _file("inbox.html")

    async def thread(_request: Request) -> Response:
        return _file("thread.html")

    return [
        Route("/ui/", threads, methods=["GET"]),
        Route("/ui/inbox", inbox, methods=["GET"]),
        Route("/ui/threads/{thread_id}", thread, methods=["GET"]),
        Route("/ui/static/{name}", _asset, methods=["GET"]),
    ]
