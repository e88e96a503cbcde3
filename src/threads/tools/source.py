"""``ToolSource``: tools an agent learns only by connecting somewhere (an MCP server's).

A source is pure until a run opens it: ``open(fence_of)`` connects, lists what it offers and
yields the tools, and closing the context closes the connection. Every request the connection
sends first passes the fence ``fence_of()`` returns at that moment (the run's lease check), so
a run that lost its lease sends nothing more through it. The tools it yields are ordinary
``Tool`` values: they are pinned with the thread's config like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from threads.models.fence import Fence
from threads.tools.tool import Tool


@runtime_checkable
class ToolSource(Protocol):
    @property
    def label(self) -> str:
        """What an error calls this source (``MCP server 'billing'``)."""
        ...

    def owns(self, tool_name: str) -> bool:
        """Whether a tool of this name comes (or came) from this source."""
        ...

    def open(
        self, fence_of: Callable[[], Fence]
    ) -> AbstractAsyncContextManager[Sequence[Tool]]:
        """Connect, list and yield the tools; the connection lives until the context exits."""
        ...
