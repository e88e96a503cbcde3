"""The ``threads`` command: argument parsing, dispatch to the subcommand modules, exit codes.

Subcommands live in ``cmd_<name>.py`` modules, each exposing ``register(subparsers)`` which adds
its parser and sets ``handler``: a function of the parsed args returning an exit code, or an
async one (run here with ``asyncio.run``). Add a command by adding its module to ``COMMANDS``.
Exit codes: 0 ok, 1 failed, 2 usage.
Invariant: expected failures (``ThreadsError``, file and database errors, bad usage) are
reported in one ``error: <code>: ...`` line on stderr, never as a traceback; a reader that
closes the pipe early (``threads timeline T | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import threads
from threads.cli import (
    cmd_controls,
    cmd_demo,
    cmd_export,
    cmd_gc,
    cmd_import,
    cmd_lease,
    cmd_ls,
    cmd_materialize,
    cmd_replay,
    cmd_serve,
    cmd_timeline,
    cmd_verify,
    cmd_worker,
)
from threads.cli.hints import invoked
from threads.cli.support import (
    Parser,
    database_errors,
    report,
    report_database_error,
    report_os_error,
)
from threads.errors import ThreadsError

COMMANDS: list[ModuleType] = [
    cmd_demo, cmd_ls, cmd_lease, cmd_timeline, cmd_export, cmd_import, cmd_verify, cmd_replay,
    cmd_controls,
    cmd_worker, cmd_serve, cmd_gc, cmd_materialize,
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="threads",
        description="Inspect, control, verify, export and import threads; run workers.",
    )
    parser.add_argument("--version", action="version", version=f"threads {threads.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    parser.set_defaults(parsers=subparsers.choices)  # what suggested commands take (hints)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on bad usage, 0 after --help
        return EXIT_OK if exit_.code in (0, None) else EXIT_USAGE
    if args.command is None:
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    with invoked(args, args.parsers):  # the hints printed below carry this command's options
        try:
            outcome = args.handler(args)
            return int(asyncio.run(outcome) if inspect.iscoroutine(outcome) else outcome)
        except BrokenPipeError:
            _quiet_stdout()
            return EXIT_OK
        except KeyboardInterrupt:
            print("error: interrupted: stopped by Ctrl-C before it finished", file=sys.stderr)
            return EXIT_FAILED
        except ThreadsError as error:
            report(error)
        except OSError as error:
            report_os_error(error)
        except database_errors() as error:
            report_database_error(error)
    return EXIT_FAILED


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the exit flush can't complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
