"""Operator controls: ``threads approvals|approve|deny|resolve|cancel THREAD ...``.

Each control appends one event with the operator principal (``--tenant``/``--subject``, issuer
``cli``) as actor, under the thread's lease for that one append: a live run holding the thread
makes it fail ``branch_busy``. Refusals are coded errors (exit 1); run the thread again after.
"""

from __future__ import annotations

import argparse
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.principal import Principal
from threads.run.thread import Thread, open_thread

DEFAULT_TENANT = "local"
DEFAULT_SUBJECT = "operator"


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
    cancel = _command(subparsers, "cancel", "record a durable cancel of the open turn")
    cancel.add_argument("--reason")
    cancel.set_defaults(handler=run_cancel)


def _command(subparsers: Any, name: str, help_: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help_, description=help_[0].upper() + help_[1:] + "."
    )
    parser.add_argument("thread", metavar="THREAD")
    add_store_option(parser)
    parser.add_argument("--tenant", default=DEFAULT_TENANT, help="operator's tenant")
    parser.add_argument("--subject", default=DEFAULT_SUBJECT, help="operator's name")
    return parser


def operator(args: argparse.Namespace) -> Principal:
    return Principal(issuer="cli", tenant=args.tenant, subject=args.subject)


async def run_approvals(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        thread = await open_thread(store, args.thread, principal=operator(args))
        for p in await thread.pending_approvals():
            print(
                f"{p.challenge_id}  call={p.call_id}  tool={p.tool}  args_hash={p.args_hash}"
                f"  expires_at={p.expires_at}"
            )
        for e in await thread.parked_effects():
            print(f"parked {e.effect_key}  call={e.call_id}  tool={e.tool}  attempts={e.attempts}")
            print(f"  {e.detail}")
    return 0


async def _act(args: argparse.Namespace, action: Any, done: str) -> int:
    async with opened_store(args.store) as store:
        thread: Thread = await open_thread(store, args.thread, principal=operator(args))
        await action(thread, operator(args))
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

    return await _act(args, act, f"resolved {args.effect_key} ({args.decision})")


async def run_cancel(args: argparse.Namespace) -> int:
    async def act(thread: Thread, who: Principal) -> None:
        await thread.cancel(who, args.reason)

    return await _act(args, act, "cancel recorded; the next run of the thread ends cancelled")
