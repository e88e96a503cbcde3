"""``ask_user``: the built-in tool with which the model asks the person who started the turn a
question, and the answer that settles it.

An allowed ``ask_user`` call is never executed: when its turn comes (in call order) the run
parks on it, ``parked{address: {kind: input, id: call_id}, reason: awaiting_input}`` for
``QUESTION_TTL_MS``, and returns ``Parked(awaiting_input)``. ``Thread.answer`` (or ``threads
answer``) records the answer as the call's ``tool_result{origin: answered}``; the next run goes
on from there. With ``options`` only a listed option is an answer (matched ignoring ASCII case
and surrounding spaces, or by its 1-based number, recorded as listed); with ``multi_select``
several, joined by line breaks. The rules themselves live in ``threads.log.fold.questions``, which
the reader applies to every log.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from threads.log.event_types import Actor
from threads.log.fold.questions import ASK_USER, input_problem
from threads.log.lines import Draft
from threads.log.vocabulary import draft
from threads.run.drafts import tool_result_data
from threads.tools.tool import RunContext, Tool, tool

QUESTION_TTL_MS = 24 * 60 * 60 * 1000
NO_ANSWER = "no answer"  # the result of a question that expired unanswered


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
        problem = input_problem(self.model_dump(exclude_none=True))
        if problem is not None:
            raise ValueError(problem)
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


def answer_draft(call_id: str, text: str, actor: Actor) -> Draft:
    """The call's result: the answer, recorded as the person gave it."""
    return draft("tool_result", tool_result_data(call_id, text, origin="answered", is_error=False),
                 actor)
