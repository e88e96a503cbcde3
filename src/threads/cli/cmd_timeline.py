"""``threads timeline THREAD_ID [--store DIR] [--tenant T] [--json] [--follow]``: a thread's
events, one line each: seq, time, epoch, actor, type, a short summary and the principal.

Each branch is listed with its own segment only (a child's ancestor lines are its parent's);
snapshot events that are fork points are marked, with the branches forked there. ``--json``
prints each event's stored line exactly as the log holds it (one per line, no headers);
``--follow`` then keeps printing events as they are committed, until interrupted.
Invariant: reading only; the summaries are derived from event data, never stored; each event
is printed once, in seq order per branch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from threads.cli import render
from threads.cli.support import add_store_option, add_tenant_option, opened_store, tenant_branch
from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.store.protocol import BranchInfo, Store

FOLLOW_POLL_S = 0.2

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
# Events that name another thread of the tree: the parts shown, that thread's id last.
_TREE: dict[str, Callable[[JsonObject], list[str]]] = {
    "agent_spawned": lambda d: [
        f"call_id={d.get('call_id')}", f"spawned {d.get('agent_name')} ({d.get('mode')})",
        f"child thread {d.get('child_thread_id')}",
    ],
    "agent_finished": lambda d: [
        f"child {d.get('status')}", f"child thread {d.get('child_thread_id')}",
    ],
    "handoff": lambda d: [
        f"call_id={d.get('call_id')}", f"handed off to {d.get('to_agent')}",
        f"thread {d.get('to_thread_id')}",
    ],
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "timeline",
        help="show a thread's events, one per line",
        description="Show THREAD_ID's events: seq, time, epoch, actor, type, a short summary"
        " and the principal (--json: the log's own lines; --follow: keep printing new ones).",
    )
    parser.add_argument("thread_id", metavar="THREAD_ID", help="the thread's id (threads ls)")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.add_argument(
        "--json", action="store_true", help="print each event's stored JSON line, exactly"
    )
    parser.add_argument(
        "--follow", "-f", action="store_true",
        help="keep printing events as they are committed (Ctrl-C stops)",
    )
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        root = await tenant_branch(store, args.thread_id, args.tenant)
        printed: dict[str, int] = {}  # branch -> last seq printed
        await print_new(store, root.thread_id, printed, as_json=args.json)
        if not args.follow:
            return 0
        try:
            while True:
                await asyncio.sleep(FOLLOW_POLL_S)
                await print_new(store, root.thread_id, printed, as_json=args.json)
        except (KeyboardInterrupt, asyncio.CancelledError):
            return 0


async def print_new(
    store: Store, thread_id: str, printed: dict[str, int], *, as_json: bool
) -> None:
    """Print each branch's events past what was printed already (a branch seen for the first
    time gets its title line first)."""
    branches = await store.list_branches(thread_id)
    forks = forks_by_point(branches)
    now = store.clock.now_ms()
    for branch in branches:
        if printed.get(branch.branch_id) == branch.head_seq:
            continue
        chain = await store.read_chain(branch.branch_id)
        fresh = [e for e in chain.segments[-1].events if e.seq > printed.get(branch.branch_id, 0)]
        if branch.branch_id not in printed and not as_json:
            print(branch_title(branch))
        printed[branch.branch_id] = chain.branch.head_seq
        if as_json:
            for event in fresh:
                sys.stdout.buffer.write(event.line + b"\n")
            sys.stdout.buffer.flush()
            continue
        fork_points = {point["seq"] for point in chain.fold(now).state()["fork_points"]}
        for event in fresh:
            print(event_line(event) + fork_marks(event, fork_points, forks[branch.branch_id]))
        sys.stdout.flush()


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
    by = event.actor.get("principal")
    who = f"  by {render.principal(by)}" if isinstance(by, dict) else ""
    return (
        f"{event.seq:>6}  {render.iso(event.time)}  e{event.epoch:<3} {event.actor_kind:<9}"
        f" {event.type:<24} {summary(event)}"
    ).rstrip() + who


def summary(event: Event) -> str:
    data = event.data
    parts = [f"{key}={_scalar(data[key])}" for key in _KEYS if _is_scalar(data.get(key))]
    if event.type == "thread_started":
        started = data_of(event, "thread_started")
        model = started["model"]
        parts = [
            f"agent={started['agent_name']}",
            f"model={model['provider']}/{model['name']}",
            f"tools={len(started['tools'])}",
        ]
        parent = started.get("parent")
        if parent is not None:
            parts.append(f"{parent['relation']} of thread {parent['thread_id']}")
    elif event.type in _TREE:
        parts = _TREE[event.type](data)
    elif event.type == "fork":
        parts.append(f"parent={data.get('parent_branch_id')}")
    elif isinstance(address := data.get("address"), dict):
        parts.append(f"address={address.get('kind')}:{address.get('id')}")
    text = _text(data)
    if text is not None:
        parts.append(preview(text))
    return " ".join(parts)


def _text(data: JsonObject) -> str | None:
    for key in _TEXT_KEYS:
        if isinstance(data.get(key), str):
            return str(data[key])
    content = data.get("content")
    if isinstance(content, list):
        texts = [_part_text(part) for part in content if isinstance(part, dict)]
        return " ".join(texts) if texts else None
    return None


def _part_text(part: JsonObject) -> str:
    """A content part as text: its text, or a placeholder such as ``<tool_use read_file>``."""
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    name = part.get("name")
    return f"<{part.get('type')} {name}>" if name else f"<{part.get('type')}>"


def preview(text: str) -> str:
    short = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return json.dumps(short, ensure_ascii=False)


def _is_scalar(value: JsonValue) -> bool:
    return isinstance(value, str | int | bool)


def _scalar(value: JsonValue) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)
