"""The ``threads`` CLI, run in-process through ``main(argv)`` and once as a real subprocess:
every command's happy path, bad input (exit 1, one ``error: <code>: ...`` line on stderr, no
traceback) and bad usage (exit 2)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import threads
from threads.cli.main import main
from threads.clock import FakeClock
from threads.store.bundle import write_bundle
from threads.testing.sample_log import SampleLog


@dataclass(frozen=True)
class Sample:
    root: SampleLog
    child: SampleLog
    root_file: Path
    child_file: Path


@pytest.fixture
def sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sample:
    """Two exports (a root and a child forked from it) in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    clock = FakeClock()
    root = SampleLog(clock)
    root.started()
    root.turn(text="What is in README.md?", reply="One heading.")
    root.snapshot()
    child = root.fork()
    child.turn(text="Now in the child.")
    root_file, child_file = tmp_path / "root.jsonl", tmp_path / "child.jsonl"
    root_file.write_bytes(root.export())
    child_file.write_bytes(child.export())
    return Sample(root, child, root_file, child_file)


@pytest.fixture
def imported(sample: Sample, capsys: pytest.CaptureFixture[str]) -> Sample:
    """The child export imported into the default store (.threads), with its artifact (as a
    bundle: the sample's request artifact is in no store yet)."""
    bundle = sample.child_file.with_suffix(".bundle")
    artifacts = {**sample.root.artifacts, **sample.child.artifacts}
    bundle.write_bytes(write_bundle(sample.child_file.read_bytes(), artifacts))
    assert main(["import", str(bundle)]) == 0
    capsys.readouterr()
    return sample


