"""Names of an MCP server and of the agent tools made from its tools.

A server name is a wire Name (``[a-z][a-z0-9_]{0,63}``) without ``__``; its tools become
``mcp__<server>__<tool>``, the tool's own name lowercased with every character outside
``[a-z0-9_]`` turned into ``_``. Invariant: a name that is not a wire Name, or two server tools
that come out the same, is a ``ConfigError``, never a tool silently renamed twice or dropped.
"""

from __future__ import annotations

import re

from threads.errors import ConfigError

WIRE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_OUTSIDE = re.compile(r"[^a-z0-9_]")
READ_RESOURCE = "read_resource"


def check_server_name(name: object) -> str:
    if not isinstance(name, str) or not WIRE_NAME.match(name) or "__" in name:
        raise ConfigError(
            "invalid_config",
            f"MCP server name {name!r} must match ^[a-z][a-z0-9_]{{0,63}}$ without '__'"
            " (it is part of each tool's name: mcp__<server>__<tool>)",
        )
    return name


def prefix(server: str) -> str:
    return f"mcp__{server}__"


def agent_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``; ``invalid_config`` when that is not a wire Name."""
    name = prefix(server) + _OUTSIDE.sub("_", tool.lower())
    if not WIRE_NAME.match(name):
        raise ConfigError(
            "invalid_config",
            f"MCP server {server!r}: its tool {tool!r} would be named {name!r}, which is not a"
            " tool name (^[a-z][a-z0-9_]{0,63}$: at most 64 characters); leave it out with"
            " tools={'deny': [...]}, or give the server a shorter name",
        )
    return name
