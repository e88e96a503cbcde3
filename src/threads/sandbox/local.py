"""``threads.sandbox.local()``: a process sandbox on bubblewrap that needs no daemon.

Each sandbox is a directory on the host named after its operation key (so a repeated create
finds the same one): ``workspace/`` is bound at ``/workspace``; ``supervisor/`` holds the
records that prove a command's processes gone. Every command runs under ``bwrap`` in fresh
namespaces (no network, its own pids, ipc, uts, cgroup, user), with the host's ``/usr`` read-only,
a private ``/tmp``, an empty environment and resource limits (``threads.sandbox.limits``).
Snapshots are content-addressed archives of the workspace under ``snapshots/``.

Invariants: a keyed command's record is durable before the command may run; the fence is
checked before a command is let go, before any file is touched and before a snapshot is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from threads.log.hashing import sha256_hex
from threads.sandbox import manifest as trees
from threads.sandbox.durable import write_durably
from threads.sandbox.limits import Limits, pids_cgroup, remove_cgroup
from threads.sandbox.procs import identify, is_alive
from threads.sandbox.protocol import (
    DEFAULT_TIMEOUT_MS,
    WORKSPACE,
    ExecResult,
    FileEntry,
    SandboxContext,
    SandboxError,
    SandboxInfo,
    SnapshotData,
    Termination,
)
from threads.sandbox.supervisor import Record, Records, key_hash, live_processes, marker, prove_gone

BWRAP = "/usr/bin/bwrap"
PROVIDER = "local"
OUTPUT_CAP = 4 * 1024 * 1024  # bytes kept per stream; a command may write more, it is dropped
FILE_CAP = 16 * 1024 * 1024
LIST_CAP = 2000
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"


def _sandbox_id(operation_key: str) -> str:
    return f"lsb-{sha256_hex(operation_key.encode('utf-8'))[:32]}"


def _snapshot_id(operation_key: str) -> str:
    return f"lss-{sha256_hex(operation_key.encode('utf-8'))[:32]}"


class LocalSandbox:
    """The provider; see the module docstring. Make one with ``threads.sandbox.local()``."""

    def __init__(self, root: Path, limits: Limits, bwrap: str = BWRAP) -> None:
        self.root = root
        self.limits = limits
        self.bwrap = bwrap
        self._info = SandboxInfo(
            provider=PROVIDER,
            egress="enforced",
            capture_classes=("filesystem",),
            termination="confirmed",
            lookup_create="final",
            lookup_snapshot="final",
        )

    @property
    def info(self) -> SandboxInfo:
        return self._info

    def _dir(self, sandbox_id: str) -> Path:
        if not (sandbox_id.startswith("lsb-") and len(sandbox_id) == 36):
            raise SandboxError("not_found", f"{sandbox_id!r} is not a local sandbox id")
        return self.root / "sandboxes" / sandbox_id

    def sandbox_ids(self) -> list[str]:
        """The sandboxes that exist on this host now (what a leak count counts)."""
        folder = self.root / "sandboxes"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    async def create(self, operation_key: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        sandbox_id = _sandbox_id(operation_key)
        folder = self._dir(sandbox_id)
        (folder / "workspace").mkdir(parents=True, exist_ok=True)
        (folder / "supervisor").mkdir(exist_ok=True)
        return LocalSession(self, sandbox_id, folder)

    async def attach(self, ref: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        folder = self._dir(ref)
        if not (folder / "workspace").is_dir():
            raise SandboxError("not_found", f"sandbox {ref} is gone; start a new one")
        return LocalSession(self, ref, folder)

    async def lookup(self, kind: Literal["sandbox", "snapshot"], operation_key: str) -> str | None:
        if kind == "sandbox":
            sandbox_id = _sandbox_id(operation_key)
            return sandbox_id if self._dir(sandbox_id).is_dir() else None
        snapshot_id = _snapshot_id(operation_key)
        return snapshot_id if self._snapshot_ref(snapshot_id).exists() else None

    async def restore(
        self, snapshot: SnapshotData, operation_key: str, ctx: SandboxContext
    ) -> LocalSession:
        data = self._archive_of(snapshot.snapshot_id)
        session = await self.create(operation_key, ctx)
        workspace = session.workspace
        try:
            shutil.rmtree(workspace)
            workspace.mkdir()
            trees.extract(data, workspace)
            restored = trees.manifest_hash(workspace)
        except (OSError, ValueError) as exc:
            await self.release("sandbox", session.id, ctx)
            raise SandboxError(
                "snapshot_restore_failed", f"snapshot {snapshot.snapshot_id} did not unpack: {exc}"
            ) from exc
        if restored != snapshot.manifest_hash:
            await self.release("sandbox", session.id, ctx)
            raise SandboxError(
                "snapshot_manifest_mismatch",
                f"snapshot {snapshot.snapshot_id} restored to manifest {restored}, not"
                f" {snapshot.manifest_hash}; the archive is not what was recorded",
            )
        return session

    async def release(
        self, kind: Literal["sandbox", "snapshot"], ref: str, ctx: SandboxContext
    ) -> Literal["released", "already_gone"]:
        await ctx.fence()
        if kind == "snapshot":
            return self._release_snapshot(ref)
        folder = self._dir(ref)
        if not folder.exists():
            return "already_gone"
        for record in Records(folder / "supervisor").all():
            if prove_gone(record) == "unknown":
                raise SandboxError(
                    "release_failed",
                    f"a command in sandbox {ref} could not be proven stopped; run gc again",
                )
        shutil.rmtree(folder)
        return "released"

    # ---- snapshots: archives/<sha256>.tar, refs/<snapshot_id>.json, one lock --------------

    def _snapshot_ref(self, snapshot_id: str) -> Path:
        return self.root / "snapshots" / "refs" / f"{snapshot_id}.json"

    def _archive_path(self, sha: str) -> Path:
        return self.root / "snapshots" / "archives" / f"{sha}.tar"

    @contextlib.contextmanager
    def _snapshot_lock(self) -> Iterator[None]:
        folder = self.root / "snapshots"
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "archives").mkdir(exist_ok=True)
        with open(folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def keep_snapshot(self, snapshot_id: str, data: bytes, manifest: str) -> None:
        sha = sha256_hex(data)
        with self._snapshot_lock():
            write_durably(self._archive_path(sha), data)
            ref = json.dumps({"archive": sha, "manifest_hash": manifest}).encode("utf-8")
            write_durably(self._snapshot_ref(snapshot_id), ref)

    def _archive_of(self, snapshot_id: str) -> bytes:
        try:
            ref = json.loads(self._snapshot_ref(snapshot_id).read_bytes())
            data = self._archive_path(ref["archive"]).read_bytes()
        except (OSError, ValueError, KeyError):
            raise SandboxError(
                "snapshot_missing", f"snapshot {snapshot_id} is not on this host"
            ) from None
        if sha256_hex(data) != ref["archive"]:
            raise SandboxError("snapshot_restore_failed", f"snapshot {snapshot_id} is corrupt")
        return data

    def _release_snapshot(self, snapshot_id: str) -> Literal["released", "already_gone"]:
        with self._snapshot_lock():
            path = self._snapshot_ref(snapshot_id)
            try:
                sha = json.loads(path.read_bytes())["archive"]
            except (OSError, ValueError, KeyError):
                return "already_gone"
            path.unlink()
            still_used = any(
                json.loads(p.read_bytes()).get("archive") == sha
                for p in path.parent.glob("*.json")
            )
            if not still_used:
                self._archive_path(sha).unlink(missing_ok=True)
        return "released"


class LocalSession:
    """One local sandbox: commands, files and snapshots of its workspace."""

    def __init__(self, sandbox: LocalSandbox, sandbox_id: str, folder: Path) -> None:
        self.sandbox = sandbox
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
        group = pids_cgroup(key_hash(key), self.sandbox.limits.pids)
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
                preexec_fn=self.sandbox.limits.preexec(group),
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
            self, record, process=process, group=group, timeout_ms=timeout_ms, stdin=stdin
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
            self.sandbox.bwrap,
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
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
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
        host.parent.mkdir(parents=True, exist_ok=True)
        self._host_path(str(Path(_inside(path)).parent))  # a parent made of links is refused too
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
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
        snapshot_id = _snapshot_id(operation_key)
        await ctx.fence()
        self.sandbox.keep_snapshot(snapshot_id, data, before)
        return SnapshotData(
            snapshot_id=snapshot_id,
            provider=PROVIDER,
            sandbox_id=self._id,
            capture_class="filesystem",
            expires_at=None,
            manifest_hash=before,
            quiesced={"excluded": [], "frozen": [], "stopped": [self._id]},
        )


class LocalExec:
    """A running local command; its output is drained into buffers as it arrives."""

    def __init__(
        self,
        session: LocalSession,
        record: Record,
        *,
        process: asyncio.subprocess.Process,
        group: Path | None,
        timeout_ms: int,
        stdin: bytes | None,
    ) -> None:
        self._session = session
        self._record = record
        self._process = process
        self._group = group
        self._deadline_s = timeout_ms / 1000
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._queues: tuple[asyncio.Queue[bytes | None], asyncio.Queue[bytes | None]] = (
            asyncio.Queue(),
            asyncio.Queue(),
        )
        assert process.stdout is not None
        assert process.stderr is not None
        self._readers = [
            asyncio.create_task(_drain(process.stdout, self._out, self._queues[0])),
            asyncio.create_task(_drain(process.stderr, self._err, self._queues[1])),
            asyncio.create_task(_feed(process, stdin)),
        ]
        self._exit: int | None = None

    async def _stream(self, index: int) -> AsyncIterator[bytes]:
        queue = self._queues[index]
        while (chunk := await queue.get()) is not None:
            yield chunk

    def stdout(self) -> AsyncIterator[bytes]:
        return self._stream(0)

    def stderr(self) -> AsyncIterator[bytes]:
        return self._stream(1)

    async def wait(self) -> int:
        if self._exit is not None:
            return self._exit
        try:
            code = await asyncio.wait_for(self._process.wait(), self._deadline_s)
        except TimeoutError:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, prove_gone, self._record)
            await self._finish()
            raise SandboxError(
                "timeout",
                f"the command ran past {self._deadline_s:g} s and was stopped; it may have"
                " partly run",
            ) from None
        await self._finish()
        self._session.records.write(replace(self._record, state="exited", exit_code=code))
        self._exit = code
        return code

    async def _finish(self) -> None:
        await asyncio.gather(*self._readers, return_exceptions=True)
        remove_cgroup(self._group)

    async def collect(self) -> ExecResult:
        code = await self.wait()
        return ExecResult(code, b"".join(self._out), b"".join(self._err))


async def _drain(
    stream: asyncio.StreamReader, into: list[bytes], queue: asyncio.Queue[bytes | None]
) -> None:
    kept = 0
    while chunk := await stream.read(65536):
        if kept < OUTPUT_CAP:
            into.append(chunk[: OUTPUT_CAP - kept])
            kept += len(into[-1])
        queue.put_nowait(chunk)
    queue.put_nowait(None)


async def _feed(process: asyncio.subprocess.Process, stdin: bytes | None) -> None:
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if stdin:
            process.stdin.write(stdin)
            await process.stdin.drain()
        process.stdin.close()


def _read_info(fd: int) -> bytes:
    """bubblewrap writes one JSON object to its info fd, then closes it."""
    chunks = []
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _inside(path: str) -> str:
    """``path`` as an absolute, normalized path under /workspace (else ``invalid_path``)."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise SandboxError("invalid_path", f"{path!r}: paths are absolute, under {WORKSPACE}")
    if posixpath.normpath(path) != path or path.startswith("//"):
        raise SandboxError("invalid_path", f"{path!r} is not normalized (no '..', '.', '//')")
    if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
        raise SandboxError("invalid_path", f"{path!r} is outside {WORKSPACE}")
    return path


def local(
    root: str | os.PathLike[str] | None = None,
    *,
    cpu_seconds: int = 60,
    memory_mb: int = 1024,
    pids: int = 256,
    file_mb: int = 1024,
) -> LocalSandbox:
    """A bubblewrap sandbox provider keeping its sandboxes under ``root`` (default
    ``~/.cache/threads/sandboxes``). Limits apply to each command."""
    from threads.errors import ConfigError

    if not os.access(BWRAP, os.X_OK):
        raise ConfigError(
            "capability_missing",
            f"the local sandbox needs bubblewrap at {BWRAP}; install it (apt-get install"
            " bubblewrap)",
        )
    folder = Path(root) if root is not None else Path.home() / ".cache" / "threads" / "sandboxes"
    folder.mkdir(parents=True, exist_ok=True)
    return LocalSandbox(folder.resolve(), Limits(cpu_seconds, memory_mb, pids, file_mb))
