"""``threads serve MODULE[:ATTR] --store DIR|URL [--host H] [--port P] [--tokens FILE]
[--grace-ms MS] [--access-log]``.

Loads agents the way ``threads worker`` does and serves them with ``threads.host.host`` on
uvicorn. Callers authenticate with bearer tokens from ``--tokens`` (read once at start; without
it every ``/v1`` route is 401). ``--access-log`` prints one line per request on stdout (no
query string, header or body: never a token). Invariant: SIGTERM or Ctrl-C stops taking runs,
lets running ones finish for ``--grace-ms``, cancels the rest, and their leases are released;
each step is said on stderr (the signal, stopping, each run handed back, stopped).
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import Any

from threads.cli.cmd_worker import load_agents
from threads.cli.support import add_store_option, opened_store, usage_error
from threads.errors import ConfigError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve agents over HTTP (runs, approvals, event streams, operator console)",
        description="Serve agents over HTTP: start and follow runs, decide approvals and parked"
        " effects, and an operator console at /ui/. Needs the threads[host] extra.",
    )
    parser.add_argument("target", metavar="MODULE[:ATTR]", help="where your agents are")
    add_store_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    parser.add_argument(
        "--tokens", metavar="FILE",
        help='JSON {"<token>": {"issuer", "tenant", "subject"}} (default: none, so every /v1'
        " route answers 401)",
    )
    parser.add_argument(
        "--grace-ms", type=int, default=10_000,
        help="on SIGTERM/SIGINT, how long running runs may finish before they are cancelled"
        " (default 10000)",
    )
    parser.add_argument(
        "--access-log", action="store_true",
        help="print one line per request on stdout: time, client, method, path, status,"
        " duration (never a query string, header or body)",
    )
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535 or args.grace_ms < 0:
        return usage_error(args.parser, "--port must be 0..65535 and --grace-ms >= 0")
    try:
        import uvicorn

        from threads.host import host, tokens_file
    except ImportError:
        raise ConfigError(
            "invalid_config", "threads serve needs the host extra: pip install 'threads[host]'"
        ) from None
    agents = load_agents(args.target)
    authenticate = tokens_file(args.tokens) if args.tokens else (lambda _request: None)
    async with opened_store(args.store, create=True) as store:
        app = host(
            store, agents, authenticate=authenticate, grace_s=args.grace_ms / 1000,
            access_log=_stdout if args.access_log else None,
        )
        config = uvicorn.Config(
            app, host=args.host, port=args.port, log_level="warning", access_log=False,
            # Open event streams are cut after 1 s so the runs get the grace period.
            timeout_graceful_shutdown=1, lifespan="on",
        )
        server = uvicorn.Server(config)
        _announce_signals(server, args.grace_ms)
        print(f"threads host on http://{args.host}:{args.port} (operator console at /ui/)",
              flush=True)
        await server.serve()
    return 0


def _stdout(line: str) -> None:
    print(line, flush=True)


def _announce_signals(server: Any, grace_ms: int) -> None:
    """Say on stderr which signal stops the server, once (uvicorn then stops the app, which
    says what becomes of its runs)."""
    handle_exit = server.handle_exit

    def announced(sig: int, frame: FrameType | None) -> None:
        if not server.should_exit:
            print(
                f"threads host: {signal.Signals(sig).name} received: stopping (running runs"
                f" get {grace_ms} ms to finish)",
                file=sys.stderr, flush=True,
            )
        handle_exit(sig, frame)

    server.handle_exit = announced
