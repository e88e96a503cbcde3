"""Operator controls: ``threads approvals|approve|deny|resolve|answer|cancel|compact THREAD ...``.

The CLI acts as the operator the API uses by default (``api/local/operator``) unless
``--issuer/--tenant/--subject`` say otherwise. Each control goes through the thread handle's own
controls, so the CLI is held to the same authority rule as the API (the thread's approvers, else
the principal who started it; never another tenant), and appends one event with the operator as
actor under the thread's lease for that one append: a live run holding the thread makes it fail
``branch_busy``, except ``cancel``, which is then queued for the process running the thread
(it records the cancel at its next step); a cancel while one is in force records nothing and
says so. Refusals are coded errors (exit 1); run the thread
again after.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from threads.cli import render
from threads.cli.hints import command
from threads.cli.support import add_operator_options, add_store_option, opened_store, operator
from threads.errors import StoreError
from threads.principal import Principal
from threads.run.queued_controls import QUEUED_REASON
from threads.run.thread import ParkedEffect, Thread, open_thread
from threads.run.waiting import PendingApproval

CHALLENGE_HELP = "the approval's challenge id, as the approvals command shows it"


def register(subparsers: Any) -> None:
    approvals = _command(
        subparsers, "approvals", "list the pending approvals and parked effects of a thread"
    )
    approvals.set_defaults(handler=run_approvals)
    approve = _command(subparsers, "approve", "grant a pending approval")
    approve.add_argument("challenge", metavar="CHALLENGE", help=CHALLENGE_HELP)
    approve.add_argument(
        "--args-hash", metavar="HASH",
        help="the args hash you were shown: the grant is refused if the arguments differ"
        " (default: grant whatever arguments the call has)",
    )
    approve.add_argument(
        "--remember", metavar="RULE",
        help="also allow later calls this rule matches, without asking (default: this call only)",
    )
    approve.set_defaults(handler=run_approve)
    deny = _command(subparsers, "deny", "deny a pending approval (the model sees the reason)")
    deny.add_argument("challenge", metavar="CHALLENGE", help=CHALLENGE_HELP)
    deny.add_argument(
        "--reason", metavar="TEXT", help="why, shown to the model (default: no reason given)"
    )
    deny.set_defaults(handler=run_deny)
    resolve = _command(subparsers, "resolve", "settle a parked effect")
    resolve.add_argument(
        "effect_key", metavar="EFFECT_KEY",
        help="the parked effect's key, as the approvals command shows it",
    )
    which = resolve.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--assume-done", dest="decision", action="store_const", const="assume_done",
        help="it happened: the run continues without sending it again (one of the two is"
        " required; no default)",
    )
    which.add_argument(
        "--assume-not-done", dest="decision", action="store_const", const="assume_not_done",
        help="it did not happen: the next run sends it again with the same key (refused while"
        " an earlier holder of the thread may still be sending it)",
    )
    resolve.set_defaults(handler=run_resolve)
    answer = _command(subparsers, "answer", "answer the question an ask_user call parked on")
    answer.add_argument(
        "call_id", metavar="CALL_ID", help="the ask_user call waiting for an answer (its id, as"
        " the timeline shows it)",
    )
    answer.add_argument(
        "answer", metavar="ANSWER", nargs="+",
        help="the answer; several options for a multi_select question",
    )
    answer.set_defaults(handler=run_answer)
    cancel = _command(subparsers, "cancel", "record a durable cancel of the open turn")
    cancel.add_argument(
        "--reason", metavar="TEXT",
        help="recorded with the cancel (default: none; a cancel queued for a running process"
        " carries none)",
    )
    cancel.set_defaults(handler=run_cancel)
    compact = _command(
        subparsers, "compact", "ask for a summary of the conversation so far in place of it"
    )
    compact.add_argument(
        "--instructions", metavar="TEXT",
        help="what the summary must keep, added to the summarizer's ask (default: none)",
    )
    compact.set_defaults(handler=run_compact)


def _command(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_, description=help_[0].upper() + help_[1:] + "."
    )
    parser.add_argument("thread", metavar="THREAD", help="the thread's id (threads ls)")
    add_store_option(parser)
    add_operator_options(parser)
    return parser


async def run_approvals(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        thread = await open_thread(store, args.thread, principal=operator(args))
        pending = await thread.pending_approvals()
        parked = await thread.parked_effects()
        now = store.clock.now_ms()
    if not pending and not parked:
        print("no approvals pending and no effects parked on this thread")
    blocks = [approval_lines(args.thread, a, now) for a in pending]
    blocks += [parked_lines(args.thread, e) for e in parked]
    print("\n\n".join("\n".join(block) for block in blocks), end="\n" if blocks else "")
    return 0


def approval_lines(thread_id: str, approval: PendingApproval, now_ms: int) -> list[str]:
    """One approval as an approver reads it: what would run, with which arguments, who asked,
    until when the decision can be made, and the two commands that decide it (each runs as
    printed)."""
    challenge = approval.challenge_id
    grant = command("approve", thread_id, challenge, "--args-hash", approval.args_hash)
    return [
        f"challenge   {challenge}",
        f"tool        {approval.tool} (effect {approval.effect_class}, call {approval.call_id})",
        "arguments",
        render.arguments(approval.input, indent="  "),
        f"args hash   {approval.args_hash}",
        f"asked by    {render.principal(approval.requested_by)}",
        f"expires     {render.when(approval.expires_at, now_ms)}",
        f"approve     {grant}",
        f"deny        {command('deny', thread_id, challenge)}",
        "            (add --reason TEXT to tell the model why)",
    ]


def parked_lines(thread_id: str, effect: ParkedEffect) -> list[str]:
    """A parked effect as an operator reads it before resolving it: the call, its arguments,
    what is known, and the command for each answer (each runs as printed)."""
    key = effect.effect_key
    return [
        f"parked      {key}",
        f"tool        {effect.tool} (call {effect.call_id}, attempts {effect.attempts})",
        "arguments",
        render.arguments(effect.input, indent="  "),
        f"detail      {effect.detail}",
        f"happened    {command('resolve', thread_id, key, '--assume-done')}",
        "            (the run continues without sending it again)",
        f"not sent    {command('resolve', thread_id, key, '--assume-not-done')}",
        "            (the next run sends it again, with the same key)",
    ]


Action = Callable[[Thread, Principal], Awaitable[None]]


async def _act(args: argparse.Namespace, action: Action, done: str) -> int:
    who = operator(args)
    async with opened_store(args.store) as store:
        thread = await open_thread(store, args.thread, principal=who)
        await action(thread, who)
    print(done)
    return 0


async def run_approve(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        await thread.approve(args.challenge, who, args.remember, args_hash=args.args_hash)

    return await _act(args, act, f"approved {args.challenge}; run the thread again to continue")


async def run_deny(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        await thread.deny(args.challenge, who, args.reason)

    return await _act(args, act, f"denied {args.challenge}; run the thread again to continue")


async def run_resolve(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        await thread.resolve_parked(args.effect_key, args.decision, who)

    return await _act(
        args, act, f"resolved {args.effect_key} ({args.decision}); run the thread again"
        " (or let a worker pick it up) to continue",
    )


async def run_answer(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        picked = args.answer[0] if len(args.answer) == 1 else list(args.answer)
        await thread.answer(args.call_id, picked, who)

    return await _act(args, act, f"answered {args.call_id}; run the thread again to continue")


async def run_cancel(args: argparse.Namespace) -> int:
    who = operator(args)
    async with opened_store(args.store) as store:
        thread = await open_thread(store, args.thread, principal=who)
        head = (await thread.fold()).last_seq
        try:
            barrier = await thread.cancel(who, args.reason)
        except StoreError as error:
            if error.code != "branch_busy":
                raise
            key = await thread.queue_cancel(who)
            print(f"cancel queued (item {key}): the process running the thread records it at"
                  " its next step, and the run ends cancelled")
            if args.reason:  # the control item's shape (shared with threads-ts) has no reason
                print("the reason was not recorded: a queued cancel carries none (the log"
                      f" gives {QUEUED_REASON!r})")
            return 0
    if barrier.seq <= head:
        print(f"a cancel is in force already (event {barrier.event_id}, seq {barrier.seq});"
              " nothing new was recorded")
        return 0
    print("cancel recorded; the next run of the thread ends cancelled")
    return 0


async def run_compact(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        await thread.compact(who, instructions=args.instructions)

    return await _act(
        args, act, "compaction requested; the next run of the thread summarizes the"
        " conversation first",
    )
