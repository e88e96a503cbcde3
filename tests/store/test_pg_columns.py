"""The group statement's columns (``threads.store.postgres.columns``) as the server reads them:
every kind, with NULLs, empty, unicode and the integer limits, read back by Postgres itself
exactly as they were given."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postgres_support import URL, needs_postgres
from threads.store.postgres.columns import ByteaColumn, Column, Int4Column, Int8Column, TextColumn

TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
INT8 = st.integers(-(2**63), 2**63 - 1)
INT4 = st.integers(-(2**31), 2**31 - 1)
KINDS: list[tuple[type[Column], str, Any]] = [
    (TextColumn, "text", TEXT),
    (ByteaColumn, "bytea", st.binary(max_size=64)),
    (Int8Column, "bigint", INT8),
    (Int4Column, "integer", INT4),
]


@pytest.fixture(scope="module")
def conn() -> Any:
    with psycopg.connect(URL, autocommit=True) as connection:
        yield connection


def _round_trip(conn: Any, kind: type[Column], cast: str, values: list[Any]) -> list[Any]:
    row = conn.execute(f"SELECT %b::{cast}[]", (kind(values),)).fetchone()
    assert row is not None
    return [bytes(v) if isinstance(v, memoryview) else v for v in row[0]]


@needs_postgres
@pytest.mark.parametrize(("kind", "cast", "values"), KINDS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_column_reads_back_as_given(
    conn: Any, kind: type[Column], cast: str, values: Any, data: st.DataObject
) -> None:
    given_values = data.draw(st.lists(st.none() | values, max_size=6))
    assert _round_trip(conn, kind, cast, given_values) == given_values


@needs_postgres
def test_unnest_takes_columns_of_every_kind_back_apart(conn: Any) -> None:
    rows = conn.execute(
        "SELECT * FROM unnest(%b::text[], %b::bigint[], %b::integer[], %b::bytea[])",
        (TextColumn(["é", None]), Int8Column([2**53 + 1, -1]), Int4Column([7, None]),
         ByteaColumn([b"\x00line", b""])),
    ).fetchall()
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows] == [
        ("é", 2**53 + 1, 7, b"\x00line"), (None, -1, None, b""),
    ]
