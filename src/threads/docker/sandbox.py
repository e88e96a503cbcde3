"""``docker(image, ...)``: sandboxes as Docker containers (``threads[docker]``).

Speaks the Engine API over the daemon's unix socket through the fenced HTTP client
(``threads.docker.engine``); it never sends registry credentials and never pulls.
Each container is named after its operation key (``threads-<sha256(key)[:32]>``, label
``threads.operation_key``), so a repeated create finds the same one. Hardening: no network
unless ``allow_internet``; a read-only root filesystem except the ``/workspace`` and
``/run/threads`` volumes and a private ``/tmp``; every capability dropped; no new privileges;
commands as uid 1000; pids, CPU and memory limits. A command whose outcome is in doubt is
proven gone by stopping the whole container (a stopped container runs nothing) and starting it
again. Docker containers take no snapshots here (no fork points), as upstream's do not.
``labelled`` lists every container carrying the label, for ``threads gc`` to remove the ones
whose ledger row is released (orphans) and report the ones its store has no row for.

Each container also carries the identity of the store that made it (label ``threads.owner``,
``SandboxContext.owner``): one another store made (this store is a copy of it, on the same
engine) is never attached, found, killed or removed (``permission_denied``). Every Engine call
but a command's output stream is bounded (``REQUEST_S``); a command's by its deadline. A file
is read from the container's archive only while it is a regular file and at most ``FILE_CAP``
bytes; a listing reads at most ``LIST_CAP`` entries.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import posixpath
import tarfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

from threads import safe_tar
from threads.docker.engine import Engine, operation, quoted, socket_path
from threads.errors import ConfigError
from threads.log.hashing import sha256_hex
from threads.log.json_types import JsonObject
from threads.sandbox.minted import minted_pattern, require_minted
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

USER = "1000:1000"
OPERATION_LABEL = "threads.operation_key"
OWNER_LABEL = "threads.owner"
FILE_CAP = 16 * 1024 * 1024
LIST_CAP = 2000
LIST_BYTES = 64 * 1024 * 1024  # the most of a directory's archive a listing reads
_TAR_SLACK = 64 * 1024  # the headers around one file in the engine's archive
RUN_DIR = "/run/threads"
MIN_MEMORY_MB = 64
STOP_PROOF_ROUNDS = 3


_CONTAINER_NAME = minted_pattern("threads-")


def container_name(operation_key: str) -> str:
    return f"threads-{sha256_hex(operation_key.encode('utf-8'))[:32]}"


def _own(ref: str) -> str:
    """``ref`` when it names a container this provider makes (``not_found`` otherwise): a ref
    read from a ledger row never reaches another container on the engine, nor another URL."""
    return require_minted(ref, _CONTAINER_NAME, "a threads sandbox container")


class DockerSandbox:
    def __init__(
        self, image: str, *, allow_internet: bool, cpus: float, memory_mb: int, pids: int,
        socket: Path,
    ) -> None:
        self.image = image
        self.allow_internet = allow_internet
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.pids = pids
        self.engine = Engine(socket)
        self._info = SandboxInfo(
            provider="docker",
            egress="unenforced" if allow_internet else "enforced",
            capture_classes=(),
            termination="confirmed",
            lookup_create="nonfinal",
            lookup_snapshot="none",
        )

    @property
    def info(self) -> SandboxInfo:
        return self._info

    async def close(self) -> None:
        """Close the connection to the engine (the containers stay)."""
        await self.engine.close()

    def _config(self, operation_key: str, name: str, owner: str) -> JsonObject:
        return {
            "Image": self.image,
            "Cmd": ["sleep", "2147483647"],
            "User": USER,
            "WorkingDir": WORKSPACE,
            "Env": [],
            "Labels": {
                OPERATION_LABEL: operation_key, "threads.provider": "docker",
                OWNER_LABEL: owner,
            },
            "NetworkDisabled": not self.allow_internet,
            "HostConfig": {
                "NetworkMode": "bridge" if self.allow_internet else "none",
                "ReadonlyRootfs": True,
                "CapDrop": ["ALL"],
                "SecurityOpt": ["no-new-privileges"],
                "PidsLimit": self.pids,
                "NanoCpus": int(self.cpus * 1e9),
                "Memory": self.memory_mb * 1024 * 1024,
                "Init": True,
                "Tmpfs": {"/tmp": "rw,nosuid,nodev,size=64m,mode=1777"},  # noqa: S108
                "Mounts": [
                    {"Type": "volume", "Source": f"{name}-workspace", "Target": WORKSPACE},
                    {"Type": "volume", "Source": f"{name}-run", "Target": RUN_DIR},
                ],
            },
        }

    async def create(self, operation_key: str, ctx: SandboxContext) -> DockerSession:
        name = container_name(operation_key)
        config = self._config(operation_key, name, ctx.owner or "")
        with operation(ctx):
            response = await self.engine.request(
                "POST", "/containers/create", json=config, params={"name": name}, ok=(201, 409),
            )
            if response.status_code == 409:  # made before, under this key: the same one
                _require_owner(await self._inspect(name), name, ctx)
            await self.engine.request("POST", f"/containers/{name}/start", ok=(204, 304))
        return DockerSession(self, name)

    async def _inspect(self, name: str) -> JsonObject:
        response = await self.engine.request("GET", f"/containers/{quoted(name)}/json")
        value: JsonObject = response.json()
        return value

    async def attach(self, ref: str, ctx: SandboxContext) -> DockerSession:
        name = _own(ref)
        with operation(ctx):
            state = _state(_require_owner(await self._inspect(name), name, ctx))
            if not state.get("Running"):
                await self.engine.request("POST", f"/containers/{name}/start", ok=(204, 304))
        return DockerSession(self, name)

    async def lookup(
        self, kind: Literal["sandbox", "snapshot"], operation_key: str, ctx: SandboxContext
    ) -> str | None:
        if kind == "snapshot":
            return None
        name = container_name(operation_key)
        with operation(SandboxContext(_lookup_fence)):
            try:
                found = await self._inspect(name)
            except SandboxError as exc:
                if exc.code == "not_found":
                    return None
                raise
        return name if _made_by(found) == (ctx.owner or "") else None

    async def restore(
        self, snapshot: SnapshotData, operation_key: str, ctx: SandboxContext
    ) -> DockerSession:
        raise SandboxError("snapshot_missing", "Docker sandboxes take no snapshots here")

    async def labelled(self, ctx: SandboxContext) -> list[tuple[str, str, str]]:
        """``(container name, operation key, owner)`` of every container on this engine that
        carries threads' ``threads.operation_key`` label under a name this provider makes,
        running or not: what orphan gc looks at."""
        with operation(ctx):
            response = await self.engine.request(
                "GET", "/containers/json",
                params={"all": "1", "filters": json.dumps({"label": [OPERATION_LABEL]})},
            )
        found = []
        for container in response.json():
            labels = container.get("Labels") or {}
            key, owner = labels.get(OPERATION_LABEL), labels.get(OWNER_LABEL, "")
            names = container.get("Names") or []
            name = str(names[0]).lstrip("/") if names else ""
            if isinstance(key, str) and isinstance(owner, str) and _CONTAINER_NAME.fullmatch(name):
                found.append((name, key, owner))
        return found

    async def release(
        self, kind: Literal["sandbox", "snapshot"], ref: str, ctx: SandboxContext
    ) -> Literal["released", "already_gone"]:
        if kind == "snapshot":
            return "already_gone"
        name = _own(ref)
        with operation(ctx):
            try:
                _require_owner(await self._inspect(name), name, ctx)
            except SandboxError as exc:
                if exc.code != "not_found":
                    raise
            response = await self.engine.request(
                "DELETE", f"/containers/{name}", params={"force": "1", "v": "1"},
                ok=(204, 404),
            )
            for volume in ("workspace", "run"):
                await self.engine.request(
                    "DELETE", f"/volumes/{name}-{volume}", ok=(204, 404, 409)
                )
        return "already_gone" if response.status_code == 404 else "released"


async def _lookup_fence() -> None:
    return None  # a lookup only reads; the ledger moves it answers are fenced by the store


def _made_by(container: JsonObject) -> str:
    """The store identity a container was labelled with ("" for one made outside any store,
    or before owners were recorded: only an operator removes those)."""
    config = container.get("Config")
    labels = config.get("Labels") if isinstance(config, dict) else None
    owner = labels.get(OWNER_LABEL, "") if isinstance(labels, dict) else ""
    return owner if isinstance(owner, str) else ""


def _state(container: JsonObject) -> JsonObject:
    """The container's ``State`` as the engine's inspect answers it."""
    state = container["State"]
    if not isinstance(state, dict):
        raise SandboxError("unavailable", f"the engine sent a container state of {state!r:.80}")
    return state


def _require_owner(container: JsonObject, name: str, ctx: SandboxContext) -> JsonObject:
    """``container`` when ``ctx.owner`` made it; ``permission_denied`` otherwise."""
    if _made_by(container) != (ctx.owner or ""):
        raise SandboxError(
            "permission_denied",
            f"container {name} belongs to another store (a copy of this store, or the store"
            " this one was copied from, on the same engine): it is left alone",
        )
    return container


class DockerSession:
    def __init__(self, sandbox: DockerSandbox, name: str) -> None:
        self.sandbox = sandbox
        self.name = name
        self.engine = sandbox.engine

    @property
    def id(self) -> str:
        return self.name

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
    ) -> DockerExec:
        _inside(cwd)
        command = list(argv)
        with operation(ctx):
            if stdin is not None:
                path = f"{RUN_DIR}/stdin-{sha256_hex(stdin)[:16]}"
                await self._put(path, stdin)
                command = ["sh", "-c", f'exec "$@" < {path}', "sh", *command]
            created = await self.engine.request(
                "POST", f"/containers/{self.name}/exec",
                json={"AttachStdout": True, "AttachStderr": True, "Cmd": command,
                      "Env": [f"{k}={v}" for k, v in sorted((env or {}).items())],
                      "WorkingDir": cwd, "User": USER},
            )
        exec_id = str(created.json()["Id"])
        return DockerExec(self, exec_id, ctx, timeout_ms)

    async def terminate(self, process_key: str, ctx: SandboxContext) -> Termination:
        """Stop the container: once the engine reports it stopped, nothing of it runs."""
        with operation(ctx):
            for _ in range(STOP_PROOF_ROUNDS):
                try:
                    await self.engine.request(
                        "POST", f"/containers/{self.name}/kill", ok=(204, 409)
                    )
                    state = _state(await self.sandbox._inspect(self.name))
                except SandboxError as exc:
                    if exc.code == "not_found":
                        return "terminated"
                    continue
                if not state.get("Running") and not state.get("Pid"):
                    await self.engine.request(
                        "POST", f"/containers/{self.name}/start", ok=(204, 304)
                    )
                    return "terminated"
                await asyncio.sleep(0.2)  # the engine reaps the container's processes
        return "unknown"

    async def _put(self, path: str, data: bytes) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(posixpath.basename(path))
            info.size, info.uid, info.gid, info.mode = len(data), 1000, 1000, 0o644
            tar.addfile(info, io.BytesIO(data))
        await self.engine.request(
            "PUT", f"/containers/{self.name}/archive", content=buffer.getvalue(),
            params={"path": posixpath.dirname(path)},
        )

    async def _get(self, path: str, cap: int) -> tuple[bytes, bool]:
        """The engine's tar of ``path``: at most ``cap`` bytes, and whether it was cut there."""
        return await self.engine.read_capped(
            f"/containers/{self.name}/archive", params={"path": path}, cap=cap
        )

    async def read_file(self, path: str, ctx: SandboxContext) -> bytes:
        _inside(path)
        with operation(ctx):
            data, cut = await self._get(path, FILE_CAP + _TAR_SLACK)
        if cut:
            raise SandboxError("too_large", f"{path} is larger than {FILE_CAP} bytes")
        try:
            for tar, member in safe_tar.members(data, any_link_target=True):
                if member.isdir():
                    raise SandboxError("is_directory", f"{path} is a directory")
                if not member.isreg():
                    break
                handle = tar.extractfile(member)
                return b"" if handle is None else handle.read()
        except (safe_tar.UnsafeArchiveError, tarfile.TarError):
            pass  # a FIFO, a device or a socket: refused by the archive's checks
        raise SandboxError(
            "permission_denied",
            f"{path} is not a regular file: the file tools read and write regular files only",
        )

    async def write_file(self, path: str, data: bytes, ctx: SandboxContext) -> None:
        _inside(path)
        if path == WORKSPACE:
            raise SandboxError("is_directory", f"{path} is a directory")
        with operation(ctx):
            parent = posixpath.dirname(path)
            if parent != WORKSPACE:
                made = await (await self.exec(["mkdir", "-p", parent], ctx)).collect()
                if made.exit_code != 0:
                    raise SandboxError("permission_denied", made.stderr.decode(errors="replace"))
            await self._put(path, data)

    async def list_files(self, path: str, ctx: SandboxContext) -> list[FileEntry]:
        _inside(path)
        with operation(ctx):
            data, _ = await self._get(path, LIST_BYTES)  # a cut archive lists what came first
        base = posixpath.dirname(path)
        entries = []
        with contextlib.suppress(safe_tar.UnsafeArchiveError, tarfile.TarError):
            for member in _headers(data):
                inner = posixpath.normpath(posixpath.join(base, member.name))
                if inner == path or not (member.isreg() or member.isdir() or member.issym()):
                    continue
                kind: Literal["file", "dir", "symlink"] = (
                    "dir" if member.isdir() else "symlink" if member.issym() else "file"
                )
                entries.append(FileEntry(inner, kind, member.size if kind == "file" else 0))
                if len(entries) >= LIST_CAP:
                    break
        return sorted(entries, key=lambda e: e.path)

    async def snapshot(self, operation_key: str, ctx: SandboxContext) -> SnapshotData:
        raise SandboxError("unavailable", "Docker sandboxes take no snapshots here")

    async def manifest_hash(self, ctx: SandboxContext) -> str:
        raise SandboxError("unavailable", "Docker sandboxes take no snapshots here")


