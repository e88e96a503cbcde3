"""``ask_user``: the built-in tool with which the model asks the person who started the turn a
question, and the answer that settles it.

An allowed ``ask_user`` call is never executed: when its turn comes (in call order) the run
parks on it, ``parked{address: {kind: input, id: call_id}, reason: awaiting_input}`` for
``QUESTION_TTL_MS``, and returns ``Parked(awaiting_input)``. ``Thread.answer`` (or ``threads
answer``) records the answer as the call's ``tool_result{origin: answered}``; the next run goes
on from there. With ``options`` only a listed option is an answer (matched ignoring case and
surrounding spaces, recorded as listed); with ``multi_select`` several, joined by ``, ``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from threads.run.drafts import Draft, tool_result_data
from threads.tools.tool import RunContext, Tool, tool

ASK_USER = "ask_user"
QUESTION_TTL_MS = 24 * 60 * 60 * 1000


class AskUser(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    options: list[str] | None = Field(
        default=None, min_length=2,
        description="The only answers accepted, distinct ignoring case and surrounding spaces."
        " Include an escape option such as Other when the list may not cover every answer."
        " Omit for a free-text answer.",
    )
    multi_select: bool = Field(
        default=False,
        description="With options: the user may pick several; no option may contain a comma"
        " or a line break.",
    )

    @model_validator(mode="after")
    def _options_are_answerable(self) -> AskUser:
        if self.options is None:
            return self
        keys = [_key(option) for option in self.options]
        if "" in keys or len(set(keys)) != len(keys):
            raise ValueError("options must be non-empty and distinct ignoring case and spaces")
        if self.multi_select and any("," in o or "\n" in o for o in self.options):
            raise ValueError("with multi_select, no option may contain a comma or a line break")
        return self


async def _parks_instead(args: AskUser, ctx: RunContext) -> str:
    raise RuntimeError("ask_user is answered by a person (Thread.answer), never executed")


ask_user: Tool = tool(
    name=ASK_USER,
    description="Ask the user who started this conversation a question and wait for the reply."
    " With options, only a listed option is accepted.",
    input=AskUser,
    execute=_parks_instead,
    effect="read_only",
)


def answer_text(question: dict[str, Any], answer: str | list[str]) -> str:
    """The answer as the model will read it; ``ValueError`` says why it is not one."""
    picked = [answer] if isinstance(answer, str) else list(answer)
    if not picked or any(not isinstance(a, str) or not a.strip() for a in picked):
        raise ValueError("an answer is a non-empty string (or, with multi_select, a list of them)")
    options = question.get("options")
    if options is None:
        if len(picked) != 1:
            raise ValueError("this question takes one free-text answer")
        return picked[0]
    if len(picked) > 1 and not question.get("multi_select", False):
        raise ValueError("this question takes one of its options, not several")
    listed = {_key(option): option for option in options}
    unknown = [a for a in picked if _key(a) not in listed]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not one of the options {options}")
    return ", ".join(dict.fromkeys(listed[_key(a)] for a in picked))


def answer_draft(call_id: str, text: str, actor: dict[str, Any]) -> Draft:
    """The call's result: the answer, recorded as the person gave it."""
    return Draft("tool_result", tool_result_data(call_id, text, origin="answered", is_error=False),
                 actor)


def _key(option: str) -> str:
    return option.strip().casefold()
