"""What a thread is pinned to, and the comparison that names what changed.

A thread keeps the config its ``thread_started`` records: the adapter, model and request
parameters, the instructions, the tools and the policy (permissions, budget, retry policy,
models and fallbacks, output schema). A later run with another config is refused before
anything is written, and the refusal names each changed key path with both values, e.g.
``model_params.temperature: 0.2 -> 0.7``. Transport is not pinned: how a request travels
(streaming, the endpoint's spelling) never decides what the model is asked, so the adapter
settings older releases recorded for it (``TRANSPORT_SETTINGS``) are left out of the comparison.
Values that look like credentials are never shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from threads.errors import ConfigError

PINNED_KEYS: Final = ("adapter", "instructions", "model", "model_params", "policy", "tools")
# Adapter settings that only say how requests travel; earlier releases recorded them.
TRANSPORT_SETTINGS: Final = frozenset({"endpoint", "streaming"})
SECRET_KEY = re.compile(
    r"(api[_-]?key|authorization|secret|password|credential|bearer|cookie|headers?$"
    r"|(^|[_-])token$)",
    re.IGNORECASE,
)
MAX_SHOWN = 60  # characters of one value in a message
MAX_CHANGES = 6  # changes named in one message


class _Absent:
    def __repr__(self) -> str:
        return "(none)"


ABSENT: Final = _Absent()


@dataclass(frozen=True, slots=True)
class Change:
    """One pinned value that differs: its key path and both values (``ABSENT`` when one side
    lacks it). ``item`` is set for a whole entry of a named list (a tool) added or removed."""

    path: str
    before: object
    after: object
    item: bool = False

    def describe(self) -> str:
        if self.item:
            return f"{self.path}: {'added' if self.before is ABSENT else 'removed'}"
        return f"{self.path}: {_shown(self.path, self.before)} -> {_shown(self.path, self.after)}"


def _pinned_view(config: Mapping[str, object]) -> dict[str, object]:
    """The parts of a thread's config a later run must match (transport left out)."""
    return {key: _without_transport(key, config.get(key)) for key in PINNED_KEYS}


def changes(pinned: Mapping[str, object], config: Mapping[str, object]) -> list[Change]:
    """Every pinned key path whose value differs between ``pinned`` (a ``thread_started``) and
    ``config`` (an agent's), in key order."""
    out: list[Change] = []
    _diff(_pinned_view(pinned), _pinned_view(config), "", out)
    return out


def describe(found: list[Change]) -> str:
    """``changed: a.b: 1 -> 2; ...``, at most ``MAX_CHANGES`` named."""
    shown = "; ".join(change.describe() for change in found[:MAX_CHANGES])
    more = len(found) - MAX_CHANGES
    return f"changed: {shown}" + (f"; and {more} more" if more > 0 else "")


def check_pinned(
    pinned: Mapping[str, object], config: Mapping[str, object], sources: str = ""
) -> None:
    """Raise ``ConfigError("invalid_config")`` naming what changed when ``config`` is not the
    config ``pinned`` records; ``sources`` adds which tool servers changed their tools."""
    found = changes(pinned, config)
    if not found:
        return
    named = f" ({sources})" if sources else ""
    raise ConfigError(
        "invalid_config",
        f"a config change starts a new thread ({describe(found)}){named}; run this agent"
        " without thread= to start one, or run the thread with its original agent",
    )


def _diff(before: object, after: object, path: str, out: list[Change]) -> None:
    if before == after:
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(before.keys() | after.keys()):
            _diff(before.get(key, ABSENT), after.get(key, ABSENT), _join(path, key), out)
        return
    keyed_before, keyed_after = _by_name(before), _by_name(after)
    if keyed_before is not None and keyed_after is not None:
        for name in sorted(keyed_before.keys() | keyed_after.keys()):
            old, new = keyed_before.get(name, ABSENT), keyed_after.get(name, ABSENT)
            if old is ABSENT or new is ABSENT:
                out.append(Change(_join(path, name), old, new, item=True))
            else:
                _diff(old, new, _join(path, name), out)
        return
    out.append(Change(path, before, after))


def _by_name(value: object) -> dict[str, object] | None:
    """A list of entries with distinct ``name`` strings (tools), keyed by name; else None."""
    if not isinstance(value, list) or not value:
        return None
    names = [entry.get("name") if isinstance(entry, dict) else None for entry in value]
    if not all(isinstance(name, str) for name in names) or len(set(names)) != len(names):
        return None
    return {str(name): entry for name, entry in zip(names, value, strict=True)}


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _without_transport(key: str, value: object) -> object:
    """``value`` (found under ``key``) with the transport settings dropped from every adapter
    in it (a fallback entry records an adapter too)."""
    if isinstance(value, list):
        return [_without_transport("", item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {name: _without_transport(name, item) for name, item in value.items()}
    settings = out.get("settings")
    if key == "adapter" and isinstance(settings, dict):
        out["settings"] = {k: v for k, v in settings.items() if k not in TRANSPORT_SETTINGS}
    return out


def _shown(path: str, value: object) -> str:
    if value is ABSENT:
        return "(none)"
    if any(SECRET_KEY.search(key) for key in path.split(".")):
        return "[redacted]"
    text = json.dumps(_redacted(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _redacted(value: object) -> object:
    if isinstance(value, dict):
        return {
            key: "[redacted]" if SECRET_KEY.search(str(key)) else _redacted(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value
