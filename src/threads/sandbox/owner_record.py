"""The owner record of a local sandbox: which store made it, kept beside its workspace.

``owner`` holds the identity of the store whose run created the sandbox
(``threads.store.identity``; empty for a caller outside any store). It sits on the host, outside
``/workspace``, so no command in the sandbox can read or rewrite it. A provider checks it before
it attaches, finds, kills or deletes anything: what another store made (a copy of this store
sharing the sandbox root) is ``permission_denied`` and left as it is.
"""

from __future__ import annotations

from pathlib import Path

from threads.sandbox.protocol import SandboxError

OWNER_FILE = "owner"


def read_owner(folder: Path) -> str | None:
    """The identity recorded in ``folder``; None when there is no record (the sandbox is gone,
    half made, or older than owner records)."""
    try:
        return (folder / OWNER_FILE).read_text(encoding="ascii")
    except (OSError, ValueError):
        return None


def foreign(what: str) -> SandboxError:
    return SandboxError(
        "permission_denied",
        f"{what} belongs to another store (a copy of this store, or the store this one was"
        " copied from, sharing the sandbox root): it is left alone",
    )
