"""Offset-range planning and validation, and watermarks from a ledger: pure, no broker."""

from __future__ import annotations

import pytest

from loglake.core.errors import DataLossError, OffsetError, ParamError
from loglake.ledger.ranges import compute_watermarks
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan, parse_range_spec, parse_timestamp, plan_from_watermarks, validate_ranges

LOG = {0: (0, 100), 1: (50, 80), 2: (0, 0)}  # partition → (earliest retained, end)


@pytest.mark.parametrize("spec,expected", [("0:10-20", (0, 10, 20)), (" 2 : 0 - 0 ", (2, 0, 0)), ("1:5-5", (1, 5, 5))])
def test_parse_range_spec(spec, expected):
    assert parse_range_spec(spec) == expected


@pytest.mark.parametrize("spec", ["0-10", "a:1-2", "0:1", "", "0:1-2-3"])
def test_parse_range_spec_rejects(spec):
    with pytest.raises(ParamError) as e:
        parse_range_spec(spec, 3)
    assert e.value.field == "ranges[3]" and "PARTITION:START-END" in str(e.value)


VALID = [
    ([(0, 0, 100)], [OffsetRange("t", 0, 0, 100)]),
    ([(0, 10, 20), (0, 20, 30), (1, 50, 80)], [OffsetRange("t", 0, 10, 20), OffsetRange("t", 0, 20, 30),
                                               OffsetRange("t", 1, 50, 80)]),
    ([(2, 0, 0)], [OffsetRange("t", 2, 0, 0)]),
    ([(1, 10, 10)], [OffsetRange("t", 1, 10, 10)]),  # empty range below earliest reads nothing: no loss
]


@pytest.mark.parametrize("specs,expected", VALID)
def test_validate_ranges_accepts(specs, expected):
    assert validate_ranges("t", specs, LOG) == expected


INVALID = [
    ([(5, 0, 1)], "ranges[0].partition", "partition 5 does not exist in t (partitions 0..2)"),
    ([(0, 0, 1), (0, -1, 4)], "ranges[1].start", "must be >= 0, found -1"),
    ([(0, 0, -1)], "ranges[0].end", "must be >= 0"),
    ([(0, 30, 20)], "ranges[0].start", "start (30) is after end (20)"),
    ([(0, 0, 101)], "ranges[0].end", "beyond the log end of t[0] (100)"),
    ([(0, 0, 50), (0, 40, 60)], "ranges", "overlap"),
    ([], "ranges", "at least one range"),
]


@pytest.mark.parametrize("specs,field,fragment", INVALID)
def test_validate_ranges_rejects_naming_the_field(specs, field, fragment):
    with pytest.raises(ParamError) as e:
        validate_ranges("t", specs, LOG)
    assert e.value.field == field and fragment in str(e.value), str(e.value)


def test_range_before_earliest_is_data_loss():
    with pytest.raises(DataLossError) as e:
        validate_ranges("t", [(1, 10, 60)], LOG)
    assert (e.value.topic, e.value.partition, e.value.missing_start, e.value.missing_end) == ("t", 1, 10, 50)
    assert "t[1] offsets [10, 50)" in str(e.value)


@pytest.mark.parametrize("marks,expected", [
    ({}, [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 50, 80), OffsetRange("t", 2, 0, 0)]),
    ({0: 100, 1: 60, 2: 0}, [OffsetRange("t", 0, 100, 100), OffsetRange("t", 1, 60, 80), OffsetRange("t", 2, 0, 0)]),
])
def test_plan_from_watermarks(marks, expected):
    assert plan_from_watermarks("t", marks, LOG) == expected


def test_plan_from_watermark_below_earliest_is_data_loss():
    with pytest.raises(DataLossError, match=r"t\[1\] offsets \[20, 50\)"):
        plan_from_watermarks("t", {1: 20}, LOG)


def test_watermark_beyond_end_is_an_error():
    with pytest.raises(OffsetError, match="beyond the log end"):
        plan_from_watermarks("t", {0: 120}, LOG)


def row(p, s, e):
    return {"partition": p, "start": s, "end": e}


