"""What every CLI command shares: the ``--store`` option, the operator it acts as (and the
tenant it reads), opening a store and a thread of that tenant, and error reports.

The operator is the one the API uses by default, ``Principal("api", "local", "operator")``,
unless ``--issuer/--tenant/--subject`` say otherwise; reads show only ``--tenant``'s threads.
Invariant: a command never prints a traceback for bad input. Every refusal becomes one line on
stderr, ``error: <code>: <message and what to do>``, exit code 1 (2 for bad usage).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NoReturn

from threads.cli.hints import known, next_step
from threads.errors import ConfigError, NotFoundError, ThreadsError
from threads.principal import LOCAL_OPERATOR, Principal
from threads.store.protocol import BranchInfo, Store
from threads.store.sqlite import sqlite

DEFAULT_STORE = ".threads"
POSTGRES_SCHEMES = ("postgres://", "postgresql://")

def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="DIR|URL",
        help=f"store directory (default {DEFAULT_STORE}) or a postgres://... URL",
    )


def add_tenant_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tenant", default=LOCAL_OPERATOR.tenant,
        help=f"show only this tenant's threads (default {LOCAL_OPERATOR.tenant})",
    )


def add_operator_options(parser: argparse.ArgumentParser) -> None:
    """``--issuer/--tenant/--subject``: who acts (default the API's local operator)."""
    parser.add_argument(
        "--issuer", default=LOCAL_OPERATOR.issuer,
        help=f"the operator's issuer (default {LOCAL_OPERATOR.issuer})",
    )
    parser.add_argument(
        "--tenant", default=LOCAL_OPERATOR.tenant,
        help=f"the operator's tenant (default {LOCAL_OPERATOR.tenant})",
    )
    parser.add_argument(
        "--subject", default=LOCAL_OPERATOR.subject,
        help=f"the operator's name (default {LOCAL_OPERATOR.subject})",
    )


def operator(args: argparse.Namespace) -> Principal:
    for option in ("issuer", "tenant", "subject"):
        if not getattr(args, option):
            raise ConfigError("invalid_config", f"--{option} is empty; pass a non-empty value")
    return Principal(issuer=args.issuer, tenant=args.tenant, subject=args.subject)


async def tenant_branch(store: Store, thread_or_branch: str, tenant: str) -> BranchInfo:
    """The root branch of a thread of ``tenant`` named by its thread id, or a branch of it
    named by its branch id; another tenant's thread is ``not_found``, like a missing one."""
    try:
        branch = await store.root_branch(thread_or_branch)
    except NotFoundError:
        try:
            branch = await store.get_branch(thread_or_branch)
        except NotFoundError:
            raise NotFoundError(f"no thread {thread_or_branch} for tenant {tenant}") from None
    if branch.tenant_id != tenant:
        raise NotFoundError(f"no thread {thread_or_branch} for tenant {tenant}")
    return branch


def store_from_spec(spec: str | None, *, create: bool) -> Store:
    """A store for ``--store``: a ``postgres://``/``postgresql://`` URL opens the shared
    Postgres store, anything else a SQLite directory. Reading commands refuse a directory that
    holds no store rather than creating an empty one there."""
    spec = spec or DEFAULT_STORE
    if spec.startswith(POSTGRES_SCHEMES):
        return _postgres_store(spec)
    if not create and not store_exists(spec):
        raise NotFoundError(f"no threads store at {spec} (no {spec}/threads.db)")
    return sqlite(spec)


def _postgres_store(url: str) -> Store:
    try:
        from threads.store.postgres import postgres
    except ImportError:
        raise ConfigError(
            "invalid_config",
            "Postgres stores need the threads[postgres] extra: pip install 'threads[postgres]'",
        ) from None
    return postgres(url)


def database_errors() -> tuple[type[Exception], ...]:
    """The database errors a command reports in two lines: SQLite's, and psycopg's once a
    Postgres store was opened (psycopg is never imported just to catch its errors)."""
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


@asynccontextmanager
async def opened_store(spec: str | None, *, create: bool = False) -> AsyncIterator[Store]:
    store = store_from_spec(spec, create=create)
    try:
        yield store
    finally:
        await store.close()


def describe(error: ThreadsError) -> str:
    """``<code>: [at seq N: ]<message>``."""
    where = f"at seq {error.seq}: " if error.seq is not None else ""
    return f"{error.code}: {where}{error.message}"


def error_line(code_and_message: str, what_to_do: str | None) -> str:
    """``error: <code>: <message>. <What to do>.``"""
    if what_to_do is None:
        return f"error: {code_and_message}"
    return f"error: {code_and_message.rstrip('. ')}. {what_to_do[0].upper()}{what_to_do[1:]}."


def report(error: ThreadsError) -> None:
    print(error_line(describe(error), hint(error.code)), file=sys.stderr)


def hint(code: str) -> str:
    """What to do next about an error with this code (``threads.cli.hints``)."""
    if code == "not_found" and not store_exists(known("store")):
        return "check the path given to --store: there is no threads store there"
    return next_step(code)


def store_exists(spec: str | None) -> bool:
    """Whether ``--store`` names a store (a Postgres URL is taken to)."""
    spec = spec or DEFAULT_STORE
    return spec.startswith(POSTGRES_SCHEMES) or (Path(spec) / "threads.db").is_file()


def report_os_error(error: OSError) -> None:
    code = "not_found" if isinstance(error, FileNotFoundError) else "invalid_argument"
    name = f": {error.filename}" if error.filename else ""
    line = error_line(f"{code}: {error.strerror or error}{name}", "check the path and its"
                      " permissions")
    print(line, file=sys.stderr)


def report_database_error(error: Exception) -> None:
    if isinstance(error, sqlite3.Error):
        # Stores code their faults; this is a database error from outside a store.
        line = error_line(
            f"store_unavailable: the database cannot be used ({error})",
            "check that --store names a threads store directory",
        )
    else:
        lines = str(error).strip().splitlines()
        reason = lines[0] if lines else type(error).__name__
        line = error_line(
            f"store_unavailable: the Postgres store cannot be used ({reason})",
            "check the URL given to --store and that the server answers",
        )
    print(line, file=sys.stderr)


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(error_line(f"usage: {message}", f"run `{parser.prog} --help`"), file=sys.stderr)
    return 2


class Parser(argparse.ArgumentParser):
    """argparse with our error line: ``error: usage: <what argparse said>. Run ... --help.``
    (and exit code 2, as argparse's own)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(error_line(f"usage: {message}", f"run `{self.prog} --help`"), file=sys.stderr)
        sys.exit(2)
