"""``agent(...)``: a pure description of an agent (name, model, instructions, tools, policy).

An ``Agent`` is an ``AgentSpec`` (``threads.run.config``) that holds no state; ``run``,
``run_sync`` and ``stream`` hand it to the runner with a store. Its pinned config (``config()``)
is what ``thread_started`` records and what a later run of the same thread must match. Nothing
below this module imports it: the steps of a run see the ``AgentSpec``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from threads.errors import ConfigError
from threads.log.canonical import MAX_SAFE_INT
from threads.memory.protocol import Memory
from threads.memory.tools import memory_tools
from threads.models.protocol import Model
from threads.principal import Principal
from threads.run.blocking import run_blocking
from threads.run.budget import Budget
from threads.run.config import AgentSpec
from threads.run.context_policy import ContextPolicy
from threads.run.handoff_tool import handoff_tool
from threads.run.hooks import Extension, check_extensions
from threads.run.output_schema import (
    DEFAULT_OUTPUT_RETRIES,
    checked_schema,
    final_output_tool,
)
from threads.run.permissions import Permissions
from threads.run.results import OutputT, RunResult
from threads.run.retry_policy import DEFAULT_RETRY, RetryPolicy
from threads.run.runner import RunOptions, start_run
from threads.run.spawn import spawn_agent, subagents_line
from threads.run.streaming import RunStream
from threads.sandbox.protocol import Sandbox
from threads.sandbox.tools import sandbox_tools
from threads.store.protocol import Store
from threads.tools.context import DepsT
from threads.tools.source import ToolSource
from threads.tools.tool import Tool

AGENT_NAME_MAX = 128

# ``agent(...)``'s type parameters: the deps its tools read (from ``deps_type`` or the tools'
# ``RunContext[...]``; else ``Any``) and its output (``output=``'s model; else ``str``).
D = TypeVar("D", default=Any)
Out = TypeVar("Out", default=str)


@dataclass(frozen=True, slots=True, eq=False)
class Agent(AgentSpec, Generic[DepsT, OutputT]):
    """An ``AgentSpec`` that can start runs. Made by ``agent(...)``. ``Agent[Deps, Output]``:
    ``run``'s ``deps`` are a ``Deps`` (what its tools' ``ctx.deps`` read) and a completed run's
    ``output`` is an ``Output``."""

    async def run(
        self,
        input: str | None,
        *,
        thread: str | None = None,
        store: Store | None = None,
        deps: DepsT | None = None,
        budget: Budget | None = None,
        principal: Principal | None = None,
        lease_ttl_ms: int | None = None,
        ceiling: Permissions | None = None,
        wait: bool | float = False,
    ) -> RunResult[OutputT]:
        """Run one turn on a new thread, or continue ``thread`` (a thread id, or the branch id
        ``Thread.fork`` returned; recovery runs first). With
        ``input=None`` an existing thread is only settled and continued, no new turn is opened.
        ``lease_ttl_ms``: how long another process must wait to take over if this one dies
        on another host (a holder that dies on the same host is taken over at once).
        ``wait``: when another process holds the thread, wait for it (``True``, or at most
        that many seconds) instead of returning ``Failed(branch_busy)``.
        ``ceiling``: a run-level ``Permissions`` that can only narrow the agent's (each call is
        decided under both, the stricter wins). It is not recorded in the log: pass it again
        on every run of the thread; calls decided earlier are checked against it again."""
        options = RunOptions(
            thread, store, deps, budget, principal, lease_ttl_ms, ceiling, wait=wait
        )
        return await start_run(self, input, options)

    def run_sync(
        self,
        input: str | None,
        *,
        thread: str | None = None,
        store: Store | None = None,
        deps: DepsT | None = None,
        budget: Budget | None = None,
        principal: Principal | None = None,
        lease_ttl_ms: int | None = None,
        ceiling: Permissions | None = None,
        wait: bool | float = False,
    ) -> RunResult[OutputT]:
        """Blocking ``run``. Ctrl-C cancels the run durably (``cancel_requested`` is recorded)."""
        options = RunOptions(
            thread, store, deps, budget, principal, lease_ttl_ms, ceiling, wait=wait
        )
        return run_blocking(self, input, options)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        input: str | None,
        *,
        thread: str | None = None,
        store: Store | None = None,
        deps: DepsT | None = None,
        budget: Budget | None = None,
        principal: Principal | None = None,
        lease_ttl_ms: int | None = None,
        ceiling: Permissions | None = None,
        wait: bool | float = False,
    ) -> AsyncIterator[RunStream]:
        """Live items while the run works: committed ``Event``s and ``TextDelta``s (deltas are
        shown, never recorded). ``await s.result`` gives the outcome."""
        stream = RunStream()
        options = RunOptions(
            thread, store, deps, budget, principal, lease_ttl_ms, ceiling, wait=wait
        )
        task = asyncio.create_task(start_run(self, input, options, sink=stream))
        stream.attach(task)
        try:
            yield stream
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def agent(
    *,
    name: str,
    model: Model,
    instructions: str = "",
    tools: Sequence[Tool[D] | ToolSource] = (),
    deps_type: type[D] | None = None,
    budget: Budget | None = None,
    permissions: Permissions | None = None,
    approvers: Sequence[Principal] | None = None,
    sandbox: Sandbox | Any = None,
    memory: Memory | None = None,
    snapshots: bool = False,
    fallback: Sequence[Model] = (),
    retry: RetryPolicy | None = None,
    output: type[Out] | None = None,
    output_retries: int = DEFAULT_OUTPUT_RETRIES,
    context: ContextPolicy | None = None,
    subagents: Sequence[AgentSpec] = (),
    handoffs: Sequence[AgentSpec] = (),
    extensions: Sequence[Extension] = (),
    output_styles: Mapping[str, str] | None = None,
) -> Agent[D, Out]:
    """Describe an agent. Everything is checked here: a ``ConfigError`` now, never mid-run.

    ``sandbox`` (e.g. ``threads.sandbox.local()``) adds the built-in tools ``bash``,
    ``read_file``, ``write_file`` and ``list_files`` and is where ``runs="sandbox"`` tools run;
    with ``snapshots=True`` each turn that changed its workspace ends with a snapshot (a fork
    point). ``memory`` (e.g. ``threads.memory.local_memory()``) adds ``save_memory``,
    ``search_memory`` and ``forget_memory``. ``fallback``: models asked in turn when the one
    in force stays overloaded (``retry.fallback_after`` overloads in a row); ``retry``: the
    ``RetryPolicy`` (backoff, Retry-After cap, limits, fallback scope) the thread pins.
    ``output``: a Pydantic model; a turn then ends only on a valid ``final_output`` call (the
    tool is added), ``Completed.output`` is the validated model, and at most
    ``output_retries`` failed candidates are shown to the model before the turn ends
    ``output_invalid``. ``tools`` may hold MCP servers (``threads.mcp.mcp(...)``): each run
    connects them and adds their tools, pinned with the thread's config. Add
    ``threads.ask_user`` to ``tools`` to let the model ask a question
    (the run parks ``awaiting_input`` until ``Thread.answer``). ``context``: a
    ``ContextPolicy``; the run then compacts the conversation before a request that would pass
    its threshold, and once when the provider answers ``prompt_too_long``. ``deps_type``: the
    type of ``run``'s ``deps`` for type checkers only (it is inferred from tools defined with a
    typed ``RunContext[...]``); nothing checks it at run time. ``subagents``: agents the model
    may start with the ``spawn_agent`` tool (added, with a line naming them at the end of the
    instructions), each in a thread of its own whose final answer is the call's result
    (``threads.run.spawn``). ``handoffs``: agents the model may hand the conversation to (the
    ``handoff`` tool is added): the run then ends ``HandedOff`` and the target continues in a
    new thread of its own, its first turn run inside the same ``run``. ``extensions``:
    ``threads.Extension`` hooks (``before_tool_result``, ``before_compact``,
    ``after_compact``), each decision recorded. ``output_styles``: named instructions a user
    switches on with ``Thread.set_output_style`` (pinned with the thread's config)."""
    if not isinstance(name, str) or not name or len(name) > AGENT_NAME_MAX:
        raise ConfigError("invalid_config", "agent name must be a non-empty string")
    if not isinstance(model, Model):
        raise ConfigError(
            "invalid_config",
            "model must implement threads.Model (e.g. threads.openai.openai(...) or"
            " threads.testing.scripted_model(...))",
        )
    sources = _sources(tools)
    output_model = _output_model(output)
    own: list[Tool] = []
    for given in tools:
        if isinstance(given, Tool):
            own.append(given)
        elif not isinstance(given, ToolSource):
            raise ConfigError(
                "invalid_config",
                "tools must be made with threads.tool(...) (or be MCP servers made with"
                " threads.mcp.mcp(...))",
            )
    targets = _handoff_targets(name, handoffs)
    all_tools = [*own, *_sandbox_tools(sandbox, own, snapshots), *_memory_tools(memory),
                 *_output_tools(output_model, output_retries), *_spawn_tools(subagents),
                 *([handoff_tool()] if targets else [])]
    seen: set[str] = set()
    for t in all_tools:
        if t.name in seen:
            raise ConfigError("duplicate_name", f"two tools are named {t.name!r}")
        seen.add(t.name)
    _check_fallback(model, fallback)
    if budget is not None:
        for candidate in (model, *fallback):
            budget.check_enforceable(candidate)
    if context is not None and not isinstance(context, ContextPolicy):
        raise ConfigError("invalid_config", "context must be a threads.ContextPolicy")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError("invalid_config", "retry must be a threads.RetryPolicy")
    if subagents:
        line = subagents_line([spec.name for spec in subagents])
        instructions = f"{instructions}\n\n{line}" if instructions else line
    return Agent(
        name=name,
        model=model,
        instructions=instructions,
        tools=tuple(all_tools),
        budget=budget,
        permissions=permissions or Permissions(),
        approvers=tuple(approvers) if approvers is not None else None,
        sandbox=sandbox,
        memory=memory,
        snapshots=snapshots,
        fallback=tuple(fallback),
        retry=retry or DEFAULT_RETRY,
        output=output_model,
        output_retries=output_retries,
        sources=sources,
        context=context,
        subagents=tuple(subagents),
        handoffs=targets,
        extensions=check_extensions(extensions),
        output_styles=_styles(output_styles or {}),
    )


def _handoff_targets(name: str, handoffs: Sequence[AgentSpec]) -> tuple[AgentSpec, ...]:
    targets = tuple(handoffs)
    names = [target.name for target in targets if isinstance(target, AgentSpec)]
    if len(names) != len(targets):
        raise ConfigError("invalid_config", "handoffs must be agents made with threads.agent()")
    for target in targets:
        if names.count(target.name) > 1:
            raise ConfigError("duplicate_name", f"two handoff targets are named {target.name!r}")
        if target.name == name:
            raise ConfigError("invalid_config", f"agent {name!r} can't hand off to itself")
        if target.sources:
            raise ConfigError(
                "invalid_config",
                f"handoff target {target.name!r} has tools from MCP servers, which a handoff"
                " can't connect before the target's thread is made; give it its tools directly",
            )
    return targets


def _styles(styles: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in styles.items()):
        raise ConfigError("invalid_config", "output_styles maps non-empty names to non-empty"
                          " instruction texts")
    return tuple(sorted(styles.items()))


def _sources(tools: Sequence[Tool | ToolSource]) -> tuple[ToolSource, ...]:
    sources = tuple(t for t in tools if isinstance(t, ToolSource) and not isinstance(t, Tool))
    labels = [source.label for source in sources]
    for label in labels:
        if labels.count(label) > 1:
            raise ConfigError("duplicate_name", f"{label} is given twice: give each its own name")
    return sources


def _spawn_tools(subagents: Sequence[AgentSpec]) -> tuple[Tool, ...]:
    names: list[str] = []
    for spec in subagents:
        if not isinstance(spec, AgentSpec):
            raise ConfigError("invalid_config", "subagents must be agents made with agent(...)")
        if spec.sources:
            raise ConfigError(
                "invalid_config",
                f"subagent {spec.name!r} has tools from MCP servers: a subagent's tools must be"
                " known before it starts (give it plain tools)",
            )
        if spec.name in names:
            raise ConfigError("duplicate_name", f"two subagents are named {spec.name!r}")
        names.append(spec.name)
    return (spawn_agent,) if names else ()


def _output_model(output: type[object] | None) -> type[BaseModel] | None:
    if output is None:
        return None
    if not (isinstance(output, type) and issubclass(output, BaseModel)):
        raise ConfigError("invalid_config", "output must be a Pydantic model class")
    return output


def _output_tools(output: type[BaseModel] | None, retries: int) -> tuple[Tool, ...]:
    if output is None:
        return ()
    if isinstance(retries, bool) or not isinstance(retries, int) or not (
        0 <= retries <= MAX_SAFE_INT
    ):
        raise ConfigError("invalid_config", "output_retries must be an integer 0..2^53-1")
    checked_schema(output)
    return (final_output_tool(output),)


def _check_fallback(model: Model, fallback: Sequence[Model]) -> None:
    seen = {(model.provider, model.name)}
    for candidate in fallback:
        if not isinstance(candidate, Model):
            raise ConfigError("invalid_config", "each fallback must implement threads.Model")
        key = (candidate.provider, candidate.name)
        if key in seen:
            raise ConfigError(
                "duplicate_name", f"fallback model {candidate.provider}/{candidate.name} is"
                " already the agent's model or an earlier fallback"
            )
        seen.add(key)


def _sandbox_tools(
    sandbox: Sandbox | Any, tools: Sequence[Tool], snapshots: bool
) -> tuple[Tool, ...]:
    if sandbox is None:
        in_sandbox = [t.name for t in tools if isinstance(t, Tool) and t.runs == "sandbox"]
        if in_sandbox or snapshots:
            raise ConfigError(
                "invalid_config",
                f"{', '.join(in_sandbox) or 'snapshots'} need a sandbox: pass"
                " agent(sandbox=threads.sandbox.local()) or another provider",
            )
        return ()
    if not isinstance(sandbox, Sandbox):
        return ()  # not a provider (a restore-only double): no tools, no sandbox in the run
    if sandbox.info.egress != "enforced":
        local = [t.name for t in tools if isinstance(t, Tool) and t.effect == "sandbox_local"]
        if local:
            raise ConfigError(
                "egress_policy_unsupported",
                f"{', '.join(local)}: effect='sandbox_local' needs a sandbox that blocks the"
                " network (a command that can reach out may have effects beyond it); declare"
                " another effect class, or turn the sandbox's internet access off",
            )
    return sandbox_tools(enforced=sandbox.info.egress == "enforced")


def _memory_tools(memory: Memory | None) -> tuple[Tool, ...]:
    if memory is None:
        return ()
    check = getattr(memory, "check_fenceable", None)
    if check is None:
        raise ConfigError(
            "transport_fence_unsupported",
            "this memory adapter does not declare that its traffic passes the transport"
            " fence, so threads refuses it",
        )
    check()
    if not isinstance(memory, Memory):
        raise ConfigError(
            "invalid_config", "memory must implement threads.memory.Memory (local_memory())"
        )
    return memory_tools(memory)
