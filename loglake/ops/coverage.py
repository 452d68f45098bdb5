"""Offset-set arithmetic for the audit: pure functions over numpy arrays, no I/O.

The audit reads the offsets the log holds and the offsets the tables hold, then asks
these functions which log offsets are missing from the tables, which table offsets occur
more than once, and which table offsets the log does not hold. Only offsets inside the
checked range ``[start, end)`` count: rows outside it belong to another layer's range or
to a write that landed after the positions were read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class Coverage:
    """The outcome for one range: offsets the log holds there, and what went wrong."""

    checked: int
    missing: np.ndarray = field(default_factory=lambda: EMPTY)     # in the log, not in the tables
    duplicated: np.ndarray = field(default_factory=lambda: EMPTY)  # in the tables more than once
    unexpected: np.ndarray = field(default_factory=lambda: EMPTY)  # in the tables, not as the log says

    @property
    def ok(self) -> bool:
        return not (len(self.missing) or len(self.duplicated) or len(self.unexpected))


def as_offsets(values) -> np.ndarray:
    """Any sequence of offsets as an int64 array."""
    return np.asarray(values if values is not None else EMPTY, dtype=np.int64)


def in_range(offsets: np.ndarray, start: int, end: int) -> np.ndarray:
    return offsets[(offsets >= start) & (offsets < end)]


def check_exactly_once(log: Sequence[int], table: Sequence[int], start: int, end: int) -> Coverage:
    """Every log offset in ``[start, end)`` exactly once in ``table`` (the union of the tables'
    offsets, with repeats). ``log`` holds each retained offset once, in any order, with gaps."""
    held = np.unique(in_range(as_offsets(log), start, end))
    landed, counts = np.unique(in_range(as_offsets(table), start, end), return_counts=True)
    return Coverage(
        checked=len(held),
        missing=np.setdiff1d(held, landed, assume_unique=True),
        duplicated=landed[counts > 1],
        unexpected=np.setdiff1d(landed, held, assume_unique=True),
    )


def check_latest_state(log: Sequence[int], keys: Sequence[str | None], tombstone: Sequence[bool],
                       quarantined: Sequence[int], state_offsets: Sequence[int], state_keys: Sequence[str],
                       start: int, end: int) -> Coverage:
    """A changelog's batch part: every log offset in ``[start, end)`` accounted for exactly once.

    ``log``/``keys``/``tombstone`` describe the log's records (same order); ``quarantined``
    are the batch layer's quarantined offsets; ``state_offsets``/``state_keys`` the rows of
    the latest-state table for this partition (its key column). An offset is accounted for
    as exactly one of: quarantined; the row of its key (it must be the key's newest valid
    offset); superseded (a newer valid offset of the same key exists, a tombstone included,
    or the table already holds a newer row of the key from a rebuild past ``end``); or the
    newest change of its key is a tombstone and the key has no row.

    missing: a key's newest valid offset that is no tombstone and has no row.
    duplicated: offsets quarantined and also a row, or held twice; every row of a key held twice.
    unexpected: quarantined or row offsets the log does not hold; rows that are not their
    key's newest valid offset (stale, a deleted key still present, or a key the log's
    record at that offset does not carry).
    """
    log = as_offsets(log)
    tomb = np.asarray(tombstone, dtype=bool)
    inside = (log >= start) & (log < end)
    held = log[inside]
    held_keys = [k for k, i in zip(keys, inside) if i]
    held_tomb = tomb[inside]
    state = as_offsets(state_offsets)
    rows_in = in_range(state, start, end)
    q = in_range(as_offsets(quarantined), start, end)
    landed, counts = np.unique(np.concatenate([q, rows_in]), return_counts=True)
    duplicated = set(landed[counts > 1].tolist())
    unexpected = set(np.setdiff1d(landed, held).tolist())

    qset = set(q.tolist())
    key_at: dict[int, str | None] = {}
    newest: dict[str, int] = {}
    is_tomb: dict[int, bool] = {}
    for o, k, t in zip(held.tolist(), held_keys, held_tomb.tolist()):
        key_at[o] = k
        is_tomb[o] = t
        if o not in qset and k is not None and o > newest.get(k, -1):
            newest[k] = o

    rows_of: dict[str, list[int]] = {}
    for o, k in zip(state.tolist(), state_keys):
        rows_of.setdefault(k, []).append(o)
    for k, offs in rows_of.items():
        if len(offs) > 1:
            duplicated.update(offs)

    # A record that is neither quarantined nor carries a key cannot be accounted for.
    missing = {o for o, k in key_at.items() if k is None and o not in qset}
    for k, n in newest.items():
        rows = rows_of.get(k, [])
        newer_rebuild = any(o >= end for o in rows)
        if not is_tomb[n] and n not in rows and not newer_rebuild:
            missing.add(n)
    for k, offs in rows_of.items():
        for o in offs:
            if not start <= o < end or o in unexpected or o in duplicated:
                continue
            if key_at.get(o) != k or newest.get(k) != o or is_tomb.get(o, False):
                unexpected.add(o)
    return Coverage(checked=len(held), missing=_sorted(missing), duplicated=_sorted(duplicated),
                    unexpected=_sorted(unexpected))


def _sorted(values: set[int]) -> np.ndarray:
    return np.array(sorted(values), dtype=np.int64)


def sample(offsets: np.ndarray, n: int) -> list[int]:
    """The first ``n`` offsets (ascending), as plain ints."""
    return np.sort(as_offsets(offsets))[:max(n, 0)].tolist()


def describe_sample(offsets: np.ndarray, n: int) -> str:
    """``"3, 17, 42"``, or ``"3, 17, ... (120 in total)"`` when there are more than ``n``."""
    shown = ", ".join(str(o) for o in sample(offsets, n))
    more = len(offsets) - min(len(offsets), n)
    return f"{shown}, ... ({len(offsets)} in total)" if more > 0 else shown
