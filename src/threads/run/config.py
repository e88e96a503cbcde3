"""``AgentSpec``: what an agent is (model, instructions, tools, policy, approvers), as a frozen
value, and the config it pins a thread to.

``config()`` is ``thread_started``'s data; a later run of the thread must match it
(``threads.run.pinning``): a config change starts a new thread. ``threads.run.agent.Agent`` is
this value plus the ``run``/``run_sync``/``stream`` facades, so every step of a run depends on
this module, never on the facade that starts runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from threads.errors import ConfigError
from threads.log.hashing import value_hash
from threads.log.vocabulary import (
    ModelSettings,
    Policy,
    PolicyModelsItem,
    ThreadStartedData,
    ThreadStartedDataParent,
)
from threads.memory.protocol import Memory
from threads.models.protocol import Model
from threads.principal import Principal
from threads.run.budget import Budget
from threads.run.context_policy import ContextPolicy
from threads.run.handoff_tool import handoff_line
from threads.run.hooks import Extension
from threads.run.output_schema import DEFAULT_OUTPUT_RETRIES, FINAL_OUTPUT, output_policy_of
from threads.run.permissions import Permissions
from threads.run.retry_policy import DEFAULT_RETRY, RetryPolicy
from threads.sandbox.protocol import Sandbox
from threads.tools.source import ToolSource
from threads.tools.tool import Tool


@dataclass(frozen=True, slots=True, eq=False)
class AgentSpec:
    name: str
    model: Model
    instructions: str
    tools: tuple[Tool, ...]
    budget: Budget | None
    permissions: Permissions
    approvers: tuple[Principal, ...] | None
    sandbox: Sandbox | Any  # a provider; another object (a test double) gets no sandbox tools
    memory: Memory | None
    snapshots: bool = False  # snapshot the sandbox at the end of each turn that changed it
    fallback: tuple[Model, ...] = ()  # asked in turn when the model in force stays overloaded
    retry: RetryPolicy = DEFAULT_RETRY
    output: type[BaseModel] | None = None  # a turn ends only on a valid final_output
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    # Tools known once connected (MCP servers): a run opens them and adds their tools
    # (``threads.run.sources``); until then the config can't be known.
    sources: tuple[ToolSource, ...] = ()
    sources_open: bool = False
    context: ContextPolicy | None = None  # compact long conversations (None: never on its own)
    handoffs: tuple[AgentSpec, ...] = ()  # agents the conversation may be handed to
    extensions: tuple[Extension, ...] = ()  # hooks at named points; not pinned (code, not config)
    output_styles: tuple[tuple[str, str], ...] = ()  # name -> text, pinned as policy.output_styles
    subagents: tuple[AgentSpec, ...] = ()  # the agents ``spawn_agent`` may start

    def tool_named(self, name: str) -> Tool | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def subagent_named(self, name: str) -> AgentSpec | None:
        return next((spec for spec in self.subagents if spec.name == name), None)

    def under_parent(self, parent: AgentSpec) -> AgentSpec:
        """This agent as ``parent``'s subagent: only the tools the parent has too (its
        ``final_output`` excepted), so a child can never do what its parent can't; and the
        parent's approvers (so, down a tree, the root's) decide for it."""
        names = {t.name for t in parent.tools}
        kept = tuple(t for t in self.tools if t.name in names or t.name == FINAL_OUTPUT)
        return replace(self, tools=kept, approvers=parent.approvers)

    def config(self, *, parent: ThreadStartedDataParent | None = None) -> ThreadStartedData:
        """thread_started's data: what this agent pins a thread to. ``parent``: the thread
        this one was started from (a handoff's target names its source); hashed with the
        rest, never compared by a later run (``threads.run.pinning``)."""
        if self.sources and not self.sources_open:
            raise ConfigError(
                "invalid_config",
                f"agent {self.name!r} has tools from {_labels(self.sources)}: its config is"
                " known once they are connected (a run does that; so does each server's"
                " check())",
            )
        data: ThreadStartedData = {
            "adapter": self.model.adapter_ref(),
            "agent_name": self.name,
            "config_hash": "",  # set below, from the rest
            "instructions": self.pinned_instructions(),
            "model": {"name": self.model.name, "provider": self.model.provider},
            "model_params": self.model.params(),
            "tools": [t.spec() for t in self.tools],
        }
        provider = getattr(getattr(self.sandbox, "info", None), "provider", None)
        if isinstance(provider, str):
            data["sandbox_provider"] = provider
        policy = self.policy()
        if policy:
            data["policy"] = policy
        if parent is not None:
            data["parent"] = parent.copy()
        data["config_hash"] = config_hash(data)
        return data

    def pinned_instructions(self) -> str:
        """The system text: the instructions, then a line naming the handoff targets."""
        if not self.handoffs:
            return self.instructions
        line = handoff_line([target.name for target in self.handoffs])
        return f"{self.instructions}\n\n{line}" if self.instructions else line

    def policy(self) -> Policy:
        policy: Policy = {}
        if self.model.price is not None:
            policy["currency"] = self.model.price.currency
        policy["models"] = [_model_entry(m) for m in (self.model, *self.fallback)]
        if self.fallback:
            policy["fallback"] = [fallback_settings(m) for m in self.fallback]
        if self.budget is not None:
            policy["budget"] = self.budget.to_wire()
        policy["permissions"] = self.permissions.to_wire()
        policy["retry"] = self.retry.to_wire()
        if self.context is not None:
            policy["context"] = self.context.to_wire()
        if self.output is not None:
            policy["output"] = output_policy_of(self.output, self.output_retries)
        if self.handoffs:
            policy["handoffs"] = [target.name for target in self.handoffs]
        if self.output_styles:
            policy["output_styles"] = dict(self.output_styles)
        return policy


def _labels(sources: tuple[ToolSource, ...]) -> str:
    return ", ".join(source.label for source in sources)


def _model_entry(model: Model) -> PolicyModelsItem:
    """A ``policy.models`` entry: the bounds and price budgets read."""
    entry: PolicyModelsItem = {
        "context_window": model.context_window,
        "input_billing_bound": "context_window",
        "max_output_tokens": model.max_output_tokens,
        "name": model.name,
        "provider": model.provider,
    }
    if model.price is not None:
        entry["price"] = model.price.to_wire()
    return entry


def fallback_settings(model: Model) -> ModelSettings:
    """A ``policy.fallback`` entry: the settings epoch a fallback to ``model`` starts, without
    the prior model's reasoning."""
    return {
        "adapter": model.adapter_ref(),
        "model": {"name": model.name, "provider": model.provider},
        "model_params": model.params(),
        "reasoning_carryover": "omit_prior",
    }


def config_hash(data: Mapping[str, object]) -> str:
    return value_hash({k: v for k, v in data.items() if k != "config_hash"})