class DockerExec:
    """A running ``docker exec``: frames are read as they arrive."""

    def __init__(
        self, session: DockerSession, exec_id: str, ctx: SandboxContext, timeout_ms: int
    ) -> None:
        self._session = session
        self._exec_id = exec_id
        self._ctx = ctx
        self._deadline_s = timeout_ms / 1000
        self._frames: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        with operation(self._ctx):
            try:
                async for kind, chunk in self._session.engine.stream(
                    f"/exec/{self._exec_id}/start", {"Detach": False, "Tty": False}
                ):
                    (self._err if kind == 2 else self._out).append(chunk)
                    self._frames.put_nowait((kind, chunk))
            finally:
                self._frames.put_nowait(None)

    async def _stream(self, want: int) -> AsyncIterator[bytes]:
        while (frame := await self._frames.get()) is not None:
            if frame[0] == want:
                yield frame[1]

    def stdout(self) -> AsyncIterator[bytes]:
        return self._stream(1)

    def stderr(self) -> AsyncIterator[bytes]:
        return self._stream(2)

    async def wait(self) -> int:
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), self._deadline_s)
        except TimeoutError:
            await self._session.terminate(self._exec_id, self._ctx)
            self._reader.cancel()
            raise SandboxError(
                "timeout", f"the command ran past {self._deadline_s:g} s and was stopped"
            ) from None
        with operation(self._ctx):
            response = await self._session.engine.request("GET", f"/exec/{self._exec_id}/json")
        code = response.json().get("ExitCode")
        return -1 if code is None else int(code)

    async def collect(self) -> ExecResult:
        code = await self.wait()
        return ExecResult(code, b"".join(self._out), b"".join(self._err))


def _headers(data: bytes) -> Iterator[tarfile.TarInfo]:
    """The member headers of an archive the engine wrote (maybe cut short), content unread."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        while (member := tar.next()) is not None:
            yield member


def _inside(path: str) -> str:
    if posixpath.normpath(path) != path or not (
        path == WORKSPACE or path.startswith(WORKSPACE + "/")
    ):
        raise SandboxError("invalid_path", f"{path!r}: paths are absolute, under {WORKSPACE}")
    return path


def docker(
    image: str,
    *,
    allow_internet: bool = False,
    cpus: float = 1.0,
    memory_mb: int = 512,
    pids: int = 1024,
    socket: str | None = None,
) -> DockerSandbox:
    """A Docker sandbox provider running ``image`` (present locally: nothing is pulled)."""
    if memory_mb < MIN_MEMORY_MB:
        raise ConfigError("invalid_config", f"memory_mb must be at least {MIN_MEMORY_MB}")
    if cpus <= 0 or pids < 1:
        raise ConfigError("invalid_config", "cpus and pids must be positive")
    path = Path(socket) if socket is not None else socket_path()
    return DockerSandbox(
        image, allow_internet=allow_internet, cpus=cpus, memory_mb=memory_mb, pids=pids,
        socket=path,
    )
