"""The shared body of every SDK-backed model: fencing, the stream/complete flow, error mapping.

A provider adapter supplies a ``Dialect`` (render a Render v1 request to its wire body, call its
SDK, read its events or response); ``SdkModel`` does the rest the same way for all of them.
Invariants: every request is sent under the fence of the run that asked (task-local slot);
``stream`` yields ``TextDelta``s and then exactly one ``ModelOutput`` only for a complete reply,
otherwise raises ``ModelCallError``; the API key is never in a repr, ``adapter_ref`` or message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from threads.adapters.errors import MalformedResponseError, to_model_call_error
from threads.adapters.fenced_client import TaskFenceSlot
from threads.adapters.wire import as_provider_sees_it
from threads.errors import ConfigError
from threads.log.json_types import JsonObject
from threads.log.vocabulary import AdapterRef
from threads.models.fence import Fence
from threads.models.protocol import ModelOutput, ModelRequest, Price, TextDelta

ADAPTER_VERSION = "1"


class StreamReader(Protocol):
    def feed(self, event: JsonObject) -> str | None:
        """Take one stream event; return the text it adds, if any."""
        ...

    def finish(self) -> ModelOutput:
        """The complete output; raises ``MalformedResponseError`` if the stream never ended."""
        ...


class Dialect(Protocol):
    """One provider API's wire format."""

    reserved_params: frozenset[str]

    def render(self, request: ModelRequest, *, streaming: bool) -> JsonObject: ...

    async def send(self, client: Any, body: JsonObject) -> Any:
        """Call the SDK with ``body``: an async event stream if ``body['stream']``, else the
        response object."""
        ...

    def reader(self) -> StreamReader: ...

    def read_complete(self, response: JsonObject) -> ModelOutput: ...


class DialectBase:
    """What every dialect is built with: the provider's model name and the output cap it sends."""

    def __init__(self, model: str, max_output_tokens: int) -> None:
        self._model = model
        self._max_output_tokens = max_output_tokens

    def output_cap(self, params: Mapping[str, Any]) -> tuple[int, JsonObject]:
        """The output cap a request sends, under the provider's own name, and the other params:
        the pinned ``max_tokens`` (what a cost budget bounds an attempt by), or for a thread
        pinned before adapters pinned it, the model's ``max_output_tokens``."""
        rest = dict(params)
        cap = rest.pop("max_tokens", self._max_output_tokens)
        return cap, rest


def as_dict(obj: object) -> JsonObject:
    """An SDK model object (or mapping) as plain data, without its validation warnings."""
    to_dict = getattr(obj, "to_dict", None)
    data = to_dict(warnings=False) if callable(to_dict) else obj
    if not isinstance(data, Mapping):
        raise MalformedResponseError(f"expected a JSON object, got {type(obj).__name__}")
    return dict(data)


def endpoint_host(base_url: str | None, default: str) -> str:
    """The host of ``base_url`` (no credentials, port, path or query: none of them changes which
    service answers in a way the thread's config should pin)."""
    if base_url is None:
        return default
    host = urlsplit(base_url).hostname
    if not host:
        raise ConfigError("invalid_config", f"base_url {base_url!r} has no host; pass a full URL")
    return host


def check_model_settings(
    name: str, context_window: int, max_output_tokens: int, params: Mapping[str, Any] | None,
    reserved: frozenset[str],
) -> JsonObject:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("invalid_config", "the model name must be a non-empty string")
    for label, value in (("context_window", context_window),
                         ("max_output_tokens", max_output_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError("invalid_config", f"{label} must be a positive integer")
    if max_output_tokens > context_window:
        raise ConfigError("invalid_config", "max_output_tokens cannot exceed context_window")
    chosen = dict(params or {})
    if clash := sorted(reserved & chosen.keys()):
        raise ConfigError(
            "invalid_config",
            f"params {clash} are set by threads from the request itself; remove them",
        )
    # Pinned, so a cost budget can bound every attempt (a stream cut before its usage arrived
    # costs at most max_tokens of output), and sent as the provider's own output cap.
    cap = chosen.setdefault("max_tokens", max_output_tokens)
    if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap <= max_output_tokens:
        raise ConfigError(
            "invalid_config",
            f"params max_tokens must be an integer from 1 to max_output_tokens"
            f" ({max_output_tokens}); it is the output cap each request sends",
        )
    return chosen


class SdkModel:
    """A ``Model`` backed by an official SDK client whose HTTP goes through the fence."""

    provider: str
    name: str
    context_window: int
    max_output_tokens: int
    price: Price | None

    def __init__(
        self, *, provider: str, name: str, context_window: int, max_output_tokens: int,
        price: Price | None, params: JsonObject, dialect: Dialect, client: Any,
        slot: TaskFenceSlot, api_key: str, streaming: bool, settings: JsonObject,
    ) -> None:
        self.provider = provider
        self.name = name
        self.context_window = context_window
        self.max_output_tokens = max_output_tokens
        self.price = price
        self._params = params
        self._dialect = dialect
        self._client = client
        self._slot = slot
        self._api_key = api_key
        self._streaming = streaming
        self._settings = settings

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._settings.items())
        return f"{type(self).__name__}(name={self.name!r}, {shown})"

    def adapter_ref(self) -> AdapterRef:
        """Only the API the requests are written for: the endpoint and streaming say how a
        request travels, not what it asks, so a thread is not pinned to them."""
        settings = {"api": self._settings["api"]}
        return {"name": self.provider, "version": ADAPTER_VERSION, "settings": settings}

    def params(self) -> JsonObject:
        return dict(self._params)

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> SdkModel:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def stream(
        self, request: ModelRequest, fence: Fence
    ) -> AsyncIterator[TextDelta | ModelOutput]:
        self._slot.set(fence)
        body = self._dialect.render(as_provider_sees_it(request), streaming=self._streaming)
        try:
            if self._streaming:
                reader = self._dialect.reader()
                async with await self._dialect.send(self._client, body) as events:
                    async for event in events:
                        if text := reader.feed(as_dict(event)):
                            yield TextDelta(text)
                output = reader.finish()
            else:
                output = self._dialect.read_complete(
                    as_dict(await self._dialect.send(self._client, body))
                )
        except Exception as exc:
            # ``from None``: SDK exceptions carry the request (and its auth header) along.
            raise to_model_call_error(
                exc, provider=self.provider, secrets=[self._api_key]
            ) from None
        yield output
