"""``threads.mcp``: tools from any Model Context Protocol server, with effect classes.

``mcp(...)`` describes a server (remote over Streamable HTTP or SSE, or local over stdio);
pass it in ``agent(tools=[...])``. Each run opens its own connection (closed however the run
ends), lists the server's tools, filters them, and pins them with the thread's config: a server
whose tools changed since the thread started is a config change, named in the ``ConfigError``.
Every request passes the run's fence. A call the crash left in doubt settles by its effect
class, like any tool's: ``ToolEffect`` per tool, ``LookupTool`` to reconcile through another
tool of the same server. Needs the ``mcp`` extra (``pip install 'threads[mcp]'``) to connect;
importing this module does not.
"""

from threads.mcp.effects import LookupTool, McpResult, ToolEffect
from threads.mcp.server import McpServer, mcp

__all__ = ["LookupTool", "McpResult", "McpServer", "ToolEffect", "mcp"]
