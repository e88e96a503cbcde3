"""``mcp(...)``: an MCP server whose tools an agent may call, described as a value.

Pure until a run (or ``check()``) opens it: every mistake in the description is a
``ConfigError`` here; connecting, listing, filtering and pinning happen per run, over a
connection that lives as long as the run. See ``threads.mcp`` for the whole story.

Invariant: the description holds its secrets (header and ``env`` values) only to send them to
the server; its ``repr`` leaves them out, and every text made from the server is scrubbed of
them (``Secrets``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from threads.errors import ConfigError
from threads.mcp.config import McpConfig
from threads.mcp.effects import LookupTool, ToolEffect
from threads.mcp.naming import check_server_name, prefix
from threads.mcp.secrets import Secrets
from threads.models.fence import Fence, OpenFence
from threads.tools.tool import EFFECT_CLASSES, EffectClass, Reconcile, Tool

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_SETUP_TIMEOUT_S = 30.0
MCP_EFFECTS = tuple(e for e in EFFECT_CLASSES if e != "sandbox_local")


@dataclass(frozen=True, slots=True, eq=False)
class McpServer:
    """An MCP server for ``agent(tools=[...])``. Made by ``mcp(...)``."""

    config: McpConfig

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def label(self) -> str:
        return self.config.label

    def owns(self, tool_name: str) -> bool:
        return tool_name.startswith(prefix(self.config.name))

    @contextlib.asynccontextmanager
    async def open(self, fence_of: Callable[[], Fence]) -> AsyncIterator[Sequence[Tool]]:
        """Connect, list, filter and yield the agent tools; the connection closes on exit."""
        # here, not at the top: importing threads.mcp must work without the SDK installed
        from threads.mcp.connection import connected
        from threads.mcp.tools import agent_tools

        async with connected(self.config, fence_of) as (connection, listing):
            yield agent_tools(self.config, listing, connection)

    async def check(self) -> list[str]:
        """Connect once (its own connection, outside any run), list and check the tools as a run
        would, and return the agent tool names a run would pin. ``ConfigError`` otherwise."""
        async with self.open(OpenFence) as tools:
            return [t.name for t in tools]


def mcp(
    *,
    name: str,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    command: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    runs: Literal["host", "sandbox"] = "host",
    tools: Mapping[Literal["allow", "deny"], Sequence[str]] | None = None,
    effect: EffectClass = "unguarded",
    dedup_window_ms: int | None = None,
    reconcile: Reconcile | LookupTool | None = None,
    effects: Mapping[str, ToolEffect] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    setup_timeout_s: float = DEFAULT_SETUP_TIMEOUT_S,
) -> McpServer:
    """An MCP server whose tools become the agent's ``mcp__<name>__<tool>`` tools.

    Exactly one of ``url`` (a remote server: Streamable HTTP, falling back to SSE; ``headers``
    are sent with every request) or ``command`` + ``args`` (a local server started as a child
    process, over stdio, with only ``PATH``, ``HOME`` and ``env`` in its environment). Header
    and ``env`` values are treated as secrets: sent to the server, never logged or shown.
    ``tools={"allow": [...]}`` / ``{"deny": [...]}`` filters by the server's tool names.
    ``effect`` is the class of every tool (default ``unguarded``: a call a crash left in doubt
    parks); ``effects={"tool": ToolEffect(...)}`` overrides it per tool. ``idempotent`` needs
    ``dedup_window_ms``; ``reconcilable`` needs ``reconcile``: a ``LookupTool`` (another tool
    of this server) or your own ``threads.Reconcile``. ``timeout_s`` bounds each call;
    ``setup_timeout_s`` the connection and listing, at the start of every run."""
    if importlib.util.find_spec("mcp") is None:
        raise ImportError(
            "threads.mcp needs the official MCP SDK; install it with pip install 'threads[mcp]'"
        )
    check_server_name(name)
    if (url is None) == (command is None):
        raise ConfigError(
            "invalid_config", f"MCP server {name!r}: give exactly one of url= or command="
        )
    if runs == "sandbox":
        raise ConfigError(
            "capability_missing",
            f"MCP server {name!r}: runs='sandbox' is not supported; MCP servers run on the host",
        )
    if runs != "host":
        raise ConfigError("invalid_config", f"MCP server {name!r}: runs is 'host'")
    allow, deny = _filters(name, tools)
    _check_effect(name, "", ToolEffect(effect, dedup_window_ms, reconcile))
    for tool_name, override in (effects or {}).items():
        if not isinstance(override, ToolEffect):
            raise ConfigError(
                "invalid_config",
                f"MCP server {name!r}: effects[{tool_name!r}] must be a threads.mcp.ToolEffect",
            )
        _check_effect(name, tool_name, override)
    headers, env = _strings(name, "headers", headers), _strings(name, "env", env)
    for what, limit in (("timeout_s", timeout_s), ("setup_timeout_s", setup_timeout_s)):
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not (
            limit > 0 and math.isfinite(limit)
        ):
            raise ConfigError("invalid_config", f"MCP server {name!r}: {what} must be > 0")
    if command is not None and (not isinstance(command, str) or not command):
        raise ConfigError("invalid_config", f"MCP server {name!r}: command must be a string")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise ConfigError("invalid_config", f"MCP server {name!r}: url must be http(s)://...")
    if any(not isinstance(a, str) for a in args):
        raise ConfigError("invalid_config", f"MCP server {name!r}: args must be strings")
    return McpServer(McpConfig(
        name=name,
        url=url,
        command=command,
        args=tuple(args),
        cwd=cwd,
        allow=allow,
        deny=deny,
        effect=effect,
        dedup_window_ms=dedup_window_ms,
        reconcile=reconcile,
        effects=dict(effects or {}),
        timeout_s=float(timeout_s),
        setup_timeout_s=float(setup_timeout_s),
        headers=headers,
        env=env,
        secrets=Secrets.of(headers.values(), env.values()),
    ))


def _filters(
    name: str, tools: Mapping[Literal["allow", "deny"], Sequence[str]] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if tools is None:
        return (), ()
    if not isinstance(tools, Mapping) or set(tools) - {"allow", "deny"}:
        raise ConfigError(
            "invalid_config",
            f"MCP server {name!r}: tools is {{'allow': [...]}} and/or {{'deny': [...]}}",
        )
    allow, deny = tuple(tools.get("allow", ())), tuple(tools.get("deny", ()))
    if isinstance(tools.get("allow"), str) or isinstance(tools.get("deny"), str):
        raise ConfigError("invalid_config", f"MCP server {name!r}: allow/deny are lists of names")
    if "allow" in tools and not allow:
        raise ConfigError(
            "invalid_config", f"MCP server {name!r}: an empty allow list would give no tools"
        )
    if any(not isinstance(n, str) for n in (*allow, *deny)):
        raise ConfigError("invalid_config", f"MCP server {name!r}: allow/deny hold tool names")
    return allow, deny


def _check_effect(server: str, tool_name: str, effect: ToolEffect) -> None:
    where = f"MCP server {server!r}" + (f", tool {tool_name!r}" if tool_name else "")
    if effect.effect not in MCP_EFFECTS:
        raise ConfigError(
            "invalid_config", f"{where}: effect must be one of {', '.join(MCP_EFFECTS)}"
        )
    window = effect.dedup_window_ms
    if effect.effect == "idempotent":
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(
                "invalid_config",
                f"{where}: effect='idempotent' needs dedup_window_ms (how long the server"
                " dedups a threads/effect_key), a positive integer",
            )
    elif window is not None:
        raise ConfigError(
            "invalid_config", f"{where}: dedup_window_ms only goes with effect='idempotent'"
        )
    reconcile = effect.reconcile
    if effect.effect == "reconcilable":
        if not isinstance(reconcile, Reconcile | LookupTool):
            raise ConfigError(
                "invalid_config",
                f"{where}: effect='reconcilable' needs reconcile=LookupTool(...) (another tool"
                " of the server) or a threads.Reconcile",
            )
        if isinstance(reconcile, LookupTool) and reconcile.finality not in ("final", "nonfinal"):
            raise ConfigError("invalid_config", f"{where}: finality is 'final' or 'nonfinal'")
    elif reconcile is not None:
        raise ConfigError(
            "invalid_config", f"{where}: reconcile only goes with effect='reconcilable'"
        )


def _strings(server: str, what: str, values: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(values or {})
    for key, value in out.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError(
                "invalid_config", f"MCP server {server!r}: {what} maps names to strings"
            )
    return out
