"""A run's tool sources (MCP servers): their connections, the fence those send through, and
naming the source behind a changed pinned tool list.

``RunSources.open`` connects every source of the spec (each connection closes with
``aclose``, which the runner calls however the run ends) and returns the spec with their tools
added after the agent's own, in the order the sources were given. A tool name that two places
offer is a ``ConfigError`` before anything is written. ``changed_sources`` turns a pinned-vs-now
tool list difference into words that name the source each changed tool belongs to.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TypeVar

from threads.errors import ConfigError, StoreError
from threads.log.vocabulary import ToolSpec
from threads.models.fence import Fence, OpenFence
from threads.run.config import AgentSpec
from threads.tools.source import ToolSource

S = TypeVar("S", bound=AgentSpec)


class _Refuse:
    async def check(self) -> None:
        raise StoreError(
            "stale_epoch",
            "this run does not hold its thread (not yet, or no longer): nothing is sent",
        )


class SourceFence:
    """What a run's source connections check before each request: refusing, except while a
    new thread's sources are set up (``setup``: no thread, so no lease to lose yet) and once
    the run's writer holds the lease (``bind``: its lease check)."""

    def __init__(self) -> None:
        self._fence: Fence = _Refuse()

    def setup(self) -> None:
        self._fence = OpenFence()

    def bind(self, writer: Fence) -> None:
        self._fence = writer

    def refuse(self) -> None:
        self._fence = _Refuse()

    def get(self) -> Fence:
        return self._fence


class RunSources:
    """The connections of one run to its agent's tool sources, and their ``fence``."""

    def __init__(self) -> None:
        self.fence = SourceFence()
        self._stack = contextlib.AsyncExitStack()

    async def open(self, spec: S) -> S:
        """``spec`` with its sources' tools added (itself when it has none or they are open)."""
        if not spec.sources or spec.sources_open:
            return spec
        tools = list(spec.tools)
        names = {t.name for t in tools}
        for source in spec.sources:
            for added in await self._stack.enter_async_context(source.open(self.fence.get)):
                if added.name in names:
                    raise ConfigError(
                        "duplicate_name",
                        f"{source.label} offers a tool named {added.name!r}, and the agent"
                        " already has one: rename or filter one of them",
                    )
                names.add(added.name)
                tools.append(added)
        return dataclasses.replace(spec, tools=tuple(tools), sources_open=True)

    async def aclose(self) -> None:
        """Close every connection (again: a no-op)."""
        await self._stack.aclose()


def changed_sources(
    pinned: Sequence[Mapping[str, object]] | None, now: Sequence[ToolSpec],
    sources: tuple[ToolSource, ...],
) -> list[str]:
    """Per source whose tools differ from the pinned ones: ``"<label>: added x; removed y;
    changed z"``."""
    before = {str(t.get("name")): t for t in pinned or []}
    after = {t["name"]: t for t in now}
    out: list[str] = []
    for source in sources:
        added = sorted(n for n in after if n not in before and source.owns(n))
        removed = sorted(n for n in before if n not in after and source.owns(n))
        changed = sorted(
            n for n in after if n in before and before[n] != after[n] and source.owns(n)
        )
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (("added", added), ("removed", removed), ("changed", changed))
            if names
        ]
        if parts:
            out.append(f"{source.label}: {'; '.join(parts)}")
    return out
