"""What a render hands out without copying: its pieces (``threads.log.request_bytes``) join to
the rendered bytes, their tail and added bytes are slices of those, and a render that extends
the one before says so (one that can't, doesn't); its lines (``threads.log.snapshot``) read and
compare as the list they were when rendered, though the renderer's list grew since."""

from __future__ import annotations

import random

import pytest

from threads.clock import FakeClock
from threads.log.hashing import sha256_hex
from threads.log.render import RenderCache, render
from threads.log.request_bytes import Extends, RequestBytes
from threads.log.snapshot import Snapshot
from threads.testing.sample_log import SampleLog


def test_pieces_join_slice_and_take_their_tail_as_the_whole_bytes_would() -> None:
    rng = random.Random(15)
    for _ in range(200):
        parts = [bytes([97 + n % 26]) * rng.randrange(0, 40) for n in range(rng.randrange(0, 12))]
        parts.append(b"later")  # a shared list grows past the request: not part of it
        count = len(parts) - 1
        base_count = rng.randrange(0, count + 1)
        whole, base = b"".join(parts[:count]), b"".join(parts[:base_count])
        starts = [sum(map(len, parts[:n])) for n in range(len(parts))]
        body = RequestBytes(parts, starts, count, len(whole), sha256_hex(whole),
                            Extends(sha256_hex(base), len(base), base_count))
        assert bytes(body) == whole
        assert len(body) == len(whole)
        assert body.added() == whole[len(base):]
        for limit in (0, 1, 7, 39, 40, 1000):
            assert body.last(limit) == whole[len(whole) - min(limit, len(whole)):]


def test_a_render_extends_the_one_before_it_while_the_lines_stay_in_order() -> None:
    log = SampleLog(FakeClock())
    started = log.started().data
    cache = RenderCache()
    first = render(started, log.events, cache=cache).body
    assert first.base is None
    previous, rendered = first, [(first, bytes(first))]
    for turn in range(5):
        log.turn(text=f"question {turn}")
        body = render(started, log.events, cache=cache).body
        assert body.base == Extends(previous.sha256, previous.size, previous.count)
        whole = bytes(body)
        assert whole.startswith(bytes(previous))
        assert body.added() == whole[previous.size:]
        assert (body.size, body.sha256) == (len(whole), sha256_hex(whole))
        previous = body
        rendered.append((body, whole))
    for body, whole in rendered:  # the list they share grew since: each still joins the same
        assert bytes(body) == whole
    assert render(started, log.events).body.base is None  # no cache: nothing to extend


def test_a_snapshot_reads_as_the_list_was_when_taken() -> None:
    items = list(range(6))
    view = Snapshot(items)
    items += [6, 7]  # the list grows after: not part of the view
    was = list(range(6))
    assert len(view) == 6
    assert list(view) == was
    assert view == was
    assert was == view
    assert view != was[:5]
    assert view != [*was, 6]
    for index in range(-6, 6):
        assert view[index] == was[index]
    for cut in (slice(2, None), slice(None, -1), slice(None, None, -1), slice(1, 9, 2),
                slice(-3, None), slice(4, 2)):
        assert view[cut] == was[cut]
    for outside in (6, -7):
        with pytest.raises(IndexError):
            view[outside]
    assert 5 in view
    assert 6 not in view


def test_a_renders_lines_are_those_of_the_log_it_rendered() -> None:
    log = SampleLog(FakeClock())
    started = log.started().data
    cache = RenderCache()
    log.turn(text="first")
    earlier = render(started, log.events, cache=cache)
    lines = list(earlier.messages)
    log.turn(text="second")
    later = render(started, log.events, cache=cache)
    assert earlier.messages == lines  # the renderer's list grew, the earlier view did not
    assert later.messages == render(started, log.events).messages
    assert len(later.messages) == len(lines) + 2
