"""What a batch run will recompute (``Plan``), and the pure rules that make one.

The rules (``parse_range_spec``, ``validate_ranges``, ``plan_from_watermarks``,
``parse_timestamp``) take the log's state as values and are covered by table-driven tests
without a broker; ``loglake.batch.planning`` reads the log and the ledger and applies them.
Every invalid input is rejected, before any Spark job, with an error naming the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping, Sequence

from loglake.core.errors import DataLossError, OffsetError, ParamError
from loglake.core.offsets import OffsetRange

_RANGE_SPEC = re.compile(r"^\s*(-?\d+)\s*:\s*(-?\d+)\s*-\s*(-?\d+)\s*$")

LogBounds = Mapping[int, tuple[int, int]]  # partition → (earliest retained offset, end offset)


@dataclass(frozen=True)
class Plan:
    """What a batch run will recompute: a dataset and one offset range per partition."""

    dataset: str
    ranges: tuple[OffsetRange, ...]
    kind: str = "batch"  # batch | backfill | rebuild
    notes: tuple[str, ...] = field(default=())

    @property
    def offsets(self) -> int:
        return sum(r.size for r in self.ranges)

    @property
    def empty(self) -> bool:
        return self.offsets == 0

    def to_json(self) -> str:
        return json.dumps({"dataset": self.dataset, "kind": self.kind, "notes": list(self.notes),
                           "ranges": [r.to_dict() for r in self.ranges]}, sort_keys=True)

    @classmethod
    def from_json(cls, s: str | Mapping) -> "Plan":
        d = json.loads(s) if isinstance(s, str) else s
        return cls(d["dataset"], tuple(OffsetRange.from_dict(r) for r in d["ranges"]), d.get("kind", "batch"),
                   tuple(d.get("notes", ())))

    def describe(self) -> str:
        lines = [f"{self.kind} plan for {self.dataset}: {len(self.ranges)} range(s), {self.offsets} offset(s)"]
        lines += [f"  {r.topic}[{r.partition}]  [{r.start}, {r.end})  {r.size} offset(s)" for r in self.ranges]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def parse_range_spec(spec: str, index: int = 0) -> tuple[int, int, int]:
    """``"P:START-END"`` → (partition, start, end); the error names ``ranges[index]``."""
    m = _RANGE_SPEC.match(str(spec))
    if not m:
        raise ParamError(f"ranges[{index}]", f"{spec!r} is not of the form PARTITION:START-END (e.g. 0:100-200)")
    p, s, e = (int(g) for g in m.groups())
    return p, s, e


def validate_ranges(topic: str, specs: Sequence[tuple[int, int, int]], log: LogBounds) -> list[OffsetRange]:
    """Check requested ranges against the log; the first problem raises, naming the field.

    A range must name an existing partition, have 0 <= start <= end, end within the log end,
    and start at or after the earliest retained offset (else: data loss, never skipped).
    Two ranges of one partition must not overlap.
    """
    if not specs:
        raise ParamError("ranges", "at least one range is required")
    out: list[OffsetRange] = []
    for i, (p, start, end) in enumerate(specs):
        where = f"ranges[{i}]"
        if p not in log:
            raise ParamError(f"{where}.partition", f"partition {p} does not exist in {topic} "
                             f"(partitions 0..{max(log) if log else -1})")
        if start < 0:
            raise ParamError(f"{where}.start", f"must be >= 0, found {start}")
        if end < 0:
            raise ParamError(f"{where}.end", f"must be >= 0, found {end}")
        if start > end:
            raise ParamError(f"{where}.start", f"start ({start}) is after end ({end}); a range is [start, end)")
        earliest, log_end = log[p]
        if end > log_end:
            raise ParamError(f"{where}.end", f"end ({end}) is beyond the log end of {topic}[{p}] ({log_end})")
        if start < earliest and end > start:
            raise DataLossError(topic, p, start, min(earliest, end),
                                f"earliest retained offset is {earliest}; backfill from {earliest}")
        out.append(OffsetRange(topic, p, start, end))
    by_partition: dict[int, list[OffsetRange]] = {}
    for r in out:
        by_partition.setdefault(r.partition, []).append(r)
    for p, rs in by_partition.items():
        rs.sort(key=lambda r: r.start)
        for a, b in zip(rs, rs[1:]):
            if b.start < a.end:
                raise ParamError("ranges", f"ranges of partition {p} overlap: {a} and {b}")
    return out


def plan_from_watermarks(topic: str, watermarks: Mapping[int, int], log: LogBounds) -> list[OffsetRange]:
    """The scheduled batch: per partition, ``[W_p, end)``; W_p defaults to the earliest offset.

    A watermark below the earliest retained offset means offsets were deleted before batch
    covered them: that is data loss, raised, never skipped.
    """
    ranges = []
    for p, (earliest, end) in sorted(log.items()):
        start = watermarks.get(p, earliest)
        if start < earliest:
            raise DataLossError(topic, p, start, earliest,
                                "retention deleted them before the batch layer read them; the watermark stays "
                                "there until an operator records the loss: loglake accept-loss DATASET "
                                f"--partition {p} --reason TEXT (or the loglake_accept_loss DAG)")
        if start > end:
            raise OffsetError(f"watermark {start} of {topic}[{p}] is beyond the log end {end}: "
                              "was the topic recreated?", topic=topic, partition=p)
        ranges.append(OffsetRange(topic, p, start, end))
    return ranges


def parse_timestamp(value: str, field_name: str) -> int:
    """ISO-8601 (``2026-11-23T09:00:00Z``; no zone means UTC) → epoch milliseconds."""
    try:
        ts = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ParamError(field_name, f"{value!r} is not an ISO-8601 timestamp such as 2026-11-23T09:00:00Z") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return int(ts.timestamp() * 1000)