@pytest.mark.parametrize("ledger,expected", [
    ([], {}),
    ([row(0, 0, 10)], {0: 10}),
    ([row(0, 0, 10), row(0, 10, 20)], {0: 20}),                     # contiguous
    ([row(0, 10, 20), row(0, 0, 10)], {0: 20}),                     # order does not matter
    ([row(0, 0, 10), row(0, 20, 30)], {0: 10}),                     # a gap stops the watermark
    ([row(0, 0, 10), row(0, 20, 30), row(0, 10, 20)], {0: 30}),     # a backfill closes the gap
    ([row(0, 0, 15), row(0, 5, 12), row(0, 10, 25)], {0: 25}),      # overlaps merge
    ([row(0, 0, 10), row(0, 0, 10)], {0: 10}),                      # a rerun changes nothing
    ([row(0, 5, 5), row(0, 0, 3)], {0: 3}),                         # empty ranges are ignored
    ([row(1, 50, 60), row(0, 0, 1)], {0: 1, 1: 60}),                # starts where coverage starts
])
def test_compute_watermarks(ledger, expected):
    assert compute_watermarks(ledger) == expected


@pytest.mark.parametrize("ledger,earliest,expected", [
    ([row(3, 10, 100)], {3: 0}, {}),                    # a backfill above the earliest offset publishes nothing
    ([row(3, 10, 100), row(3, 0, 10)], {3: 0}, {3: 100}),  # once [0, 10) is covered, it does
    ([row(0, 0, 100)], {0: 50}, {0: 100}),              # retention moved past the start: still covered
    ([row(0, 0, 30)], {0: 50}, {0: 30}),                # below the earliest offset: kept, planning reports loss
])
def test_compute_watermarks_from_the_earliest_offset(ledger, earliest, expected):
    assert compute_watermarks(ledger, earliest) == expected


def test_plan_round_trip_and_describe():
    plan = Plan("job_views", (OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 3, 3)), "backfill", ("n",))
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.offsets == 5 and not plan.empty
    assert "backfill plan for job_views: 2 range(s), 5 offset(s)" in plan.describe()
    assert Plan("x", ()).empty


def test_parse_timestamp():
    assert parse_timestamp("1970-01-01T00:00:01Z", "from_ts") == 1000
    assert parse_timestamp("1970-01-01T00:00:01", "from_ts") == 1000  # no zone: UTC
    with pytest.raises(ParamError) as e:
        parse_timestamp("yesterday", "to_ts")
    assert e.value.field == "to_ts"


def test_only_published_ranges_advance_the_watermark():
    ledger = [{"partition": 0, "start": 0, "end": 10, "state": "published"},
              {"partition": 0, "start": 10, "end": 20, "state": "written"},   # awaiting its quality gate
              {"partition": 1, "start": 0, "end": 5, "state": "written"},
              {"partition": 2, "start": 0, "end": 7}]                          # from before the gate: published
    assert compute_watermarks(ledger, {0: 0, 1: 0, 2: 0}) == {0: 10, 2: 7}
    ledger.append({"partition": 0, "start": 10, "end": 20, "state": "published"})
    assert compute_watermarks(ledger, {0: 0, 1: 0, 2: 0}) == {0: 20, 2: 7}


def test_published_coverage_leaves_out_written_lost_and_the_runs_own_rows():
    from loglake.ledger.ranges import fresh_from, published_spans, uncovered

    ledger = [{"partition": 0, "start": 0, "end": 10, "state": "published", "run_id": "a"},
              {"partition": 0, "start": 5, "end": 20, "state": None, "run_id": "old"},  # from before the gate
              {"partition": 0, "start": 20, "end": 30, "state": "written", "run_id": "b"},
              {"partition": 0, "start": 30, "end": 40, "state": "lost", "run_id": None},
              {"partition": 0, "start": 50, "end": 60, "state": "published", "run_id": "c"},
              {"partition": 1, "start": 0, "end": 5, "state": "published", "run_id": "c"}]
    assert published_spans(ledger) == {0: [(0, 20), (50, 60)], 1: [(0, 5)]}
    assert published_spans(ledger, exclude_run="c") == {0: [(0, 20)]}
    spans = published_spans(ledger)[0]
    assert uncovered(spans, 0, 20) == [] and uncovered(spans, 15, 70) == [(20, 50), (60, 70)]
    assert uncovered(spans, 20, 50) == [(20, 50)] and uncovered([], 3, 7) == [(3, 7)]
    assert fresh_from(spans, 0, 20) == 20  # all published: nothing fresh
    assert fresh_from(spans, 10, 45) == 20 and fresh_from(spans, 20, 45) == 20  # one tail
    assert fresh_from(spans, 0, 70) is None  # a gap below a published span: not one tail
    assert fresh_from([], 7, 9) == 7
