"""The run's judge of ``final_output`` with the digest's evaluator, on both stores: a candidate that
breaks only a ``format`` is rejected and the model asked again (the reader then reads the log);
the turn has at most ``output_retries`` failed candidates (0 counts as 1) and the model is never
called once more; a model whose schema is outside the dialect is refused at setup."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from pydantic import BaseModel

from threads import Completed, ConfigError, Failed, agent
from threads.log.fold import Fold
from threads.log.lines import Event
from threads.log.verify import verify_export
from threads.store.protocol import Store
from threads.store.transfer import export_branch
from threads.testing import call, say, scripted_model, use


class Meeting(BaseModel):
    starts: datetime


async def reread(store: Store, thread_id: str) -> None:
    """Export the thread and read it again from its bytes, every reader rule applied."""
    branch = await store.root_branch(thread_id)
    fold = Fold()
    verify_export(await export_branch(store, branch.branch_id), apply=fold.apply,
                  on_header=fold.header)
    assert fold.last_seq == branch.head_seq


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


async def test_a_candidate_breaking_only_its_format_is_asked_again(store: Store) -> None:
    model = scripted_model([
        use(call("final_output", "c1", starts="2026-12-03T10:00:00")),  # no offset
        use(call("final_output", "c2", starts="2026-12-03T10:00:00+01:00")),
    ])
    bot = agent(name="t", model=model, output=Meeting)
    result = await bot.run("When?", store=store)
    assert isinstance(result, Completed)
    assert result.output.starts.utcoffset() == timedelta(hours=1)
    events = await result.thread.timeline()
    rejected, accepted = of_type(events, "output_validated")
    assert (rejected.data["outcome"], rejected.data["errors"]) == (
        "rejected", [{"path": "/starts", "message": "is not a valid date-time"}])
    assert accepted.data["value"] == {"starts": "2026-12-03T10:00:00+01:00"}
    assert len(model.requests) == 2
    await reread(store, result.thread.id)  # the reader reads what the run wrote


@pytest.mark.parametrize("retries", [0, 1, 2, 3])
async def test_the_turn_stops_at_exactly_output_retries_failed_candidates(
    store: Store, retries: int
) -> None:
    bad = [use(call("final_output", f"c{i}", starts="soon")) if i % 2 else say("plain")
           for i in range(6)]
    model = scripted_model(bad)
    bot = agent(name="t", model=model, output=Meeting, output_retries=retries)
    result = await bot.run("When?", store=store)
    assert isinstance(result, Failed)
    assert result.error.code == "output_invalid"
    assert len(model.requests) == max(1, retries)  # the bound-th failure is the last call
    events = await result.thread.timeline()
    failures = [e for e in events if e.type == "injected" or (
        e.type == "output_validated" and e.data["outcome"] == "rejected")]
    assert len(failures) == max(1, retries)
    assert of_type(events, "turn_completed")[-1].data == {"reason": "output_invalid"}
    # the failure reaching the bound is recorded in the same batch as the turn's end
    assert events[-1].type == "turn_completed"
    await reread(store, result.thread.id)


class Spans(BaseModel):
    gap: timedelta


class Tags(BaseModel):
    tags: set[str]


@pytest.mark.parametrize(("output", "keyword"), [(Spans, "format"), (Tags, "uniqueItems")])
def test_a_schema_outside_the_dialect_is_refused_at_setup(
    output: type[BaseModel], keyword: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        agent(name="t", model=scripted_model([]), output=output)
    assert refused.value.code == "invalid_config"
    assert keyword in refused.value.message


@pytest.mark.parametrize("retries", [-1, 2**53, True, 1.0])
def test_output_retries_must_be_a_safe_integer(retries: object) -> None:
    with pytest.raises(ConfigError) as refused:
        agent(name="t", model=scripted_model([]), output=Meeting,
              output_retries=retries)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_config"
