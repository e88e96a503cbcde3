"""``threads demo``: the guided crash-recovery story on the embedded store and scripted model."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo", help="watch a run get killed, recovered, parked, resolved and finished"
    )
    parser.add_argument(
        "--dir", help="keep the demo's store and service here (default: a temp dir)"
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from threads.demo.story import run_demo

    return run_demo(args.dir)
