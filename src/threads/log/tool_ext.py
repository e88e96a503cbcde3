"""Reader rules for the tool fields and events of the schema extension (``events.ext.schema.json``):
deferred tool stubs and ``tools_loaded`` (rule 47), and remote tools carrying a ``remote_card``.

A deferred tool is pinned by name and description only (``defer_loading``, and with ``spec_ref``
a stub whose full spec is an artifact); ``tools_loaded`` records that a call loaded some of them.
It names a recorded call, and each tool it names is deferred in the tool set in force and not
loaded already. A remote tool (``remote_card``: an A2A partner agent) has an effect on another
system, so the schema never lets it be ``read_only`` or ``sandbox_local``, and an executed result
of its call follows that call's ``effect_begin``.
Invariant: pure functions of the values given (no I/O); a broken rule raises
``LogError(invalid_transition)`` at the event's seq.
"""

from __future__ import annotations

from collections.abc import Callable

from threads.errors import LogError
from threads.log.lines import Event
from threads.log.vocabulary import ToolSpec, data_of

SpecOf = Callable[[str], ToolSpec | None]


def is_deferred(spec: ToolSpec) -> bool:
    return spec.get("defer_loading") is True or "spec_ref" in spec


def check_tools_loaded(event: Event, spec_of: SpecOf, loaded: set[str]) -> None:
    """Rule 47; on success ``loaded`` gains the names."""
    names = data_of(event, "tools_loaded")["names"]
    if len(set(names)) != len(names):
        raise _fail(event, "tools_loaded names a tool twice")
    for name in names:
        spec = spec_of(name)
        if spec is None or not is_deferred(spec):
            raise _fail(event, f"tools_loaded names {name!r}, which is no deferred tool in the "
                        "tool set in force")
        if name in loaded:
            raise _fail(event, f"tools_loaded names {name!r}, which is loaded already")
    loaded.update(names)


def check_remote_result(event: Event, spec: ToolSpec | None, begun: bool) -> None:
    """A remote tool's executed result follows its ``effect_begin``."""
    if spec is None or "remote_card" not in spec:
        return
    result = data_of(event, "tool_result")
    if result["origin"] == "executed" and not begun:
        raise _fail(event, f"remote call {result['call_id']!r} has an executed result but "
                    "no effect_begin")


def _fail(event: Event, message: str) -> LogError:
    return LogError("invalid_transition", message, seq=event.seq)
