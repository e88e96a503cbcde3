"""The ``Model`` protocol: what the run loop asks of any model (scripted, OpenAI, Anthropic, ...).

A model receives a ``ModelRequest`` (the neutral Render v1 content the loop has already made
durable as a ``model_request`` artifact) and streams ``TextDelta`` items followed by exactly one
``ModelOutput``. Deltas are shown live and never recorded; the output becomes ``model_response``.
A model that fails raises ``ModelCallError`` saying whether the request may have reached the
provider (``provider_outcome``), so the loop can record the attempt honestly. Every network call
an adapter makes goes through the ``Fence`` it is handed (see ``threads.models.fence``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from threads.errors import ThreadsError
from threads.log.json_types import JsonObject
from threads.log.render_lines import Message
from threads.log.vocabulary import AdapterRef, OutputPart, PolicyModelsItemPrice
from threads.log.vocabulary import Usage as WireUsage
from threads.models.fence import Fence

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "refusal",
    "pause_turn",
    "context_window_exceeded",
    "other",
]
ProviderOutcome = Literal["not_sent", "unknown", "failed"]
AbandonReason = Literal[
    "crash",
    "timeout",
    "provider_error",
    "stream_broken",
    "cancelled",
    "steered",
    "rate_limited",
    "overloaded",
    "server_error",
    "prompt_too_long",
    "guardrail",
]


@dataclass(frozen=True, slots=True)
class Price:
    """Nano-currency units per token (USD 3 per million tokens = 3000)."""

    input: int
    output: int
    cache_read: int | None = None
    cache_write: int | None = None
    currency: str = "USD"

    def to_wire(self) -> PolicyModelsItemPrice:
        """The policy's per-token prices, as thread_started pins them."""
        wire: PolicyModelsItemPrice = {"input": self.input, "output": self.output}
        if self.cache_read is not None:
            wire["cache_read"] = self.cache_read
        if self.cache_write is not None:
            wire["cache_write"] = self.cache_write
        return wire


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider reported them; ``None`` means not reported (unknown, never
    zero)."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None

    def to_wire(self) -> WireUsage:
        out: WireUsage = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.cache_read_tokens is not None:
            out["cache_read_tokens"] = self.cache_read_tokens
        if self.cache_write_tokens is not None:
            out["cache_write_tokens"] = self.cache_write_tokens
        if self.reasoning_tokens is not None:
            out["reasoning_tokens"] = self.reasoning_tokens
        return out


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: JsonObject


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One attempt, exactly as recorded. ``messages`` are Render v1 transcript lines, typed as
    ``Message`` (``threads.log.render_lines``):
    ``{"role": "user", "content": [{"type": "text", "text": ...}]}``,
    ``{"role": "assistant", "content": [{"type": "text", ...} | {"type": "tool_use", "call_id",
    "name", "input"}]}``, ``{"role": "tool", "call_id", "is_error", "content": [{"type": "text",
    "text"}]}``. ``request_key`` = ``<branch_id>:<model_request event_id>`` identifies the attempt
    to the provider where it can take a client id (used by ``lookup``)."""

    request_key: str
    system: str
    messages: Sequence[Message]  # read-only (the run's renderer shares its lines)
    tools: list[ToolDefinition]
    params: JsonObject
    attempt: int = 1
    # Call ids threads minted for provider ids outside the call_id pattern → the provider's own
    # id, which the adapter sends back in their place (see threads.models.normalize).
    provider_call_ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """The complete response. ``content`` holds the log format's OutputParts (typed in
    ``threads.log.vocabulary``): ``{"type": "text", "text"}``, ``{"type": "tool_use", "call_id",
    "name", "input"}``, reasoning, hosted-tool, citation and image parts."""

    content: list[OutputPart]
    stop_reason: StopReason
    usage: Usage
    provider_request_id: str | None = None


class ModelCallError(ThreadsError):
    """A model call that did not produce a ``ModelOutput``.

    ``provider_outcome``: ``not_sent`` (provably never left: refused by the fence, connection
    refused), ``unknown`` (it may have been processed: timeout, reset or 5xx after sending,
    stream cut), ``failed`` (the provider answered with a definite refusal).
    ``retryable`` with ``retry_after_ms`` asks the loop to schedule a retry (429/overloaded).
    A ``code`` given makes the failure terminal for the turn: ``context_exhausted``,
    ``model_unavailable``, ``stale_epoch`` (the fence refused), or ``model_error`` (malformed
    response); without one, ``code`` reads ``model_error`` and ``terminal`` is False (an attempt
    in doubt is resent, a retryable one retried)."""

    def __init__(
        self,
        message: str,
        *,
        reason: AbandonReason,
        provider_outcome: ProviderOutcome,
        retryable: bool = False,
        retry_after_ms: int | None = None,
        http_status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(code or "model_error", message)
        self.reason: AbandonReason = reason
        self.provider_outcome: ProviderOutcome = provider_outcome
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.http_status = http_status
        self.terminal = code is not None


@dataclass(frozen=True, slots=True)
class LookupResult:
    """What a provider says about an interrupted attempt: ``found`` with the output, or
    ``not_found``; ``final`` says whether a not_found proves the request never ran."""

    status: Literal["found", "not_found", "unknown"]
    final: bool = False
    output: ModelOutput | None = None
    provider_request_id: str | None = None


@runtime_checkable
class Model(Protocol):
    """What the run loop needs of a model: an adapter (``threads.openai.openai(...)``, ...)
    or ``threads.testing.scripted_model(...)``. Its name, limits and price are pinned in the
    thread and bound budgets."""

    provider: str
    name: str
    context_window: int
    max_output_tokens: int
    price: Price | None

    def adapter_ref(self) -> AdapterRef:
        """``{"name", "version", "settings"}`` as pinned in thread_started (no secrets)."""
        ...

    def params(self) -> JsonObject:
        """Model params pinned in thread_started and rendered in every request."""
        ...

    def stream(self, request: ModelRequest, fence: Fence) -> AsyncIterator[TextDelta | ModelOutput]:
        """Yield text deltas live, then exactly one ``ModelOutput``; raise ``ModelCallError``."""
        ...

    async def aclose(self) -> None:
        """Release what the model holds open (an SDK client's connection pool); a model that
        holds nothing returns at once. Call it when you are done with the agent."""
        ...


DEFAULT_MODALITIES = frozenset({"text"})
_PART_MODALITY = {"image_ref": "image", "image": "image"}


def input_modalities(model: Model) -> frozenset[str]:
    """What a model takes as input: its ``input_modalities`` when it declares them, else text
    only (the bundled adapters send no image parts)."""
    return frozenset(getattr(model, "input_modalities", DEFAULT_MODALITIES))


def unsupported_content(part_types: Collection[str], model: Model) -> str | None:
    """Why messages holding content parts of ``part_types`` can't go to ``model`` (a part of a
    kind it does not take), or None: checked before a request is recorded or sent."""
    accepted = input_modalities(model)
    for part_type in sorted(part_types):
        needed = _PART_MODALITY.get(part_type)
        if needed is not None and needed not in accepted:
            return (
                f"the conversation holds a {part_type} part, but model {model.name}"
                f" declares input {sorted(accepted)} only; use a model that takes"
                f" {needed} input"
            )
    return None


def foreign_reasoning(messages: Iterable[Message], model: Model) -> str | None:
    """Why messages carrying another provider's signed reasoning can't go to ``model`` (it
    can't continue that reasoning), or None: checked before a request is recorded or sent."""
    for message in messages:
        if message["role"] != "assistant":
            continue  # only a response carries reasoning
        for part in message["content"]:
            if part["type"] == "reasoning" and part["provider"] != model.provider:
                return (
                    f"the conversation carries signed reasoning from {part['provider']}"
                    f" ({part['model']}), which model {model.name} of {model.provider}"
                    " can't continue; switch models with reasoning_carryover omit_prior, or"
                    f" use a {part['provider']} model"
                )
    return None


@runtime_checkable
class SupportsLookup(Protocol):
    async def lookup(self, request: ModelRequest, fence: Fence) -> LookupResult:
        """Did the attempt identified by ``request.request_key`` reach the provider?"""
        ...


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the loop pins about a model (for config hashing and budgets)."""

    provider: str
    name: str
    context_window: int
    max_output_tokens: int
    price: Price | None = None
    extra: JsonObject = field(default_factory=dict)
