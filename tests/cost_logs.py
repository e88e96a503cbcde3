"""Hand-written logs for the cost and usage projections: a thread pinned to a price table and
``max_tokens`` of the test's choosing, whose turns end the way a test needs (a response with
the usage it names, an abandoned attempt, an attempt still open)."""

from __future__ import annotations

from typing import Any

from threads.clock import FakeClock
from threads.log.fold import Fold
from threads.log.hashing import value_hash
from threads.log.lines import Event
from threads.log.render import render
from threads.log.verify import verify_export
from threads.testing.sample_log import MODEL, USER, SampleLog

ADAPTER = {"name": "scripted", "settings": {}, "version": "1"}
PRICE = {"cache_read": 300, "cache_write": 3750, "input": 3000, "output": 15000}
WINDOW, CAP = 200_000, 8192  # the entry's context_window and max_output_tokens


def entry(name: str = "scripted-1", price: dict[str, int] | None = PRICE) -> dict[str, Any]:
    model: dict[str, Any] = {
        "context_window": WINDOW, "input_billing_bound": "context_window",
        "max_output_tokens": CAP, "name": name, "provider": "scripted",
    }
    if price is not None:
        model["price"] = price
    return model


def settings(name: str, max_tokens: object) -> dict[str, Any]:
    return {
        "adapter": ADAPTER,
        "model": {"name": name, "provider": "scripted"},
        "model_params": {"max_tokens": max_tokens},
        "reasoning_carryover": "keep",
    }


class CostLog:
    """A thread under construction; every request is the Render v1 of the log before it."""

    def __init__(self, policy: dict[str, Any] | None, *, max_tokens: object = 1024) -> None:
        self.log = SampleLog(FakeClock(1790000000000))
        config: dict[str, Any] = {
            "adapter": ADAPTER,
            "agent_name": "demo",
            "instructions": "Be brief.",
            "model": {"name": "scripted-1", "provider": "scripted"},
            "model_params": {"max_tokens": max_tokens},
            "tools": [],
        }
        if policy is not None:
            config["policy"] = policy
        self.log.add("thread_started", {**config, "config_hash": value_hash(config)})

    def request(self) -> Event:
        """A turn opened and its model request made durable (left open)."""
        self.log.add("user_input", {"source": "api", "text": "hi"}, USER)
        events = self.log.events
        rendered = render(events[0].data, events)
        return self.log.add("model_request", {
            "attempt": 1,
            "declared_prefix": rendered.declared_prefix(),
            "request_ref": rendered.request_ref(),
        })

    def answered(self, **usage: int | None) -> None:
        """A turn whose reply reported ``usage`` (input and output default to null)."""
        request = self.request()
        self.log.add("model_response", {
            "completeness": "complete",
            "content": [{"text": "ok", "type": "text"}],
            "request_event_id": request.event_id,
            "stop_reason": "end_turn",
            "usage": {"input_tokens": None, "output_tokens": None, **usage},
        }, MODEL)
        self.log.add("turn_completed", {"reason": "end_turn"})

    def abandoned(self, outcome: str, reason: str, billing: str | None = None) -> None:
        """A turn whose request got no response."""
        request = self.request()
        data = {
            "provider_outcome": outcome, "reason": reason, "request_event_id": request.event_id,
        }
        if billing is not None:
            data["billing"] = billing
        self.log.add("model_attempt_abandoned", data)
        self.log.add("turn_completed", {"reason": "error"})

    def switch(self, name: str, max_tokens: object = 1024) -> None:
        """A new settings epoch: later requests go to ``name`` with that ``max_tokens``."""
        self.log.add(
            "settings_changed", {"reason": "user", "settings": settings(name, max_tokens)}, USER
        )

    def export(self) -> bytes:
        return self.log.export()

    @property
    def thread_id(self) -> str:
        return self.log.header.thread_id

    def read(self) -> Fold:
        fold = Fold()
        verify_export(self.log.export(), apply=fold.apply, on_header=fold.header)
        return fold


__all__ = ["CostLog", "entry", "settings"]
