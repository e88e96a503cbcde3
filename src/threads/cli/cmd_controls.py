"""Operator controls: ``threads approvals|approve|deny|resolve|answer|cancel THREAD ...``.

The CLI acts as the operator the API uses by default (``api/local/operator``) unless
``--issuer/--tenant/--subject`` say otherwise. Each control goes through the thread handle's own
controls, so the CLI is held to the same authority rule as the API (the thread's approvers, else
the principal who started it; never another tenant), and appends one event with the operator as
actor under the thread's lease for that one append: a live run holding the thread makes it fail
``branch_busy``, except ``cancel``, which is then queued for the process running the thread
(it records the cancel at its next step). Refusals are coded errors (exit 1); run the thread
again after.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from threads.cli import render
from threads.cli.support import add_operator_options, add_store_option, opened_store, operator
from threads.errors import StoreError
from threads.principal import Principal
from threads.run.queued_controls import QUEUED_REASON
from threads.run.thread import ParkedEffect, Thread, open_thread
from threads.run.waiting import PendingApproval


def register(subparsers: Any) -> None:
    approvals = _command(
        subparsers, "approvals", "list the pending approvals and parked effects of a thread"
    )
    approvals.set_defaults(handler=run_approvals)
    approve = _command(subparsers, "approve", "grant a pending approval")
    approve.add_argument("challenge", metavar="CHALLENGE")
    approve.add_argument("--args-hash", help="the args hash you were shown (must match)")
    approve.add_argument("--remember", metavar="RULE", help="also allow matching calls later")
    approve.set_defaults(handler=run_approve)
    deny = _command(subparsers, "deny", "deny a pending approval (the model sees the reason)")
    deny.add_argument("challenge", metavar="CHALLENGE")
    deny.add_argument("--reason", help="shown to the model")
    deny.set_defaults(handler=run_deny)
    resolve = _command(subparsers, "resolve", "settle a parked effect")
    resolve.add_argument("effect_key", metavar="EFFECT_KEY")
    which = resolve.add_mutually_exclusive_group(required=True)
    which.add_argument("--assume-done", dest="decision", action="store_const", const="assume_done")
    which.add_argument(
        "--assume-not-done", dest="decision", action="store_const", const="assume_not_done"
    )
    resolve.set_defaults(handler=run_resolve)
    answer = _command(subparsers, "answer", "answer the question an ask_user call parked on")
    answer.add_argument("call_id", metavar="CALL_ID")
    answer.add_argument(
        "answer", metavar="ANSWER", nargs="+",
        help="the answer; several options for a multi_select question",
    )
    answer.set_defaults(handler=run_answer)
    cancel = _command(subparsers, "cancel", "record a durable cancel of the open turn")
    cancel.add_argument("--reason")
    cancel.set_defaults(handler=run_cancel)


def _command(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_, description=help_[0].upper() + help_[1:] + "."
    )
    parser.add_argument("thread", metavar="THREAD")
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
    blocks = [approval_lines(a, now) for a in pending] + [parked_lines(e) for e in parked]
    print("\n\n".join("\n".join(block) for block in blocks), end="\n" if blocks else "")
    return 0


def approval_lines(approval: PendingApproval, now_ms: int) -> list[str]:
    """One approval as an approver reads it: what would run, with which arguments, who asked,
    and until when the decision can be made."""
    return [
        f"challenge   {approval.challenge_id}",
        f"tool        {approval.tool} (effect {approval.effect_class}, call {approval.call_id})",
        "arguments",
        render.arguments(approval.input, indent="  "),
        f"args hash   {approval.args_hash}",
        f"asked by    {render.principal(approval.requested_by)}",
        f"expires     {render.when(approval.expires_at, now_ms)}",
        f"decide with threads approve {approval.challenge_id} --args-hash {approval.args_hash}"
        f" (or threads deny {approval.challenge_id} --reason ...)",
    ]


def parked_lines(effect: ParkedEffect) -> list[str]:
    """A parked effect as an operator reads it before resolving it."""
    return [
        f"parked {effect.effect_key}",
        f"  tool    {effect.tool} (call {effect.call_id}, attempts {effect.attempts})",
        f"  detail  {effect.detail}",
        f"  decide with threads resolve THREAD {effect.effect_key} --assume-done"
        " (or --assume-not-done)",
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
        try:
            await thread.cancel(who, args.reason)
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
    print("cancel recorded; the next run of the thread ends cancelled")
    return 0
