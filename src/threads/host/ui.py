"""The web timeline: static HTML, CSS and JavaScript shipped in ``threads/host/ui/``.

The pages carry no data and need no login of their own: the script in the viewer's browser
calls the ``/v1`` API with the viewer's bearer token (given once as ``#token=...`` in the URL,
which never reaches the server, or typed in), so the page can do exactly what that token can.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}
_FILES = ("index.html", "thread.html", "app.js", "style.css")


def _read(name: str) -> bytes:
    return resources.files("threads.host").joinpath("ui", name).read_bytes()


def _file(name: str) -> Response:
    kind = _TYPES[name[name.rindex("."):]]
    return Response(
        _read(name),
        media_type=kind,
        headers={
            "cache-control": "no-cache",
            "content-security-policy": "default-src 'self'; style-src 'self'; script-src 'self'",
            "referrer-policy": "no-referrer",
        },
    )


async def _index(_request: Request) -> Response:
    return _file("index.html")


async def _thread(_request: Request) -> Response:
    return _file("thread.html")


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _FILES:
        from threads.host.failure import failure

        return failure("not_found", "no such file")
    return _file(name)


def ui_routes() -> list[Route]:
    return [
        Route("/ui/", _index, methods=["GET"]),
        Route("/ui/threads/{thread_id}", _thread, methods=["GET"]),
        Route("/ui/static/{name}", _asset, methods=["GET"]),
    ]
