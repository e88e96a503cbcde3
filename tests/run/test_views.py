"""``state()``'s transcript items are built through their slots (``threads.run.views``), not
the frozen ``__init__``: they must be the very values ``__init__`` makes, frozen and equal."""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest

from threads.clock import FakeClock
from threads.log.fold import reduce
from threads.run.views import TranscriptItem, TranscriptRole, state_of
from threads.testing.sample_log import SampleLog


def test_the_transcript_items_are_the_values_the_dataclass_makes() -> None:
    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    log.turn(text="more", reply="done")
    fold = reduce(log.header, log.events, now_ms=0)
    items = state_of(fold).transcript
    pairs = cast(list[tuple[TranscriptRole, str]], fold.transcript)
    made = tuple(TranscriptItem(role, event_id) for role, event_id in pairs)
    assert items == made
    assert [type(item) for item in items] == [TranscriptItem] * 4
    assert {hash(item) for item in items} == {hash(item) for item in made}
    assert [dataclasses.asdict(item) for item in items] == [
        {"role": role, "event_id": event_id} for role, event_id in fold.transcript
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        items[0].role = "assistant"  # type: ignore[misc]
