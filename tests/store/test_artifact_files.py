"""Artifact files: an address holds the whole artifact or nothing, across a SIGKILL at each
step of a put; a second put refreshes the file's mtime and mends damaged bytes.

The kills are real: a child process puts an artifact and SIGKILLs itself at a named step
(after the temporary file is written and fsynced, after the hard link), and the parent then
opens the store directory as a fresh process would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from threads.log.hashing import sha256_hex
from threads.store.artifact_files import ArtifactFiles

DATA = os.urandom(256 * 1024)
SHA = sha256_hex(DATA)

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from threads.store import artifact_files

    root, step, data_path = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    real_link = os.link

    def link(src, dst):
        if step == "before_link":
            os.kill(os.getpid(), signal.SIGKILL)
        real_link(src, dst)
        if step == "after_link":
            os.kill(os.getpid(), signal.SIGKILL)

    artifact_files.os.link = link
    artifact_files.ArtifactFiles(root).put(Path(data_path).read_bytes())
    """
)


def _put_and_die(root: Path, step: str, tmp_path: Path) -> None:
    data_path = tmp_path / "data"
    data_path.write_bytes(DATA)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), step, str(data_path)],
        capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == -9, done.stderr


@pytest.mark.parametrize("step", ["before_link", "after_link"])
def test_a_put_killed_at_any_step_leaves_the_whole_artifact_or_none(
    tmp_path: Path, step: str
) -> None:
    root = tmp_path / "store"
    _put_and_die(root, step, tmp_path)
    files = ArtifactFiles(root)
    if step == "before_link":
        assert files.get(SHA) is None  # never a partial file at the address
    else:
        assert files.get(SHA) == DATA
    assert files.put(DATA) == SHA  # the next put completes (or finds) it
    assert files.get(SHA) == DATA
    leftovers = [p.name for p in (root / "artifacts").iterdir() if p.is_file()]
    assert all(name.startswith(f".{SHA}.") for name in leftovers)  # only the killed temp


def test_a_second_put_refreshes_mtime_and_mends_damaged_bytes(tmp_path: Path) -> None:
    files = ArtifactFiles(tmp_path / "store")
    files.put(DATA)
    path = files.path(SHA)
    os.utime(path, (1_000_000, 1_000_000))
    files.put(DATA)
    assert path.stat().st_mtime > 1_000_000  # a gc's grace counts from the last put
    damaged = bytearray(DATA)
    damaged[7] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(Exception) as err:
        files.get(SHA)
    assert getattr(err.value, "code", None) == "artifact_corrupt"
    files.put(DATA)
    assert files.get(SHA) == DATA
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_names_that_are_not_addresses_are_never_paths(tmp_path: Path) -> None:
    files = ArtifactFiles(tmp_path / "store")
    files.put(DATA)
    for name in ("../" + SHA, SHA.upper(), SHA[:63], "", SHA + "/x"):
        assert files.get(name) is None
