"""The agent tools made from what an MCP server listed: one per allowed server tool, named
``mcp__<server>__<tool>``, plus ``mcp__<server>__read_resource`` when the server offers
resources.

Each tool's effect class is the server's ``effect`` or its per-tool ``ToolEffect``; every call
of an effectful tool carries its effect key in the request's ``_meta`` as
``threads/effect_key`` (an idempotent server dedups on it; a reconcilable lookup finds by it).
A ``LookupTool`` becomes the tool's ``Reconcile``: a call of the named server tool over the
run's connection. Invariant: what can't be made into a pinnable tool (an invalid schema, a
name that is not a wire Name or that two tools share, a filter or override naming a tool the
server lacks) is ``ConfigError('invalid_config')`` naming it, before the run writes anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

import mcp_types
from pydantic import BaseModel, Field

from threads.errors import ConfigError
from threads.log.canonical import canonical
from threads.mcp.call import McpToolError, answer_of
from threads.mcp.config import McpConfig
from threads.mcp.connection import Connection, Listing
from threads.mcp.effects import LookupTool, McpResult, ToolEffect
from threads.mcp.naming import READ_RESOURCE, agent_tool_name
from threads.mcp.render import content_text, resource_text, untrusted
from threads.mcp.schema import McpArguments, arguments_model, checked_schema
from threads.tools.context import RunContext
from threads.tools.encode import valid_text
from threads.tools.tool import Found, LookupOutcome, LookupUnknown, Reconcile, Tool, tool

EFFECT_KEY_META = "threads/effect_key"
# a thread_started line holds at most 1 MiB: what one server pins leaves room for the rest
MAX_PINNED_BYTES = 512 * 1024
# A request an earlier holder had in flight can arrive until its timeout is over, and a little.
SETTLE_MARGIN_MS = 30_000


class ResourceUri(BaseModel):
    uri: str = Field(min_length=1, description="The URI of the resource to read")


def agent_tools(server: McpConfig, listing: Listing, connection: Connection) -> tuple[Tool, ...]:
    by_name = {t.name: t for t in listing.tools}
    _check_named(server, by_name)
    made: dict[str, Tool] = {}
    for listed in listing.tools:
        if server.exposes(listed.name):
            _add(made, _call_tool(server, listed, connection, by_name), server,
                 "two of its tools would both be named")
    if listing.resources:
        _add(made, _read_resource_tool(server, connection), server,
             "the resource reader threads adds has the name of one of its tools,")
    tools = tuple(made[name] for name in sorted(made))
    pinned = sum(len(canonical(t.spec())) for t in tools)
    if pinned > MAX_PINNED_BYTES:
        raise ConfigError(
            "invalid_config",
            f"{server.label}: its tools' descriptions and schemas come to {pinned} bytes; at"
            f" most {MAX_PINNED_BYTES} are pinned with a thread. Leave some out with"
            " tools={'allow': [...]}",
        )
    return tools


def _add(made: dict[str, Tool], one: Tool, server: McpConfig, clash: str) -> None:
    if one.name in made:
        raise ConfigError(
            "invalid_config",
            f"{server.label}: {clash} {one.name!r}; leave one out with tools={{'deny': [...]}}",
        )
    made[one.name] = one


def _check_named(server: McpConfig, by_name: Mapping[str, mcp_types.Tool]) -> None:
    """Every tool a filter, an override or a lookup names must be one the server offers."""
    named = [*server.allow, *server.deny, *server.effects]
    lookups = [server.reconcile, *(e.reconcile for e in server.effects.values())]
    named += [lookup.tool for lookup in lookups if isinstance(lookup, LookupTool)]
    missing = sorted({n for n in named if n not in by_name})
    if missing:
        offered = ", ".join(sorted(by_name)) or "none"
        raise ConfigError(
            "invalid_config",
            f"{server.label} has no tool {', '.join(map(repr, missing))} (its tools: {offered})",
        )


def _call_tool(
    server: McpConfig,
    listed: mcp_types.Tool,
    connection: Connection,
    by_name: Mapping[str, mcp_types.Tool],
) -> Tool:
    name = agent_tool_name(server.name, listed.name)
    schema = checked_schema(server.label, listed.name, listed.input_schema)
    effect = server.effects.get(listed.name) or ToolEffect(
        server.effect, server.dedup_window_ms, server.reconcile
    )
    server_tool = listed.name

    async def execute(args: McpArguments, ctx: RunContext) -> str:
        meta: mcp_types.RequestParamsMeta | None = None
        if effect.effect != "read_only":
            # RequestParamsMeta allows extra keys (PEP 728), which mypy can't spell yet
            meta = cast(mcp_types.RequestParamsMeta, {EFFECT_KEY_META: ctx.effect_key})
        result = await _call(
            server, connection, server_tool=server_tool, arguments=args.arguments, meta=meta,
            ctx=ctx,
        )
        text = untrusted(server_tool, content_text(result.content, result.structured_content),
                         server.secrets)
        if result.is_error:
            raise McpToolError(text)
        return text

    reconcile = effect.reconcile
    if isinstance(reconcile, LookupTool):
        reconcile = _lookup(server, connection, reconcile, by_name[reconcile.tool])
    return tool(
        name=name,
        description=server.secrets.scrub(valid_text(_description(listed))),
        input=arguments_model(name, schema),
        execute=execute,
        effect=effect.effect,
        dedup_window_ms=effect.dedup_window_ms,
        reconcile=reconcile,
        settle_ms=int(server.timeout_s * 1000) + SETTLE_MARGIN_MS,
    )


async def _call(
    server: McpConfig,
    connection: Connection,
    *,
    server_tool: str,
    arguments: Mapping[str, object],
    meta: mcp_types.RequestParamsMeta | None,
    ctx: RunContext,
) -> mcp_types.CallToolResult:
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(
            name=server_tool, arguments=dict(arguments), _meta=meta
        )
    )
    return await answer_of(
        server,
        connection.session,
        request,
        mcp_types.CallToolResult,
        source_id=server_tool,
        cancelled=ctx.cancelled,
    )


def _lookup(
    server: McpConfig, connection: Connection, lookup: LookupTool, listed: mcp_types.Tool
) -> Reconcile:
    async def find(effect_key: str, ctx: RunContext) -> LookupOutcome:
        arguments = dict(lookup.arguments(effect_key))
        try:
            result = await _call(
                server, connection, server_tool=listed.name, arguments=arguments, meta=None,
                ctx=ctx,
            )
        except McpToolError as exc:
            return LookupUnknown(f"the lookup tool {listed.name} failed: {exc}")
        text = server.secrets.scrub(content_text(result.content))
        structured = result.structured_content
        answer = lookup.read(McpResult(text, structured, bool(result.is_error)))
        return _wrapped(answer, listed.name, server)

    return Reconcile(find, lookup.finality)


def _wrapped(answer: LookupOutcome, source_id: str, server: McpConfig) -> LookupOutcome:
    """A found value is server text: the model reads it wrapped like a live call's result."""
    if isinstance(answer, Found):
        value = answer.value
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        return Found(untrusted(source_id, text, server.secrets))
    return answer


def _read_resource_tool(server: McpConfig, connection: Connection) -> Tool:
    async def read(args: ResourceUri, ctx: RunContext) -> str:
        request = mcp_types.ReadResourceRequest(
            params=mcp_types.ReadResourceRequestParams(uri=args.uri)
        )
        answer = await answer_of(
            server,
            connection.session,
            request,
            mcp_types.ReadResourceResult,
            source_id=READ_RESOURCE,
            cancelled=ctx.cancelled,
        )
        return untrusted(READ_RESOURCE, resource_text(answer.contents), server.secrets)

    return tool(
        name=agent_tool_name(server.name, READ_RESOURCE),
        description=f"Read a resource of the MCP server {server.name} by its URI.",
        input=ResourceUri,
        execute=read,
        effect="read_only",
    )


def _description(listed: mcp_types.Tool) -> str:
    return listed.description or listed.title or listed.name