def failure(capsys: pytest.CaptureFixture[str], code: str) -> str:
    """The stderr of a failed command: one ``error: <code>: <message and what to do>`` line,
    no traceback."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {code}"), err
    assert lines[0].endswith("."), err  # what to do next closes the line
    assert "Traceback" not in err
    return lines[0]


# ---- verify FILE ---------------------------------------------------------------------------


def test_verify_file_ok(sample: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(sample.child_file)]) == 0
    assert capsys.readouterr().out == "ok: 11 events, head verified, 2 requests replayed\n"


def test_verify_truncated_file_reports_the_torn_tail(
    sample: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    data = sample.child_file.read_bytes()
    cut = len(data) - 40
    at_offset = data.rfind(b"\n", 0, cut) + 1
    sample.child_file.write_bytes(data[:cut])
    assert main(["verify", str(sample.child_file)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        f"torn: {sample.child_file}: it ends with {cut - at_offset} bytes at byte offset"
        f" {at_offset} that are not a complete line (no newline after them). The 11 events"
        " before that verify, 2 requests replayed."
    )


def _torn_files(sample: Sample) -> dict[str, tuple[bytes, str]]:
    """The child export torn two ways, with the words that say where."""
    data = sample.child_file.read_bytes()
    no_head = data[: data.rstrip(b"\n").rfind(b"\n") + 1]
    mid_line = data[: len(no_head) - 40]
    at = mid_line.rfind(b"\n") + 1
    return {
        "no_head_line": (no_head, f"it ends at byte offset {len(no_head)} without its head line"),
        "unterminated": (
            mid_line,
            f"it ends with {len(mid_line) - at} bytes at byte offset {at} that are not a"
            " complete line (no newline after them)",
        ),
    }


@pytest.mark.parametrize("torn", ["no_head_line", "unterminated"])
def test_verify_and_import_of_a_torn_file_say_it_is_torn_and_where_in_the_same_words(
    sample: Sample, capsys: pytest.CaptureFixture[str], torn: str
) -> None:
    """``verify`` exits 1 on a torn file (its prefix verifies, but the file is not whole);
    ``import`` stores the prefix (exit 0, head unverified) and says the same thing."""
    data, where = _torn_files(sample)[torn]
    path = sample.child_file.with_name("torn.jsonl")
    path.write_bytes(data)
    assert main(["verify", str(path)]) == 1
    said = capsys.readouterr().out
    assert said.startswith(f"torn: {path}: {where}. The "), said
    assert main(["import", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "head unverified" in out[0]
    assert out[1].startswith(f"torn: {path}: {where}. Only the events before that were imported")


def test_verify_of_a_bundle_whose_log_is_torn_exits_1(
    sample: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    data, where = _torn_files(sample)["no_head_line"]
    path = sample.child_file.with_suffix(".bundle")
    path.write_bytes(write_bundle(data, {**sample.root.artifacts, **sample.child.artifacts}))
    assert main(["verify", str(path)]) == 1
    assert capsys.readouterr().out.startswith(f"torn: {path}: {where}. The ")


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"\x00\xff garbage\n", "invalid_line: at seq 0: "),
        (b"", "invalid_line: at seq 0: "),
        (b"[1,2]\n", "invalid_line: at seq 0: "),
    ],
    ids=["garbage", "empty", "not_an_object"],
)
def test_verify_unreadable_file_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, code: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    assert main(["verify", str(path)]) == 1
    failure(capsys, code)


def test_verify_file_missing_a_middle_line_fails_at_its_seq(
    sample: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sample.root_file.read_bytes().splitlines(keepends=True)
    del lines[3]  # seq 3
    sample.root_file.write_bytes(b"".join(lines))
    assert main(["verify", str(sample.root_file)]) == 1
    failure(capsys, "seq_mismatch: at seq 4: ")


def test_verify_missing_file_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "nope.jsonl")]) == 1
    assert "nope.jsonl. Check the path" in failure(capsys, "not_found")


def test_verify_a_directory_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path)]) == 1
    failure(capsys, "invalid_argument")


# ---- import, export, ls, timeline ----------------------------------------------------------


def test_import_then_reimport(sample: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(sample.child_file), "--tenant", "acme"]) == 0
    assert capsys.readouterr().out.startswith(
        f"imported: branch {sample.child.header.branch_id} of thread"
    )
    assert main(["import", str(sample.root_file), "--tenant", "acme"]) == 0
    assert capsys.readouterr().out.startswith("already stored (identical, nothing written)")


def test_import_of_a_conflicting_log_fails(
    imported: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    imported.child.turn(text="one more")
    imported.child_file.write_bytes(imported.child.export())
    assert main(["import", str(imported.child_file)]) == 1
    failure(capsys, "seq_conflict")


def test_export_to_stdout_is_byte_exact(
    sample: Sample, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    assert main(["import", str(sample.child_file)]) == 0
    capsysbinary.readouterr()
    assert main(["export", sample.child.header.branch_id]) == 0
    assert capsysbinary.readouterr().out == sample.child_file.read_bytes()


def test_export_to_file(imported: Sample, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["export", imported.root.header.branch_id, "-o", str(out)]) == 0
    # The root was stored as the child's ancestor, through the fork point (its whole log).
    assert out.read_bytes() == imported.root_file.read_bytes()
    assert main(["verify", str(out)]) == 0


def test_export_unknown_branch_fails(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "0192b000-0000-7000-8000-00000000dead"]) == 1
    failure(capsys, "not_found")


def test_ls(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["THREAD", "AGENT", "TENANT", "STATUS", "UPDATED", "LEASE"]
    cells = row.split()
    assert cells[:4] == [imported.root.header.thread_id, "demo", "local", "idle"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", cells[4])
    assert row.endswith("free")


def test_ls_shows_only_the_tenants_threads(
    imported: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ls", "--tenant", "acme"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no threads of tenant acme" in captured.err
    assert main(["timeline", imported.root.header.thread_id, "--tenant", "acme"]) == 1
    failure(capsys, "not_found")
    assert main(["export", imported.root.header.thread_id, "--tenant", "acme"]) == 1
    failure(capsys, "not_found")
    assert main(["lease", imported.root.header.thread_id, "--tenant", "acme"]) == 1
    failure(capsys, "not_found")


def test_export_takes_a_thread_id(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", imported.root.header.thread_id]) == 0
    by_thread = capsys.readouterr().out
    assert main(["export", imported.root.header.branch_id]) == 0
    assert capsys.readouterr().out == by_thread
    assert by_thread.encode() == imported.root_file.read_bytes()


def test_ls_without_a_store_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", "--store", str(tmp_path / "none")]) == 1
    failure(capsys, "not_found")
    assert not (tmp_path / "none").exists()


def test_timeline(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["timeline", imported.root.header.thread_id]) == 0
    lines = capsys.readouterr().out.splitlines()
    root, child = imported.root.header.branch_id, imported.child.header.branch_id
    assert lines[0] == f"branch {root} (root)"
    first = lines[1].split()
    assert [first[0], *first[2:5]] == ["1", "e1", "host", "thread_started"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first[1])
    assert lines[2].endswith("by api/local/alice")  # the user_input names its principal
    assert '"What is in README.md?"' in lines[2]
    assert "stop_reason=end_turn" in lines[4]
    assert lines[6].endswith(f"[fork point]  [forked: {child}]")
    assert lines[7] == f"branch {child} (forked from {root} at seq 6)"
    fork = lines[8].split()
    assert [fork[0], *fork[2:5]] == ["7", "e1", "host", "fork"]
    assert len(lines) == 13


def test_timeline_unknown_thread_fails(
    imported: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["timeline", "0192a000-0000-7000-8000-00000000dead"]) == 1
    failure(capsys, "not_found")


# ---- verify --store ------------------------------------------------------------------------


def test_verify_store_ok(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--store", ".threads"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{imported.root.header.branch_id}: ok: 6 events, 1 artifacts, head seq 6 verified,"
        " 1 request replayed",
        f"{imported.child.header.branch_id}: ok: 11 events, 2 artifacts, head seq 11 verified,"
        " 2 requests replayed",
    ]
    assert main(["verify", "--thread", imported.root.header.thread_id]) == 0


def test_verify_store_reports_an_edited_line(
    imported: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = imported.root.events[2]  # seq 3, model_request
    with sqlite3.connect(Path(".threads") / "threads.db") as conn:
        conn.execute(
            "UPDATE events SET line = ? WHERE seq = 3",
            (edited.line.replace(b'"attempt":1', b'"attempt":2'),),
        )
    conn.close()
    assert main(["verify", "--store", ".threads"]) == 1
    captured = capsys.readouterr()
    assert "FAILED log_corrupt: at seq 3: " in captured.out  # the edited line itself
    assert captured.err.startswith("error: log_corrupt: at seq 3: ")
    assert "Traceback" not in captured.err
    assert main(["export", imported.root.header.branch_id]) == 1
    failure(capsys, "log_corrupt: at seq 3: ")


def test_newer_store_schema_fails(imported: Sample, capsys: pytest.CaptureFixture[str]) -> None:
    with sqlite3.connect(Path(".threads") / "threads.db") as conn:
        conn.execute("PRAGMA user_version = 7")
    conn.close()
    assert main(["ls"]) == 1
    failure(capsys, "unsupported_format")


def test_garbage_database_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "threads.db").write_bytes(b"this is not a database" * 100)
    assert main(["ls", "--store", str(store)]) == 1
    failure(capsys, "store_corrupt")  # a damaged database file, not a damaged log


def test_postgres_store_that_does_not_answer_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", "--store", "postgres://postgres@127.0.0.1:1/threads"]) == 1
    failure(capsys, "store_unavailable")


# ---- usage ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["export"], ["timeline"], ["verify", "f.jsonl", "--store", "x"], ["ls", "-x"]],
    ids=["no_command", "unknown_command", "export_no_id", "timeline_no_id", "file_and_store",
         "unknown_option"],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage:" in err
    assert "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "verify" in capsys.readouterr().out


# ---- a real process ------------------------------------------------------------------------


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(threads.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get(
        "PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "threads.cli", *args], capture_output=True, text=True,
        env=env, timeout=60, check=False,
    )


def test_subprocess_round_trip(sample: Sample, tmp_path: Path) -> None:
    ok = _run_cli("import", str(sample.child_file), "--store", str(tmp_path / "s"))
    # The sample's two request artifacts were never stored anywhere: said, and imported anyway.
    assert ok.returncode == 0
    assert ok.stderr.startswith("warning: this store lacks 2 artifact(s)")
    out = _run_cli("export", sample.child.header.branch_id, "--store", str(tmp_path / "s"))
    assert out.returncode == 0
    assert out.stdout.encode() == sample.child_file.read_bytes()


def test_subprocess_bad_file_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"format":"threads.log","format_version":2}\n')
    result = _run_cli("verify", str(bad))
    assert result.returncode == 1
    assert result.stderr.startswith("error: unsupported_format: at seq 0: ")
    assert "Traceback" not in result.stderr
