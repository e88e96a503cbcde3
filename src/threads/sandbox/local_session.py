"""One local sandbox: its commands (under bubblewrap), its workspace files, its snapshots.

Commands run in fresh namespaces (no network, own pids/ipc/uts/cgroup/user), with the host's
``/usr`` read-only, a private ``/tmp``, only ``/workspace`` writable, an empty environment and
the sandbox's limits. bubblewrap reads its setup from a pipe (``--args``), so the pid 1 a command
sees in its namespace carries no host path in its argv; the bind mount itself still shows the
workspace's host path in ``/proc/self/mountinfo`` (the kernel names a bind mount's source; see
the sandboxes guide).

Invariants: a keyed command's supervisor record is durable before the command may run, and the
fence is passed again right before it is let go; a file call never follows a link out of the
workspace, never opens anything but a regular file or a directory (a FIFO, a socket or a device
is ``permission_denied`` and is never opened blocking), and is bounded (``FILE_OP_S``); its
errors name the path as the sandbox sees it, never the host's. A sandbox whose directory was
deleted underneath it answers ``not_found`` to every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import posixpath
import stat
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from threads.sandbox import manifest as trees
from threads.sandbox.durable import DIR_MODE, FILE_MODE
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
    host_failure,
)
from threads.sandbox.snapshot_store import SnapshotStore, snapshot_id
from threads.sandbox.supervisor import Record, Records, key_hash, live_processes, marker, prove_gone

PROVIDER = "local"
FILE_CAP = 16 * 1024 * 1024
LIST_CAP = 2000
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
T = TypeVar("T")
FILE_OP_S = 60.0  # the most a file call (or a manifest of the workspace) may take
START_S = 30.0  # the most bubblewrap may take to report its namespace


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
        self._require_present()
        try:
            self.records.write(Record(key, "spawning"))
        except OSError as exc:
            raise host_failure(exc, f"sandbox {self._id} could not record the command") from None
        group = pids_cgroup(key_hash(key), self.limits.pids)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        args_r = _setup_pipe(self._bwrap_setup(inner_cwd, env or {}))
        try:
            process = await asyncio.create_subprocess_exec(
                self.bwrap,
                # The marker stays in argv (a half-written record finds the wrapper by it);
                # every path of the setup comes through the pipe.
                "--hostname", marker(key),
                "--args", str(args_r),
                "--info-fd", str(info_w),
                "--block-fd", str(block_r),
                "--",
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(info_w, block_r, args_r),
                # bwrap's own init (pid 1 inside) keeps the environment it was started with,
                # and /proc/1/environ is readable inside: start it with nothing at all.
                env={},
                start_new_session=True,
                preexec_fn=self.limits.preexec(group),
            )
        except OSError as exc:
            for fd in (info_r, info_w, block_r, block_w, args_r):
                os.close(fd)
            remove_cgroup(group)
            raise SandboxError("unavailable", f"bubblewrap could not start: {exc}") from exc
        for fd in (info_w, block_r, args_r):
            os.close(fd)
        try:
            record = await self._supervise(key, process, info_r)
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

    async def _supervise(
        self, key: str, process: asyncio.subprocess.Process, info_fd: int
    ) -> Record:
        """Read the wrapper's namespace info and write the running record, the command still
        blocked. A wrapper that reports nothing within ``START_S`` is killed (its info pipe
        closes, so the read ends) and the start is ``unavailable``."""
        wrapper_pid = process.pid
        read = asyncio.ensure_future(asyncio.to_thread(_read_info, info_fd))
        try:
            raw = await asyncio.wait_for(asyncio.shield(read), START_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await read
            raise SandboxError(
                "unavailable", f"bubblewrap did not start the command within {START_S:g} s"
            ) from None
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
        try:
            self.records.write(record)
        except OSError as exc:
            raise host_failure(exc, f"sandbox {self._id} could not record the command") from None
        return record

    def _bwrap_setup(self, cwd: str, env: Mapping[str, str]) -> list[str]:
        """bubblewrap's setup, passed through ``--args`` (never in its argv)."""
        argv = [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
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

    def _require_present(self) -> None:
        if not self.workspace.is_dir():
            raise SandboxError(
                "not_found",
                f"sandbox {self._id} is gone: its directory was deleted outside threads, and"
                " its workspace with it",
            )

    def _host_path(self, path: str) -> Path:
        inner = _inside(path)
        host = self.workspace / inner[len(WORKSPACE) :].lstrip("/")
        # A symlink inside the workspace must not lead the host outside it.
        real = os.path.realpath(host)
        root = os.path.realpath(self.workspace)
        if os.path.commonpath([real, root]) != root:
            raise SandboxError("permission_denied", f"{path} leads outside the workspace")
        return Path(real)

    async def _file_call(self, call: Callable[[str], T], path: str, ctx: SandboxContext) -> T:
        """``call(path)`` in a worker thread, within ``FILE_OP_S``; a host error is a
        ``SandboxError`` naming ``path``, never the host's path."""
        await ctx.fence()
        self._require_present()
        try:
            return await asyncio.wait_for(asyncio.to_thread(call, path), FILE_OP_S)
        except TimeoutError:
            raise SandboxError("timeout", f"{path}: the call took over {FILE_OP_S:g} s") from None
        except OSError as exc:
            raise host_failure(exc, path) from None

    async def read_file(self, path: str, ctx: SandboxContext) -> bytes:
        return await self._file_call(self._read, path, ctx)

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
        await self._file_call(lambda p: self._write(p, data), path, ctx)

    def _write(self, path: str, data: bytes) -> None:
        host = self._host_path(path)
        if host == Path(os.path.realpath(self.workspace)) or host.is_dir():
            raise SandboxError("is_directory", f"{path} is a directory")
        _make_parents(self.workspace, host, path)
        self._host_path(str(Path(_inside(path)).parent))  # a parent made of links is refused too
        fd = _open_under(self.workspace, host, os.O_WRONLY | os.O_CREAT, path)
        with os.fdopen(fd, "wb") as f:
            f.truncate(0)
            f.write(data)

    async def list_files(self, path: str, ctx: SandboxContext) -> list[FileEntry]:
        return await self._file_call(self._list, path, ctx)

    def _list(self, path: str) -> list[FileEntry]:
        host = self._host_path(path)
        if not host.exists():
            raise SandboxError("not_found", f"{path} does not exist")
        if not host.is_dir():
            raise SandboxError("invalid_path", f"{path} is not a directory")
        root = Path(os.path.realpath(self.workspace))
        inner = posixpath.join(WORKSPACE, host.relative_to(root).as_posix()).rstrip("/.")
        return list(_walk(host, inner or WORKSPACE, LIST_CAP))

    # ---- snapshots ------------------------------------------------------------------------

    async def manifest_hash(self, ctx: SandboxContext) -> str:
        return await self._file_call(lambda _: trees.manifest_hash(self.workspace), WORKSPACE, ctx)

    async def snapshot(self, operation_key: str, ctx: SandboxContext) -> SnapshotData:
        if self.running():
            raise SandboxError("not_quiescent", "a command is still running in the sandbox")
        before, data = await self._file_call(self._capture, WORKSPACE, ctx)
        if self.running():
            raise SandboxError("not_quiescent", "a command started while it was captured")
        await ctx.fence()
        owner = ctx.owner or ""
        await asyncio.to_thread(
            self.snapshots.keep, snapshot_id(operation_key), data, before, owner
        )
        return SnapshotData(
            snapshot_id=snapshot_id(operation_key),
            provider=PROVIDER,
            sandbox_id=self._id,
            capture_class="filesystem",
            expires_at=None,
            manifest_hash=before,
            quiesced={"excluded": [], "frozen": [], "stopped": [self._id]},
        )

    def _capture(self, _: str) -> tuple[str, bytes]:
        """The workspace's manifest hash and archive, taken while it holds still."""
        before = trees.manifest_hash(self.workspace)
        try:
            data = trees.archive(self.workspace)
        except trees.NotRegularError:
            raise SandboxError("not_quiescent", "a file changed while it was captured") from None
        if trees.manifest_hash(self.workspace) != before:
            raise SandboxError("not_quiescent", "the workspace changed while it was captured")
        return before, data


def _setup_pipe(args: list[str]) -> int:
    """A pipe's read end holding ``args`` NUL-separated (bubblewrap's ``--args``)."""
    payload = b"".join(a.encode("utf-8") + b"\0" for a in args)
    read, write = os.pipe()
    try:
        if len(payload) > 65536:  # more than a pipe holds before a reader drains it
            raise SandboxError("too_large", "the command's environment is too large")
        os.write(write, payload)
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return read


def _walk(host: Path, inner: str, cap: int) -> Iterator[FileEntry]:
    """The entries under the host directory ``host`` (``inner`` inside the sandbox), sorted,
    at most ``cap``; nothing is opened but directories, no link is followed."""
    count = 0
    stack = [(host, inner)]
    while stack and count < cap:
        here, inside = stack.pop()
        with os.scandir(here) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        below = []
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            path = posixpath.join(inside, entry.name)
            if stat.S_ISLNK(info.st_mode):
                yield FileEntry(path, "symlink", 0)
            elif stat.S_ISDIR(info.st_mode):
                yield FileEntry(path, "dir", 0)
                below.append((Path(entry.path), path))
            elif stat.S_ISREG(info.st_mode):
                yield FileEntry(path, "file", info.st_size)
            else:
                continue  # a FIFO, a socket, a device: not workspace content
            count += 1
            if count >= cap:
                return
        stack.extend(reversed(below))


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
        try:
            info = os.stat(host.name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            info = None  # made by this open (O_CREAT), or not there (not_found)
        if info is not None:
            _require_regular(info.st_mode, path)
        fd = os.open(
            host.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, FILE_MODE,
            dir_fd=directory,
        )
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link swapped in; a FIFO with no reader
            raise SandboxError("permission_denied", f"{path} is not a regular file") from None
        raise
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        _require_regular(info.st_mode, path)  # swapped for something else since the stat
        os.set_blocking(fd, True)
        if flags & os.O_CREAT:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _require_regular(mode: int, path: str) -> None:
    if stat.S_ISREG(mode):
        return
    kind = (
        "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
        else "a socket" if stat.S_ISSOCK(mode)
        else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a symlink" if stat.S_ISLNK(mode)
        else "a directory" if stat.S_ISDIR(mode)
        else "not a regular file"
    )
    raise SandboxError(
        "permission_denied",
        f"{path} is {kind}: the file tools read and write regular files only",
    )


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
                os.mkdir(name, DIR_MODE, dir_fd=directory)
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
