"""SQL predicates over the provenance columns, shared by the jobs that select offsets.

Pure strings (no Spark): the batch layer replaces exactly ``range_predicate(ranges)``,
the quality gate validates those rows, the serving view splits the layers at
``below_watermark(W)`` and maintenance expires exactly the speed rows the view leaves out.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from loglake.core.offsets import OffsetRange


def range_predicate(ranges: Sequence[OffsetRange]) -> str:
    """The rows whose offset lies in one of ``ranges`` (per partition, ``[start, end)``)."""
    return " OR ".join(f"(_partition = {r.partition} AND _offset >= {r.start} AND _offset < {r.end})"
                       for r in ranges)


def below_watermark(watermarks: Mapping[int, int]) -> str:
    """The rows whose offset is below their partition's batch watermark W_p."""
    if not watermarks:
        return "false"
    return " OR ".join(f"(_partition = {p} AND _offset < {w})" for p, w in sorted(watermarks.items()))
