"""Refusals over HTTP: ``{"error": {"code", "message"}}`` and the status each code maps to.

The status map is the reference host's: 400 ``invalid_request``/``invalid_cursor``, 401
``unauthenticated``/``unverified``, 403 ``forbidden``, 404 ``not_found``, 409 for every other
code; plus 413 for a body over the host's limit. Codes the library raises under its own names
are renamed here to the host's (``invalid_argument`` is ``invalid_request``, ...), so a client
only ever sees host codes. Messages never carry a credential.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from threads.errors import ThreadsError

STATUS: dict[str, int] = {
    "invalid_request": 400,
    "invalid_cursor": 400,
    "unauthenticated": 401,
    "unverified": 401,
    "forbidden": 403,
    "not_found": 404,
    "payload_too_large": 413,
}

# Library codes under the name the host API gives them.
RENAMED: dict[str, str] = {
    "invalid_argument": "invalid_request",
    "invalid_config": "invalid_request",
    "permission_rule_invalid": "invalid_request",
    "budget_unenforceable": "invalid_request",
    "not_pending": "not_found",
}


class HostError(Exception):
    """A refusal a route answers with; ``code`` is a host API code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def of(cls, error: ThreadsError) -> HostError:
        return cls(RENAMED.get(error.code, error.code), error.message)

    def response(self) -> JSONResponse:
        return failure(self.code, self.message)


def failure(code: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=STATUS.get(code, 409)
    )
