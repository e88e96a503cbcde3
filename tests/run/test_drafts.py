"""``threads.run.drafts``' names for the schema's inline enums stay the generated fields'."""

from __future__ import annotations

from typing import get_args, get_type_hints

from threads.log import vocabulary
from threads.run.drafts import InputSource, ResultOrigin


def test_result_origin_is_the_schemas() -> None:
    hints = get_type_hints(vocabulary.ToolResultData)
    assert set(get_args(ResultOrigin)) == set(get_args(hints["origin"]))


def test_input_source_is_the_schemas() -> None:
    hints = get_type_hints(vocabulary.UserInputData)
    assert set(get_args(InputSource)) == set(get_args(hints["source"]))
