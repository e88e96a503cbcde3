"""Recording a call's outcome: ``effect_commit`` (the effect happened, its result stored as an
artifact) and ``tool_result`` (inline, or by artifact when over ``INLINE_RESULT_BYTES``), and
reading a stored result back. A result a tool produced passes the agent's ``before_tool_result``
hooks first; their decisions (and a guardrail edit) are appended with it.

Every text is made valid UTF-8 first (``valid_text``), so no result can fail to encode here.
A result is recorded at most once per call (the reducer refuses a second); every path that ends
a call (executed, materialized from a commit, settled, denied, not executed) comes through here.
"""

from __future__ import annotations

from threads.log.event_types import Actor
from threads.log.fold import Call
from threads.log.lines import Draft
from threads.log.vocabulary import (
    ArtifactRef,
    ToolResultDataOrigin,
    draft,
)
from threads.run.context_edits import guard_result
from threads.run.drafts import HOST, INLINE_RESULT_BYTES, tool_result_data
from threads.run.runtime import Runtime
from threads.store.protocol import PendingArtifact
from threads.store.rows import artifact_ref
from threads.tools.encode import valid_text

SUCCESS_ORIGINS = ("executed", "materialized_from_commit")


async def commit(rt: Runtime, call: Call, text: str, *, hold: bool = False) -> None:
    """Record that the call's effect happened, its result stored as an artifact. ``hold``:
    written with the next append (see ``BranchWriter.append``)."""
    data = valid_text(text).encode("utf-8")
    ref = artifact_ref(data, "text/plain")
    await rt.writer.append(
        [draft("effect_commit", {"call_id": call.call_id, "result_ref": ref}, HOST)],
        artifacts=[PendingArtifact(data, "text/plain")],
        hold=hold,
    )


async def close(
    rt: Runtime,
    call: Call,
    text: str,
    *,
    origin: ToolResultDataOrigin,
    actor: Actor,
    is_error: bool | None = None,
    hold: bool = False,
) -> None:
    """Append the call's ``tool_result``. ``is_error`` defaults by origin (only an executed or
    materialized result is a success). ``hold``: see ``BranchWriter.append``."""
    draft, artifacts = result_draft(call.call_id, text, origin=origin, actor=actor,
                                    is_error=is_error)
    drafts = [draft]
    if origin in ("executed", "materialized_from_commit"):  # the result hooks see it first
        drafts += await guard_result(rt, call.call_id, call.name, draft.data)
    await rt.writer.append(drafts, artifacts=artifacts, hold=hold)


def result_draft(
    call_id: str, text: str, *, origin: ToolResultDataOrigin, actor: Actor,
    is_error: bool | None = None,
) -> tuple[Draft, list[PendingArtifact]]:
    """A call's ``tool_result`` draft and the artifact its text needs when it is stored by
    reference (over ``INLINE_RESULT_BYTES``): for a step that appends it with other events."""
    error = is_error if is_error is not None else origin not in SUCCESS_ORIGINS
    artifacts: list[PendingArtifact] = []
    ref = None
    text = valid_text(text)
    blob = text.encode("utf-8")
    if len(blob) > INLINE_RESULT_BYTES:
        ref = artifact_ref(blob, "text/plain")
        artifacts.append(PendingArtifact(blob, "text/plain"))
    data = tool_result_data(call_id, text, origin=origin, is_error=error, ref=ref)
    return draft("tool_result", data, actor), artifacts


async def stored_text(rt: Runtime, ref: ArtifactRef | None) -> str:
    if ref is None:
        return ""
    data = await rt.writer.store.get_artifact(ref["sha256"])
    return data.decode("utf-8", errors="replace")
