"""The restore (digest-2 §1.5, "L3"): what a ``compacted`` event's own batch re-appends so the
model keeps what the dropped range held and still matters.

In order, after the ``compacted`` line:

1. the latest output style (``injected{output_style}``, actor ``host``) when the range held it
   (rule 29 admits it only as the event right after the ``compacted``);
2. the files the sandbox file tools (``read_file``, ``write_file``) touched in the range, newest
   first, at most ``restore_max_files``: each an ``injected{attachment, untrusted_reference}``
   naming the path, with the file's current content read through the run's sandbox and its
   sha256 as ``origin.version`` when it is UTF-8 and at most ``restore_file_tokens × 4`` bytes,
   else a line saying it was not restored (no version). A run without a sandbox restores none;
3. one ``heartbeat`` listing the deferred calls still running (a background subagent's
   placeholder result without its late result), so the model still knows they run.

This project writes no ``injected{skill}`` and no todo list, so the digest's skill and todo
steps have nothing to restore. Everything is read from the log and the sandbox before the one
append, so a rerun after a crash before it decides again from the same log.
"""

from __future__ import annotations

from threads.log.fold import Fold
from threads.log.hashing import sha256_hex
from threads.log.lines import Draft
from threads.log.vocabulary import (
    InjectedData,
    data_of,
    draft,
)
from threads.run.context_policy import ContextPolicy
from threads.run.drafts import HOST
from threads.run.runtime import Runtime
from threads.sandbox.binding import RunSandbox
from threads.sandbox.protocol import SandboxError

FILE_TOOLS = frozenset({"read_file", "write_file"})  # the digest's read / write / edit


async def restore_drafts(
    rt: Runtime, policy: ContextPolicy, span: tuple[int, int]
) -> list[Draft]:
    """The events to append right after the ``compacted`` of ``span``, in the format's order."""
    fold = rt.fold
    files = touched_files(fold, span)[: policy.restore_max_files]
    attachments = (
        [] if rt.sandbox is None
        else [await _attachment(rt.sandbox, path, policy.restore_file_tokens * 4)
              for path in files]
    )
    return [*_style(fold, span), *attachments, *_heartbeat(fold)]


def _style(fold: Fold, span: tuple[int, int]) -> list[Draft]:
    """The latest output style, when the range held it: it stays in force (rule 29)."""
    style = fold.features.style
    if style is None or not span[0] <= style.seq <= span[1]:
        return []
    return [draft("injected", data_of(style, "injected"), HOST)]


def touched_files(fold: Fold, span: tuple[int, int]) -> list[str]:
    """The paths the range's file tool calls named, newest call first, each once."""
    paths: list[str] = []
    for seq in range(span[1], span[0] - 1, -1):
        event = fold.events[seq - fold.events[0].seq]
        if event.type != "tool_call":
            continue
        call = data_of(event, "tool_call")
        if call["name"] not in FILE_TOOLS:
            continue
        path = call["input"].get("path")
        if isinstance(path, str) and path and path not in paths:
            paths.append(path)
    return paths


async def _attachment(sandbox: RunSandbox, path: str, limit: int) -> Draft:
    data: InjectedData = {
        "origin": {"id": path}, "source": "attachment", "trust": "untrusted_reference",
        "text": f"[{path} was not restored; read it again if needed]",
    }
    try:
        content = await sandbox.read_file(path)
    except SandboxError:
        return draft("injected", data, HOST)  # gone, a directory, or unreadable now
    if len(content) <= limit:
        try:
            data["text"] = content.decode("utf-8")
            data["origin"]["version"] = sha256_hex(content)
        except UnicodeDecodeError:
            pass
    return draft("injected", data, HOST)


def _heartbeat(fold: Fold) -> list[Draft]:
    """One heartbeat naming every deferred call without its late result, if any runs."""
    running = [
        call_id for call_id in fold.call_order
        if (call := fold.calls[call_id]).result is not None
        and call.result["origin"] == "deferred" and call.late_result is None
    ]
    return [draft("heartbeat", {"running_call_ids": running}, HOST)] if running else []
