"""Map whatever an SDK call raised to a ``ModelCallError`` the run loop can record honestly.

The one question each mapping answers is ``provider_outcome``: ``not_sent`` only when it is
provable that no request left (the fence refused, the connection was never established);
``failed`` when the provider answered with a definite refusal; ``unknown`` whenever the request
may have been processed (5xx, timeouts after connecting, streams cut, unreadable responses).
Invariant: no message this module builds contains an API key (exact keys and key-shaped tokens
are scrubbed, since providers echo masked keys back).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping

import httpx

from threads.errors import StoreError
from threads.log.json_types import JsonObject
from threads.models.protocol import ModelCallError

MAX_RETRY_AFTER_MS = 10 * 60 * 1000  # a provider asking for longer than this is treated as this
_KEY_SHAPED = re.compile(r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_\-*.]{6,}|Bearer\s+\S+")


class MalformedResponseError(Exception):
    """The provider's 200 response could not be read as a complete reply."""


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return _KEY_SHAPED.sub("[redacted]", text)


def to_model_call_error(
    exc: BaseException, *, provider: str, secrets: Iterable[str]
) -> ModelCallError:
    error = _classify(exc, provider)
    error.message = redact(error.message, secrets)
    error.args = (error.message,)
    return error


def _classify(exc: BaseException, provider: str) -> ModelCallError:
    if isinstance(exc, ModelCallError):
        return exc  # already classified by a reader; only its message still needs scrubbing
    chain = list(_chain(exc))
    for link in chain:
        if isinstance(link, StoreError) and link.code == "stale_epoch":
            return ModelCallError(
                f"the fence refused to send to {provider}: this run no longer holds its branch "
                "(another process took it over); nothing was sent",
                # the lease is lost: to the log this writer is as good as crashed
                reason="crash", provider_outcome="not_sent", code="stale_epoch",
            )
    for link in chain:
        status = getattr(link, "status_code", None)
        if isinstance(status, int) and hasattr(link, "response"):
            return _from_status(link, status, provider)
    for link in chain:
        if isinstance(link, (MalformedResponseError, json.JSONDecodeError, *_pydantic_errors())):
            return ModelCallError(
                f"{provider} sent a response threads could not read ({_describe(link)}); the "
                "request may have been processed, so the attempt is recorded as unknown",
                reason="provider_error", provider_outcome="unknown", code="model_error",
            )
    for link in chain:
        never_connected = (*_transport("ConnectError", "ConnectTimeout", "PoolTimeout"),
                           ConnectionRefusedError)
        if isinstance(link, never_connected):
            return ModelCallError(
                f"could not connect to {provider} ({_describe(link)}); nothing was sent. Check "
                "base_url and the network",
                reason="provider_error", provider_outcome="not_sent",
            )
    for link in chain:
        if isinstance(link, (*_transport("TimeoutException"), TimeoutError)):
            return ModelCallError(
                f"{provider} did not answer in time ({_describe(link)}); the request may have "
                "been processed. Raise timeout_s if the model needs longer",
                reason="timeout", provider_outcome="unknown",
            )
    return ModelCallError(
        f"the connection to {provider} broke after the request was sent ({_describe(exc)}); "
        "the request may have been processed",
        reason="stream_broken", provider_outcome="unknown",
    )


def _from_status(error: BaseException, status: int, provider: str) -> ModelCallError:
    response = getattr(error, "response", None)
    headers: Mapping[str, str] = getattr(response, "headers", None) or {}
    detail = _error_detail(getattr(error, "body", None))
    kind = str(detail.get("type") or "")
    code = str(detail.get("code") or "")
    said = f"{provider} answered HTTP {status}" + (f" ({code or kind})" if code or kind else "")
    if message := detail.get("message"):
        said += f": {message}"
    if status in {429, 529} or kind == "overloaded_error":
        overloaded = status == 529 or kind == "overloaded_error"
        return ModelCallError(
            f"{said}. The request was refused; the run loop retries after the delay",
            reason="overloaded" if overloaded else "rate_limited", provider_outcome="failed",
            retryable=True, retry_after_ms=_retry_after_ms(headers), http_status=status,
        )
    if (
        code == "context_length_exceeded"
        or status == 413
        or "prompt is too long" in str(detail.get("message", "")).lower()
    ):
        return ModelCallError(
            f"{said}. Shorten the conversation or use a model with a larger context window",
            reason="prompt_too_long", provider_outcome="failed", http_status=status,
            code="context_exhausted",
        )
    if status in (401, 403, 404):
        advice = {
            401: "check the API key (passed as api_key or set in the environment)",
            403: "this API key has no access to the model",
            404: "check the model name and base_url",
        }[status]
        return ModelCallError(
            f"{said}. The model is unavailable: {advice}",
            reason="provider_error", provider_outcome="failed", http_status=status,
            code="model_unavailable",
        )
    if status >= 500 or status < 400:  # < 400: an error event inside a streamed 200 reply
        return ModelCallError(
            f"{said}. The request may have been processed, so the attempt is recorded as unknown",
            reason="server_error", provider_outcome="unknown", http_status=status,
        )
    return ModelCallError(
        f"{said}. The provider rejected the request; check the model params",
        reason="provider_error", provider_outcome="failed", http_status=status,
    )


def _error_detail(body: object) -> JsonObject:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            return dict(inner)
    return {}


def _retry_after_ms(headers: Mapping[str, str]) -> int | None:
    """``retry-after-ms`` (milliseconds) or ``retry-after`` (seconds); HTTP dates are ignored
    (the loop then uses its own backoff)."""
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        return int(min(max(value, 0.0), MAX_RETRY_AFTER_MS))
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _transport(*names: str) -> tuple[type[BaseException], ...]:
    """The named exception classes of httpx and, when an SDK loaded it, httpx2."""
    modules = [httpx] + ([sys.modules["httpx2"]] if "httpx2" in sys.modules else [])
    return tuple(getattr(module, name) for module in modules for name in names)


def _pydantic_errors() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    return (ValidationError,)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
