"""Cost arithmetic of the log format, in one place.

Owns what one model attempt may cost at most (its bound, which is also what a budget reserves
before the request is sent), what each recorded attempt did cost (its charge), and the sum of
the charges (the ``Cost`` projection). The reader's projection and the run's budget guard both
call this module, so the two can never disagree about an amount.

The rules: the model entry and ``max_tokens`` come from the attempt's settings epoch; the bound
is the input bound (the context window, when the model declares billed input never exceeds it)
at the highest input-side price, plus the pinned ``max_tokens`` at the output price; a model
without a price, or a ``max_tokens`` that isn't a positive integer, has no bound. Nothing wraps:
a sum past 2^53-1 is ``cost_overflow``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypedDict

from threads.errors import ThreadsError
from threads.log.fold.records import Epoch
from threads.log.vocabulary import PolicyModelsItem, ThreadStartedData, Usage

MAX_INT = 2**53 - 1  # the largest integer the format carries


class Attempt(Protocol):
    """What a reader keeps of one ``model_request``: the settings epoch it was sent under and
    how it ended (``outcome`` None while open; ``usage`` only with a response)."""

    @property
    def settings(self) -> Epoch: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def usage(self) -> Usage | None: ...
    @property
    def billing(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Charge:
    """One attempt's cost: ``known`` nanos, and an ``upper`` bound (None: unbounded)."""

    known: int
    upper: int | None
    exact: bool


class CostWire(TypedDict):
    """The ``Cost`` projection as JSON."""

    bounded: bool
    complete: bool
    currency: str
    known_nanos: int
    upper_bound_nanos: int


@dataclass(frozen=True, slots=True)
class Cost:
    """The ``Cost`` projection: what a run of attempts spent."""

    currency: str
    known_nanos: int
    upper_bound_nanos: int
    complete: bool  # every attempt's cost is known exactly
    bounded: bool  # no attempt is unbounded: upper_bound_nanos is a real bound

    def to_wire(self) -> CostWire:
        return {
            "bounded": self.bounded,
            "complete": self.complete,
            "currency": self.currency,
            "known_nanos": self.known_nanos,
            "upper_bound_nanos": self.upper_bound_nanos,
        }


def positive_int(value: object) -> int | None:
    """``value`` when it is an integer >= 1 (a boolean is not), else None."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


@dataclass(frozen=True, slots=True)
class PriceTable:
    """A thread's pinned ``policy.currency`` and ``policy.models``."""

    currency: str | None
    models: tuple[PolicyModelsItem, ...]

    @classmethod
    def of(cls, started: ThreadStartedData | None) -> PriceTable:
        policy = {} if started is None else started.get("policy", {})
        models = tuple(policy.get("models") or ())
        currency = policy.get("currency") if models else None
        return cls(currency, models)

    def entry(self, settings: Epoch) -> PolicyModelsItem | None:
        """The ``policy.models`` entry of the settings' model, by (provider, name)."""
        ref = settings["model"]
        for entry in self.models:
            if entry["provider"] == ref["provider"] and entry["name"] == ref["name"]:
                return entry
        return None

    def input_bound(self, settings: Epoch) -> int | None:
        """Input tokens (cache reads and writes included) one attempt may be billed for."""
        entry = self.entry(settings)
        if entry is None or entry.get("input_billing_bound") != "context_window":
            return None
        return positive_int(entry.get("context_window"))

    @staticmethod
    def output_bound(settings: Epoch) -> int | None:
        """Output tokens one attempt may produce: the epoch's pinned ``max_tokens``."""
        return positive_int(settings["model_params"].get("max_tokens"))

    def bound(self, settings: Epoch) -> int | None:
        """Nanos one attempt under ``settings`` may cost at most; None when unbounded."""
        entry = self.entry(settings)
        price = None if entry is None else entry.get("price")
        inp, out = self.input_bound(settings), self.output_bound(settings)
        if price is None or inp is None or out is None:
            return None
        input_rate = max(price["input"], price.get("cache_read", 0), price.get("cache_write", 0))
        return int(inp * input_rate + out * price["output"])

    @staticmethod
    def billed(attempt: Attempt) -> bool:
        """False only for an attempt proven never billed: no response, and not sent or
        recorded ``billing: not_billed``."""
        return attempt.usage is not None or (
            attempt.outcome != "not_sent" and attempt.billing != "not_billed"
        )

    def charge(self, attempt: Attempt) -> Charge | None:
        """What ``attempt`` cost; None when it is proven never billed."""
        usage = attempt.usage
        if not self.billed(attempt):
            return None
        entry = self.entry(attempt.settings)
        price = None if entry is None else entry.get("price")
        if price is None:  # unpriced: unknown, never free
            return Charge(0, None, exact=False)
        if usage is None:  # open, in doubt or failed without proof: at its bound
            return Charge(0, self.bound(attempt.settings), exact=False)
        known, exact = 0, True
        billed = (  # (tokens, price per token); reasoning is inside output_tokens
            (usage.get("input_tokens", 0), price.get("input", 0)),
            (usage.get("output_tokens", 0), price.get("output", 0)),
            (usage.get("cache_read_tokens", 0), price.get("cache_read", 0)),
            (usage.get("cache_write_tokens", 0), price.get("cache_write", 0)),
        )
        for tokens, rate in billed:
            if tokens is None:
                exact = False
            else:
                known += int(tokens * rate)
        if exact:
            return Charge(known, known, exact=True)
        bound = self.bound(attempt.settings)
        return Charge(known, None if bound is None else known + bound, exact=False)

    def total(self, attempts: Iterable[Attempt]) -> Cost:
        """The sum of the attempts' charges; raises ``cost_overflow`` past 2^53-1. Needs a
        currency (``PriceTable.currency`` None means there is no cost projection)."""
        assert self.currency is not None, "no currency: a thread without one has no cost"
        known = upper = 0
        complete = bounded = True
        for attempt in attempts:
            charge = self.charge(attempt)
            if charge is None:
                continue
            known += charge.known
            complete = complete and charge.exact
            if charge.upper is None:
                bounded = False
                upper += charge.known
            else:
                upper += charge.upper
        if known > MAX_INT or upper > MAX_INT:
            raise ThreadsError(
                "cost_overflow",
                "the thread's cost sums past 2^53-1 nano-units, more than the log format"
                " carries; check the prices pinned in its policy (nano-units per token)",
            )
        return Cost(self.currency, known, upper, complete, bounded)
