"""Offset-set arithmetic of the audit (loglake.ops.coverage): table-driven, no broker."""

from __future__ import annotations

import numpy as np
import pytest

from loglake.ops.coverage import check_exactly_once, check_latest_state, describe_sample, sample


def lists(cov):
    return cov.checked, cov.missing.tolist(), cov.duplicated.tolist(), cov.unexpected.tolist()


@pytest.mark.parametrize("log, table, start, end, expected", [
    # every offset once
    (range(10), range(10), 0, 10, (10, [], [], [])),
    # a gap, a duplicate, an offset the log does not hold (7 is a transaction marker)
    ([0, 1, 2, 3, 4, 5, 6, 8, 9], [0, 1, 1, 3, 4, 5, 6, 7, 8, 9], 0, 10, (9, [2], [1], [7])),
    # non-contiguous log: offsets checked are what the log holds, not end - start
    ([0, 2, 4, 6], [0, 2, 4, 6], 0, 8, (4, [], [], [])),
    # rows outside [start, end) belong elsewhere and are ignored
    (range(20), list(range(5, 10)) + [0, 15, 15], 5, 10, (5, [], [], [])),
    # empty range, empty tables
    (range(5), [], 3, 3, (0, [], [], [])),
    ([], [], 0, 0, (0, [], [], [])),
    # everything missing; an offset three times is one duplicated offset
    (range(4), [], 0, 4, (4, [0, 1, 2, 3], [], [])),
    ([5], [5, 5, 5], 0, 10, (1, [], [5], [])),
    # unordered input
    ([3, 1, 2, 0], [2, 0, 3, 1], 0, 4, (4, [], [], [])),
])
def test_check_exactly_once(log, table, start, end, expected):
    assert lists(check_exactly_once(list(log), list(table), start, end)) == expected


def test_ok_only_without_findings():
    assert check_exactly_once([0, 1], [0, 1], 0, 2).ok
    assert not check_exactly_once([0, 1], [0], 0, 2).ok
    assert not check_exactly_once([0, 1], [0, 1, 1], 0, 2).ok
    assert not check_exactly_once([0], [0, 1], 0, 2).ok


# A changelog partition: offset → (key, tombstone). a: 0, 3 (newest); b: 1, then tombstone 4;
# c: 2 quarantined (say bad JSON), 5 valid and newest.
LOG = {0: ("a", False), 1: ("b", False), 2: ("c", False), 3: ("a", False), 4: ("b", True), 5: ("c", False)}


def state_check(quarantined, rows, start=0, end=6, log=LOG):
    offs = sorted(log)
    return lists(check_latest_state(offs, [log[o][0] for o in offs], [log[o][1] for o in offs], quarantined,
                                    [o for o, _k in rows], [k for _o, k in rows], start, end))


@pytest.mark.parametrize("quarantined, rows, expected", [
    # correct: a at 3, b deleted, c at 5; 2 quarantined; 0, 1 superseded, 4 a deletion
    ([2], [(3, "a"), (5, "c")], (6, [], [], [])),
    # a's row is gone: its newest offset 3 is missing
    ([2], [(5, "c")], (6, [3], [], [])),
    # a stale row for a (offset 0): 3 is missing and 0 is unexpected
    ([2], [(0, "a"), (5, "c")], (6, [3], [], [0])),
    # a deleted key still present
    ([2], [(3, "a"), (1, "b"), (5, "c")], (6, [], [], [1])),
    # a key held twice
    ([2], [(3, "a"), (3, "a"), (5, "c")], (6, [], [3], [])),
    # quarantined and also a row
    ([2, 5], [(3, "a"), (5, "c")], (6, [], [5], [])),
    # quarantine lost offset 2 but it is superseded by 5: accounted as superseded
    ([], [(3, "a"), (5, "c")], (6, [], [], [])),
    # a row at an offset the log does not hold
    ([2], [(3, "a"), (5, "c"), (9, "z")], (6, [], [], [])),       # 9 is outside [0, 6): ignored
    ([2], [(3, "a"), (5, "c"), (6, "z")], (6, [], [], [])),
    # a row whose key is not the log's key at that offset
    ([2], [(3, "x"), (5, "c")], (6, [3], [], [3])),
])
def test_check_latest_state(quarantined, rows, expected):
    assert state_check(quarantined, rows) == expected


def test_latest_state_newer_row_from_a_rebuild_past_the_watermark_supersedes():
    # The batch job rewrote the state up to offset 8 but had not yet recorded its range:
    # checking [0, 6), a's row at 8 supersedes 0 and 3.
    log = {**LOG, 8: ("a", False)}
    assert state_check([2], [(8, "a"), (5, "c")], log=log) == (6, [], [], [])


def test_latest_state_keyless_record_must_be_quarantined():
    log = {0: (None, True), 1: ("a", False)}
    assert state_check([], [(1, "a")], end=2, log=log) == (2, [0], [], [])
    assert state_check([0], [(1, "a")], end=2, log=log) == (2, [], [], [])


def test_samples_are_sorted_and_bounded():
    offs = np.array([9, 3, 7, 1, 5])
    assert sample(offs, 3) == [1, 3, 5]
    assert describe_sample(offs, 3) == "1, 3, 5, ... (5 in total)"
    assert describe_sample(offs, 5) == "1, 3, 5, 7, 9"
    assert describe_sample(np.array([], dtype=np.int64), 5) == ""
