"""``threads demo``: the guided crash-recovery story on the embedded store, on the scripted model
or (``--model openai:MODEL`` / ``anthropic:MODEL``) on a real provider whose key is in the
environment. Invariant: a bad ``--model``, a missing key or a missing extra is reported before any
worker starts, as one error line and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from threads.errors import ConfigError

EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="watch a run get killed, recovered, parked, resolved and finished",
        description="Watch a billing agent's worker get killed mid-run, its thread recovered,"
        " parked on an email it can't prove was sent, resolved by an operator and finished,"
        " with a fake payments and mail service counting what was applied. Runs offline on"
        " a scripted model unless --model names a real one.",
    )
    parser.add_argument(
        "--dir", metavar="DIR",
        help="keep the demo's store and service here (default: a temporary directory,"
        " removed at the end)",
    )
    parser.add_argument(
        "--model", metavar="PROVIDER:MODEL",
        help="run on a real model, e.g. openai:gpt-4.1 or anthropic:claude-sonnet-4-5 (key from"
        " OPENAI_API_KEY / ANTHROPIC_API_KEY; THREADS_DEMO_BASE_URL points it at another server;"
        " default: the scripted model, no key needed)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from threads.demo.story import run_demo

    if args.model is not None and not _usable(args.model):
        return EXIT_USAGE
    return run_demo(args.dir, model=args.model)


def _usable(choice: str) -> bool:
    """Build the chosen model once in this process, so its problems surface here, clearly."""
    from threads.demo.models import demo_model

    try:
        model = demo_model(choice)
    except ConfigError as error:
        print(f"error: {error.code}: {error.message}", file=sys.stderr)
        return False
    except ImportError as error:
        print(f"error: {error}", file=sys.stderr)
        return False
    close = getattr(model, "aclose", None)
    if close is not None:
        asyncio.run(close())
    return True
