"""The long chat of ``bench/long_chat.py`` (issue 32 item 4), small: 60 turns against a model
with an 8k-token window (the ``cache_breaks`` rule needs a drop of 2,000 cached tokens, which a
smaller window never holds). Every turn completes, the thread compacts, and ``cache_breaks``
names the turn request after each compaction (never a summarizer's). Both stores."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from threads import Principal, open_thread
from threads.store.protocol import Store

BENCH = Path(__file__).resolve().parents[2] / "bench" / "long_chat.py"


def bench() -> ModuleType:
    if str(BENCH.parent) not in sys.path:  # it imports its neighbour bench/storage.py
        sys.path.append(str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("long_chat", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("long_chat", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
async def test_a_long_chat_completes_every_turn_and_names_its_cache_breaks(store: Store) -> None:
    figures = await bench().long_chat(store, 60, 8192)
    assert figures.completed == 60
    assert figures.exhausted == 0
    assert figures.compactions >= 1
    assert figures.failed == 0
    thread = await open_thread(store, figures.thread_id, principal=Principal("api", "local",
                                                                            "bench"))
    log = await thread.timeline()
    turn_requests = [e for e in log if e.type == "model_request"
                     and e.data.get("purpose") != "compaction"]
    after_compaction = {
        next(r.event_id for r in turn_requests if r.seq > e.seq)
        for e in log if e.type == "compacted"
    }
    named = set(figures.break_requests)
    assert after_compaction <= named  # each compaction broke the cache, and it says so
    assert not named & figures.compaction_requests  # a summarizer's request is never judged
    assert set(figures.breaks) <= {"compacted", "context_edited"}
    assert (await thread.fold()).projections()["cache_breaks"] == await thread.cache_breaks()
    assert (await thread.replay()).ok
