"""A tool's input model and ``execute`` made from a typed Python function (``@tool``).

Every parameter but the one annotated ``RunContext`` becomes a field of a generated Pydantic
model (its annotation and default; ``Annotated[int, Field(gt=0, description=...)]`` works), so
the model is shown the same JSON Schema, and the run validates the same way, as for a
hand-written ``input=`` model. Sync functions run in a worker thread so they never block the
event loop; async ones are awaited.

Invariant: a function accepted here can be called with exactly the model's fields (and the
context); any other shape is a ``ConfigError`` at definition time, never a surprise mid-run.
"""

from __future__ import annotations

import asyncio
import inspect
import types
import typing
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_origin

from pydantic import BaseModel, create_model

from threads.errors import ConfigError
from threads.tools.context import RunContext

Execute = Callable[[Any, RunContext], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class FunctionTool:
    """What ``@tool`` needs from a function: its input model, its async ``execute``, and the
    description its docstring gives (``None`` without one)."""

    input: type[BaseModel]
    execute: Execute
    docstring: str | None


def model_title(tool_name: str) -> str:
    """``charge_card`` -> ``ChargeCard``: the generated model's name, which the JSON Schema
    shows as its title (a hand-written ``class ChargeCard(BaseModel)`` gives the same one)."""
    return "".join(part.capitalize() for part in tool_name.split("_"))


def from_function(fn: Callable[..., object], tool_name: str) -> FunctionTool:
    signature = _signature(fn, tool_name)
    hints = _hints(fn, tool_name)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(
                "invalid_config",
                f"tool {tool_name}: parameter {param.name} must be a plain named parameter"
                " (no *args, **kwargs or positional-only): each one is a field the model fills",
            )
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if annotation is RunContext or get_origin(annotation) is RunContext:
            if context_param is not None:
                raise ConfigError(
                    "invalid_config", f"tool {tool_name}: only one parameter may be a RunContext"
                )
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            example = "ctx: RunContext" if param.name == "ctx" else f"{param.name}: str"
            raise ConfigError(
                "invalid_config",
                f"tool {tool_name}: annotate parameter {param.name} (e.g. {example}); a"
                " parameter's type is the schema the model is shown and the input is checked"
                " against, and a RunContext one receives the run's context",
            )
        if param.name.startswith("_"):
            raise ConfigError(
                "invalid_config",
                f"tool {tool_name}: parameter {param.name} starts with '_', which a Pydantic"
                " field can't; rename it",
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
    return FunctionTool(
        _input_model(tool_name, fields),
        _execute(fn, context_param),
        inspect.getdoc(fn),
    )


def as_async(fn: Callable[..., object]) -> Callable[..., Awaitable[object]]:
    """``fn`` as an async function: awaited when it is one, else run in a worker thread."""
    if _is_async(fn):
        return typing.cast(Callable[..., Awaitable[object]], fn)

    async def in_worker_thread(*args: object, **kwargs: object) -> object:
        value = await asyncio.to_thread(fn, *args, **kwargs)
        if inspect.isawaitable(value):  # a sync wrapper that hands back a coroutine
            value = await value
        return value

    return in_worker_thread


def _is_async(fn: Callable[..., object]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )


def _signature(fn: Callable[..., object], tool_name: str) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            "invalid_config", f"tool {tool_name}: can't read the parameters of {fn!r}: {exc}"
        ) from exc


def _hints(fn: Callable[..., object], tool_name: str) -> dict[str, Any]:
    """The parameters' annotations, resolved (``from __future__ import annotations`` makes them
    strings). The return annotation is left out: it shapes nothing here, and may name a type
    the function's module can't see."""
    unwrapped = inspect.unwrap(fn)
    annotations = dict(getattr(unwrapped, "__annotations__", {}))
    annotations.pop("return", None)
    params = types.SimpleNamespace(
        __annotations__=annotations, __globals__=getattr(unwrapped, "__globals__", {})
    )
    try:
        local_names = inspect.getclosurevars(unwrapped).nonlocals
    except TypeError:  # not a Python function (a callable object): module names only
        local_names = {}
    try:
        return typing.get_type_hints(params, localns=local_names, include_extras=True)
    except Exception as exc:  # a name the annotation uses that its module can't resolve
        raise ConfigError(
            "invalid_config",
            f"tool {tool_name}: can't resolve the annotations of"
            f" {getattr(fn, '__qualname__', fn)!r} ({exc});"
            " define the types its parameters name at module level",
        ) from exc


def _input_model(tool_name: str, fields: dict[str, Any]) -> type[BaseModel]:
    with warnings.catch_warnings():
        # a field named like a BaseModel method (json, copy, ...) shadows it, harmlessly:
        # the wrapper reads fields by iterating the model, never by attribute
        warnings.filterwarnings("ignore", message=".*shadows an attribute", category=UserWarning)
        try:
            return create_model(model_title(tool_name), **fields)
        except Exception as exc:  # an annotation Pydantic can't build a schema for
            raise ConfigError(
                "invalid_config",
                f"tool {tool_name}: its parameters can't form an input model: {exc}",
            ) from exc


def _execute(fn: Callable[..., object], context_param: str | None) -> Execute:
    call = as_async(fn)

    async def execute(args: BaseModel, ctx: RunContext) -> object:
        kwargs: dict[str, object] = dict(args)  # validated, coerced field values
        if context_param is not None:
            kwargs[context_param] = ctx
        return await call(**kwargs)  # a model it returns is encoded like any result

    return execute
