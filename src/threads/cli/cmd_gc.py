"""``threads gc [--store DIR] [--sandboxes DIR] [--docker [SOCKET] [--docker-remove-unknown]]``:
release sandboxes and snapshots no branch needs.

Runs ``threads.sandbox.gc.collect`` with the local sandbox provider kept under ``--sandboxes``
(the default root of ``threads.sandbox.local()``), and prints what it did. First it gives up
forks a crash interrupted (``forking`` children whose lease lapsed become ``fork_failed``), so
the sandboxes they were restoring into are collected with the rest. With ``--docker`` it also
collects the Docker provider's rows and removes its orphans: containers labelled by threads
whose ledger row is released; those with no row here are reported and left alone (another
store's runs may use the engine) unless ``--docker-remove-unknown``. Rows of providers it
has no adapter for are counted and left alone, as are ``pending`` and ``unknown`` rows.
Invariants: gc never takes a branch lease and never frees a row a run touched after its claim;
it frees only what this store made (a copy of the store sharing the sandbox root leaves the
original's sandboxes, commands and workspaces alone, and reports them).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.run.fork import abandon_interrupted_forks
from threads.sandbox.bubblewrap import local
from threads.sandbox.gc import collect
from threads.sandbox.protocol import Sandbox
from threads.store.capabilities import resources_of


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gc", help="release sandboxes and snapshots no live branch needs",
        description="Release expired or orphaned sandboxes and snapshots recorded in the"
        " store's resource ledger. Pending and unknown rows are never touched, nor anything"
        " another store made (a copy of this store that shares its sandbox root).",
    )
    add_store_option(parser)
    parser.add_argument(
        "--sandboxes", metavar="DIR",
        help="where the local sandboxes live (default ~/.cache/threads/sandboxes, the local"
        " sandbox's own default)",
    )
    parser.add_argument(
        "--docker", metavar="SOCKET", nargs="?", const="",
        help="also collect Docker sandboxes and orphaned threads containers (the engine at"
        " SOCKET, else DOCKER_HOST or /var/run/docker.sock)",
    )
    parser.add_argument(
        "--docker-remove-unknown", action="store_true",
        help="with --docker, also remove threads containers this store has no ledger row for"
        " (only when no other store's runs use that engine)",
    )
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    sandboxes: dict[str, Sandbox] = {}
    root = Path(args.sandboxes) if args.sandboxes else None
    sandboxes["local"] = local(root)
    engine = None
    if args.docker is not None:
        from threads.docker import docker

        engine = docker("", socket=args.docker or None)  # gc never creates: no image needed
        sandboxes["docker"] = engine
    async with opened_store(args.store) as store:
        abandoned = await abandon_interrupted_forks(store)
        try:
            report = await collect(
                resources_of(store), sandboxes, store.clock,
                remove_unknown=args.docker_remove_unknown,
            )
        finally:
            if engine is not None:
                await engine.close()
    if abandoned:
        print(f"gave up {len(abandoned)} fork(s) a crash interrupted: {', '.join(abandoned)}")
    for line in report.lines():
        print(line)
    return 1 if report.failed else 0
