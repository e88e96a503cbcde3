"""Sandboxes: where an agent's commands and files live, apart from the host.

``local()`` is the bubblewrap sandbox that needs no daemon; ``threads.docker.docker()`` speaks to
a Docker engine. Both implement ``Sandbox`` (see ``threads.sandbox.protocol``): every call
passes the run's fence, every create is found again by its operation key, and every command's
processes can be proven gone.
"""

from threads.sandbox.bubblewrap import LocalSandbox, local
from threads.sandbox.protocol import (
    OPEN_CONTEXT,
    ExecOutput,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxContext,
    SandboxError,
    SandboxInfo,
    SandboxSession,
    SnapshotData,
)

__all__ = [
    "OPEN_CONTEXT",
    "ExecOutput",
    "ExecResult",
    "FileEntry",
    "LocalSandbox",
    "Sandbox",
    "SandboxContext",
    "SandboxError",
    "SandboxInfo",
    "SandboxSession",
    "SnapshotData",
    "local",
]
