"""Offsets are values: validated on construction, JSON round-trip, table-driven."""

from __future__ import annotations

import pytest

from loglake.core.errors import OffsetError
from loglake.core.offsets import OffsetRange, parse_spark_offsets, ranges_for, spark_offsets_json, total_size


@pytest.mark.parametrize("start,end,size", [(0, 0, 0), (0, 10, 10), (5, 6, 1), (2**40, 2**40 + 3, 3)])
def test_size(start, end, size):
    r = OffsetRange("t", 0, start, end)
    assert r.size == size
    assert OffsetRange.from_json(r.to_json()) == r


@pytest.mark.parametrize("args,fragment", [
    (("t", 0, 5, 4), "start (5) is after end (4) for t[0]"),
    (("t", 0, -1, 4), "start must be >= 0, found -1"),
    (("t", -2, 0, 4), "partition must be >= 0"),
    (("t", 0, 0, -4), "end must be >= 0"),
    (("t", 0, 1.5, 4), "start must be an integer, found 1.5"),
    (("t", 0, True, 4), "start must be an integer, found True"),
    (("", 0, 0, 4), "topic must be a non-empty string"),
])
def test_invalid_ranges_are_rejected_with_reason(args, fragment):
    with pytest.raises(OffsetError) as e:
        OffsetRange(*args)
    assert fragment in str(e.value)


def test_contains_is_half_open():
    r = OffsetRange("t", 1, 10, 12)
    assert 10 in r and 11 in r and 12 not in r and 9 not in r


def test_from_dict_names_missing_keys():
    with pytest.raises(OffsetError, match=r"missing \['end'\]"):
        OffsetRange.from_dict({"topic": "t", "partition": 0, "start": 1})
    with pytest.raises(OffsetError, match="not valid JSON"):
        OffsetRange.from_json("{")


def test_spark_offsets_round_trip():
    s = spark_offsets_json("jv", {1: 40, 0: 12})
    assert s == '{"jv": {"0": 12, "1": 40}}'
    assert parse_spark_offsets(s) == {"jv": {0: 12, 1: 40}}
    assert parse_spark_offsets(None or "{}") == {}


def test_ranges_for_and_total():
    rs = ranges_for("t", {0: 0, 1: 5}, {0: 3, 1: 9})
    assert rs == [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 5, 9)]
    assert total_size(rs) == 7
    with pytest.raises(OffsetError, match="partitions differ"):
        ranges_for("t", {0: 0}, {1: 3})
    assert sorted([OffsetRange("t", 1, 0, 1), OffsetRange("t", 0, 5, 6)])[0].partition == 0
