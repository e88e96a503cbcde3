"""``threads timeline THREAD_ID [--store DIR]``: a thread's events, one readable line each.

Each branch is listed with its own segment only (a child's ancestor lines are its parent's);
snapshot events that are fork points are marked, with the branches forked there.
Invariant: reading only; the summaries are derived from event data, never stored.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.log.lines import Event
from threads.store.protocol import BranchInfo

PREVIEW_CHARS = 60
# Scalar data fields worth showing, in the order they are shown.
_KEYS = (
    "name",
    "call_id",
    "decision",
    "attempt",
    "outcome",
    "by",
    "provider_outcome",
    "origin",
    "is_error",
    "reason",
    "stop_reason",
    "snapshot_id",
    "scope",
    "source",
    "challenge_id",
)
_TEXT_KEYS = ("text", "preview", "instructions")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "timeline",
        help="show a thread's events, one per line",
        description="Show THREAD_ID's events: seq, epoch, actor, type and a short summary.",
    )
    parser.add_argument("thread_id", metavar="THREAD_ID")
    add_store_option(parser)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        await store.root_branch(args.thread_id)  # not_found for an unknown thread
        branches = await store.list_branches(args.thread_id)
        forks = forks_by_point(branches)
        for branch in branches:
            chain = await store.read_chain(branch.branch_id)
            fold = chain.fold(store.clock.now_ms())
            fork_points = {point["seq"] for point in fold.state()["fork_points"]}
            print(branch_title(branch))
            for event in chain.segments[-1].events:
                marks = fork_marks(event, fork_points, forks[branch.branch_id])
                print(event_line(event) + marks)
    return 0


def forks_by_point(branches: list[BranchInfo]) -> dict[str, dict[int, list[str]]]:
    """parent branch id -> fork seq -> child branch ids."""
    forks: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for branch in branches:
        if branch.parent_branch_id is not None and branch.fork_at_seq is not None:
            forks[branch.parent_branch_id][branch.fork_at_seq].append(branch.branch_id)
    return forks


def branch_title(branch: BranchInfo) -> str:
    if branch.parent_branch_id is None:
        origin = "root"
    else:
        origin = f"forked from {branch.parent_branch_id} at seq {branch.fork_at_seq}"
    notes = "" if branch.state == "ready" else f", {branch.state}"
    if not branch.head_verified:
        notes += ", head unverified"
    return f"branch {branch.branch_id} ({origin}{notes})"


def fork_marks(event: Event, fork_points: set[int], children: dict[int, list[str]]) -> str:
    marks = ""
    if event.seq in fork_points:
        marks += "  [fork point]"
    for child in children.get(event.seq, []):
        marks += f"  [forked: {child}]"
    return marks


def event_line(event: Event) -> str:
    return (
        f"{event.seq:>6}  e{event.epoch:<3} {event.actor_kind:<9} {event.type:<24} {summary(event)}"
    ).rstrip()


def summary(event: Event) -> str:
    data = event.data
    parts = [f"{key}={_scalar(data[key])}" for key in _KEYS if _is_scalar(data.get(key))]
    if event.type == "thread_started":
        model = data.get("model", {})
        parts = [
            f"agent={data.get('agent_name')}",
            f"model={model.get('provider')}/{model.get('name')}",
            f"tools={len(data.get('tools', []))}",
        ]
    elif event.type == "fork":
        parts.append(f"parent={data.get('parent_branch_id')}")
    elif isinstance(data.get("address"), dict):
        address = data["address"]
        parts.append(f"address={address.get('kind')}:{address.get('id')}")
    text = _text(data)
    if text is not None:
        parts.append(preview(text))
    return " ".join(parts)


def _text(data: dict[str, Any]) -> str | None:
    for key in _TEXT_KEYS:
        if isinstance(data.get(key), str):
            return str(data[key])
    content = data.get("content")
    if isinstance(content, list):
        texts = [_part_text(part) for part in content if isinstance(part, dict)]
        return " ".join(texts) if texts else None
    return None


def _part_text(part: dict[str, Any]) -> str:
    """A content part as text: its text, or a placeholder such as ``<tool_use read_file>``."""
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    name = part.get("name")
    return f"<{part.get('type')} {name}>" if name else f"<{part.get('type')}>"


def preview(text: str) -> str:
    short = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return json.dumps(short, ensure_ascii=False)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | bool)


def _scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
