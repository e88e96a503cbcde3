"""``McpConfig``: an MCP server's description as ``mcp(...)`` checked it (where it is, what of
it the agent uses, how its calls settle, its limits and its secrets).

Invariant: a plain value; its ``repr`` leaves the secrets (header and ``env`` values) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from threads.mcp.effects import LookupTool, ToolEffect
from threads.mcp.secrets import Secrets
from threads.tools.tool import EffectClass, Reconcile


@dataclass(frozen=True, slots=True, eq=False)
class McpConfig:
    """What ``mcp(...)`` was given, checked."""

    name: str
    url: str | None
    command: str | None
    args: tuple[str, ...]
    cwd: str | None
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    effect: EffectClass
    dedup_window_ms: int | None
    reconcile: Reconcile | LookupTool | None
    effects: Mapping[str, ToolEffect]
    timeout_s: float
    setup_timeout_s: float
    headers: Mapping[str, str] = field(repr=False)
    env: Mapping[str, str] = field(repr=False)
    secrets: Secrets = field(repr=False)

    @property
    def label(self) -> str:
        return f"MCP server {self.name!r}"

    def exposes(self, server_tool: str) -> bool:
        """Whether the model is given this server tool (``tools={"allow"|"deny": ...}``)."""
        if self.allow and server_tool not in self.allow:
            return False
        return server_tool not in self.deny
