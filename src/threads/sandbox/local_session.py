"""One local sandbox: its commands (under bubblewrap), its workspace files, its snapshots.

Commands run in fresh namespaces (no network, own pids/ipc/uts/cgroup/user), with the host's
``/usr`` read-only, a private ``/tmp``, only ``/workspace`` writable, an empty environment and
the sandbox's limits. Invariants: a keyed command's supervisor record is durable before the
command may run, and the fence is passed again right before it is let go; a file call never
follows a link out of the workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from threads.sandbox import manifest as trees
from threads.sandbox.limits import Limits, pids_cgroup, remove_cgroup
from threads.sandbox.local_exec import LocalExec
from threads.sandbox.procs import identify, is_alive
from threads.sandbox.protocol import (
    DEFAULT_TIMEOUT_MS,
    WORKSPACE,
    FileEntry,
    SandboxContext,
    SandboxError,
    SnapshotData,
    Termination,
)
from threads.sandbox.snapshot_store import SnapshotStore, snapshot_id
from threads.sandbox.supervisor import Record, Records, key_hash, live_processes, marker, prove_gone

PROVIDER = "local"
FILE_CAP = 16 * 1024 * 1024
LIST_CAP = 2000
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalSession:
    """One local sandbox: commands, files and snapshots of its workspace."""

    def __init__(
        self, sandbox_id: str, folder: Path, *, limits: Limits, bwrap: str,
        snapshots: SnapshotStore,
    ) -> None:
        self.limits = limits
        self.bwrap = bwrap
        self.snapshots = snapshots
        self._id = sandbox_id
        self.folder = folder
        self.workspace = folder / "workspace"
        self.records = Records(folder / "supervisor")

    @property
    def id(self) -> str:
        return self._id

    # ---- commands -------------------------------------------------------------------------

    async def exec(
        self,
        argv: Sequence[str],
        ctx: SandboxContext,
        *,
        process_key: str | None = None,
        cwd: str = WORKSPACE,
        env: Mapping[str, str] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        stdin: bytes | None = None,
    ) -> LocalExec:
        if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise SandboxError("invalid_path", "argv must be a non-empty list of strings")
        inner_cwd = _inside(cwd)
        key = process_key if process_key is not None else f"adhoc:{uuid.uuid4()}"
        await ctx.fence()
        self.records.write(Record(key, "spawning"))
        group = pids_cgroup(key_hash(key), self.limits.pids)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *self._bwrap_argv(key, inner_cwd, env or {}, info_w, block_r),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(info_w, block_r),
                # bwrap's own init (pid 1 inside) keeps the environment it was started with,
                # and /proc/1/environ is readable inside: start it with nothing at all.
                env={},
                start_new_session=True,
                preexec_fn=self.limits.preexec(group),
            )
        except OSError as exc:
            for fd in (info_r, info_w, block_r, block_w):
                os.close(fd)
            remove_cgroup(group)
            raise SandboxError("unavailable", f"bubblewrap could not start: {exc}") from exc
        os.close(info_w)
        os.close(block_r)
        try:
            record = await self._supervise(key, process.pid, info_r)
            # The real send point: only a run that still owns the branch lets the command go.
            await ctx.fence()
        except BaseException:
            os.close(block_w)
            prove_gone(self.records.read(key) or Record(key, "spawning"))
            await process.wait()
            remove_cgroup(group)
            raise
        os.write(block_w, b"x")
        os.close(block_w)
        return LocalExec(
            self.records, record, process=process, group=group, timeout_ms=timeout_ms, stdin=stdin
        )

    async def _supervise(self, key: str, wrapper_pid: int, info_fd: int) -> Record:
        """Read the wrapper's namespace info and write the running record, the command still
        blocked."""
        loop = asyncio.get_running_loop()
        raw = await loop.run_in_executor(None, _read_info, info_fd)
        try:
            info = json.loads(raw)
            init_pid = int(info["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise SandboxError("unavailable", "bubblewrap did not report its namespace") from None
        wrapper, init = identify(wrapper_pid), identify(init_pid)
        if wrapper is None or init is None:
            raise SandboxError("unavailable", "bubblewrap exited before the command started")
        record = Record(
            key, "running", wrapper, init, wrapper_pid, int(info.get("pid-namespace", 0)) or None
        )
        self.records.write(record)
        return record

    def _bwrap_argv(
        self, key: str, cwd: str, env: Mapping[str, str], info_fd: int, block_fd: int
    ) -> list[str]:
        argv = [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--hostname", marker(key),
            "--uid", "1000", "--gid", "1000",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/sbin", "/sbin",
            "--symlink", "usr/lib", "/lib",
        ]
        if Path("/usr/lib64").is_dir():
            argv += ["--symlink", "usr/lib64", "/lib64"]
        argv += [
            "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
            "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
            "--proc", "/proc",
            "--dev", "/dev",
            "--tmpfs", "/tmp",  # noqa: S108 - a private tmpfs inside the sandbox
            "--bind", str(self.workspace), WORKSPACE,
            "--chdir", cwd,
            "--clearenv",
            "--setenv", "PATH", SEARCH_PATH,
            "--setenv", "HOME", WORKSPACE,
        ]
        for name, value in sorted(env.items()):
            argv += ["--setenv", name, value]
        argv += ["--info-fd", str(info_fd), "--block-fd", str(block_fd), "--"]
        return argv

    async def terminate(self, process_key: str, ctx: SandboxContext) -> Termination:
        await ctx.fence()
        if not self.records.directory.is_dir():
            return "unknown"  # the sandbox itself is gone: its records can't speak any more
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, prove_gone, self.records.read(process_key))

    def running(self) -> list[str]:
        """Process keys whose commands may still be running (a snapshot waits for none)."""
        return [
            r.process_key
            for r in self.records.all()
            if r.state != "exited" and any(is_alive(p) for p in live_processes(r))
        ]

    # ---- files ----------------------------------------------------------------------------

    def _host_path(self, path: str) -> Path:
        inner = _inside(path)
        host = self.workspace / inner[len(WORKSPACE) :].lstrip("/")
        # A symlink inside the workspace must not lead the host outside it.
        real = os.path.realpath(host)
        root = os.path.realpath(self.workspace)
        if os.path.commonpath([real, root]) != root:
            raise SandboxError("permission_denied", f"{path} leads outside the workspace")
        return Path(real)

    async def read_file(self, path: str, ctx: SandboxContext) -> bytes:
        await ctx.fence()
        return await asyncio.to_thread(self._read, path)

    def _read(self, path: str) -> bytes:
        host = self._host_path(path)
        if host.is_dir():
            raise SandboxError("is_directory", f"{path} is a directory")
        try:
            fd = _open_under(self.workspace, host, os.O_RDONLY, path)
        except FileNotFoundError:
            raise SandboxError("not_found", f"{path} does not exist") from None
        with os.fdopen(fd, "rb") as f:
            data = f.read(FILE_CAP + 1)
        if len(data) > FILE_CAP:
            raise SandboxError("too_large", f"{path} is larger than {FILE_CAP} bytes")
        return data

    async def write_file(self, path: str, data: bytes, ctx: SandboxContext) -> None:
        if len(data) > FILE_CAP:
            raise SandboxError("too_large", f"at most {FILE_CAP} bytes per file")
        await ctx.fence()
        await asyncio.to_thread(self._write, path, data)

    def _write(self, path: str, data: bytes) -> None:
        host = self._host_path(path)
        if host == Path(os.path.realpath(self.workspace)) or host.is_dir():
            raise SandboxError("is_directory", f"{path} is a directory")
        _make_parents(self.workspace, host, path)
        self._host_path(str(Path(_inside(path)).parent))  # a parent made of links is refused too
        fd = _open_under(self.workspace, host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    async def list_files(self, path: str, ctx: SandboxContext) -> list[FileEntry]:
        await ctx.fence()
        return await asyncio.to_thread(self._list, path)

    def _list(self, path: str) -> list[FileEntry]:
        host = self._host_path(path)
        if not host.exists():
            raise SandboxError("not_found", f"{path} does not exist")
        if not host.is_dir():
            raise SandboxError("invalid_path", f"{path} is not a directory")
        root = Path(os.path.realpath(self.workspace))
        entries: list[FileEntry] = []
        for entry in trees.manifest(host):
            inner = posixpath.join(WORKSPACE, (host / entry["path"]).relative_to(root).as_posix())
            size = int(entry.get("size", 0))
            entries.append(FileEntry(inner, entry["kind"], size))
            if len(entries) >= LIST_CAP:
                break
        return entries

    # ---- snapshots ------------------------------------------------------------------------

    async def manifest_hash(self, ctx: SandboxContext) -> str:
        await ctx.fence()
        return trees.manifest_hash(self.workspace)

    async def snapshot(self, operation_key: str, ctx: SandboxContext) -> SnapshotData:
        await ctx.fence()
        if self.running():
            raise SandboxError("not_quiescent", "a command is still running in the sandbox")
        before = trees.manifest_hash(self.workspace)
        data = trees.archive(self.workspace)
        if trees.manifest_hash(self.workspace) != before or self.running():
            raise SandboxError("not_quiescent", "the workspace changed while it was captured")
        await ctx.fence()
        self.snapshots.keep(snapshot_id(operation_key), data, before)
        return SnapshotData(
            snapshot_id=snapshot_id(operation_key),
            provider=PROVIDER,
            sandbox_id=self._id,
            capture_class="filesystem",
            expires_at=None,
            manifest_hash=before,
            quiesced={"excluded": [], "frozen": [], "stopped": [self._id]},
        )


def _read_info(fd: int) -> bytes:
    """bubblewrap writes one JSON object to its info fd, then closes it."""
    chunks = []
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _open_under(workspace: Path, host: Path, flags: int, path: str) -> int:
    """``host`` (checked to be in ``workspace``) opened with ``flags``, so that no directory
    swapped for a link since the check leads outside: its directory is opened first and judged
    (``_directory_inside``), then the file is opened relative to it, without following a link
    (``permission_denied`` otherwise)."""
    directory = _directory_inside(workspace, host.parent, path)
    try:
        return os.open(host.name, flags | os.O_NOFOLLOW, 0o644, dir_fd=directory)
    finally:
        os.close(directory)


def _make_parents(workspace: Path, host: Path, path: str) -> None:
    """The missing directories above ``host`` made one at a time, each inside a directory
    opened and judged first (``_directory_inside``), so a directory the sandbox swaps for a
    link meanwhile makes no directory outside the workspace (``permission_denied``)."""
    missing: list[str] = []
    parent = host.parent
    while not parent.exists():
        missing.append(parent.name)
        parent = parent.parent
    for name in reversed(missing):
        directory = _directory_inside(workspace, parent, path)
        try:
            with contextlib.suppress(FileExistsError):  # made meanwhile, or a link: judged next
                os.mkdir(name, dir_fd=directory)
        finally:
            os.close(directory)
        parent = parent / name


def _directory_inside(workspace: Path, directory: Path, path: str) -> int:
    """``directory`` opened, and kept open only when the descriptor leads inside the workspace
    (read back through ``/proc/self/fd``, whatever links led to it); ``permission_denied``
    otherwise."""
    root = os.path.realpath(workspace)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    led_to = os.readlink(f"/proc/self/fd/{fd}")
    if os.path.commonpath([led_to, root]) != root:
        os.close(fd)
        raise SandboxError("permission_denied", f"{path} leads outside the workspace")
    return fd


def _inside(path: str) -> str:
    """``path`` as an absolute, normalized path under /workspace (else ``invalid_path``)."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise SandboxError("invalid_path", f"{path!r}: paths are absolute, under {WORKSPACE}")
    if posixpath.normpath(path) != path or path.startswith("//"):
        raise SandboxError("invalid_path", f"{path!r} is not normalized (no '..', '.', '//')")
    if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
        raise SandboxError("invalid_path", f"{path!r} is outside {WORKSPACE}")
    return path
