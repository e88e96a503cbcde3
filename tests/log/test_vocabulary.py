"""The log's vocabulary as types (``threads.log.vocabulary``, ``threads.log.event_types``): made
from the vendored schema and kept in step with it, and strict enough that mypy refuses a
misspelled event type or a data field the type doesn't have."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from mypy_support import strict_mypy
from threads.clock import FakeClock
from threads.errors import LogError
from threads.log.event_types import EVENT_TYPES, EventType
from threads.log.lines import Draft
from threads.log.vocabulary import data_of, draft
from threads.testing.sample_log import SampleLog

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "src" / "threads" / "log" / "events.v1.schema.json"


def _generator() -> Any:
    path = ROOT / "tools" / "vocabulary.py"
    spec = importlib.util.spec_from_file_location("vocabulary_tool", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_generated_modules_are_those_of_the_vendored_schema() -> None:
    """What ``tools/sync_schema.py`` writes is a pure function of the vendored schema: a schema
    change without regenerating fails here (and ``sync_schema.py --check`` in CI)."""
    tool = _generator()
    schema = tool.with_extension(json.loads(SCHEMA.read_text(encoding="utf-8")))
    log = ROOT / "src" / "threads" / "log"
    assert (log / "vocabulary.py").read_text(encoding="utf-8") == tool.generate(schema)
    assert (log / "event_types.py").read_text(encoding="utf-8") == tool.generate_types(schema)


def test_event_type_lists_every_type_the_reader_knows() -> None:
    """The vendored schema's types and the declared extension's (``answer_rejected``, ...)."""
    schema = _generator().with_extension(json.loads(SCHEMA.read_text(encoding="utf-8")))
    known = set(schema["$defs"]["KnownTag"]["properties"]["type"]["enum"])
    assert set(get_args(EventType)) == EVENT_TYPES == known
    assert {"answer_rejected", "tools_loaded", "user_input"} <= EVENT_TYPES


def test_draft_builds_the_writer_s_triple_and_data_of_reads_it_back() -> None:
    built = draft("user_input", {"source": "api", "text": "hi"}, {"kind": "user"})
    assert built == Draft("user_input", {"source": "api", "text": "hi"}, {"kind": "user"})
    log = SampleLog(FakeClock())
    event = log.add(built.type, dict(built.data), dict(built.actor))
    read = data_of(event, "user_input")
    assert read["source"] == "api"
    assert read.get("text") == "hi"


def test_data_of_refuses_an_event_of_another_type() -> None:
    log = SampleLog(FakeClock())
    event = log.add("user_input", {"source": "api", "text": "hi"}, {"kind": "user"})
    with pytest.raises(LogError) as refused:
        data_of(event, "tool_call")
    assert refused.value.code == "invalid_transition"
    assert refused.value.seq == event.seq
    assert "expected a tool_call event, found user_input" in refused.value.message


MISSPELLED = '''
from threads.log.lines import Event
from threads.log.vocabulary import data_of, draft

def build() -> None:
    draft("user_inptu", {"source": "api"}, {"kind": "user"})
    draft("user_input", {"source": "carrier_pigeon"}, {"kind": "user"})
    draft("user_input", {"source": "api", "txt": "hi"}, {"kind": "user"})
    draft("tool_call", {"call_id": "c1", "name": "t", "input": {}}, {"kind": "model"})

def read(event: Event) -> None:
    misspelled = event.type == "tool_cal"
    name: int = data_of(event, "tool_call")["name"]
'''


def test_mypy_refuses_a_misspelled_type_a_wrong_value_and_a_missing_or_unknown_field(
    tmp_path: Path,
) -> None:
    """The point of the vocabulary: each line of ``MISSPELLED`` is a mypy error (an unknown event
    type, a value outside an enum, a field the type lacks, a required field left out, a
    comparison with a type no event has, a field read as the wrong type)."""
    status, out = strict_mypy(tmp_path, MISSPELLED, "misspelled")
    assert status == 1, out
    lines = {int(line.split(":")[1]) for line in out if ": error:" in line}
    assert lines == {6, 7, 8, 9, 12, 13}, out
