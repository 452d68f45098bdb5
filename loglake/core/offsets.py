"""Offsets are values: a half-open range ``[start, end)`` of one topic partition."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping

from loglake.core.errors import OffsetError


def _check_int(name: str, value: object, *, topic: str, partition: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OffsetError(f"{name} must be an integer, found {value!r}", topic=topic)
    if value < 0:
        raise OffsetError(f"{name} must be >= 0, found {value} ({topic}[{partition}])", topic=topic)
    return value


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of ``topic`` partition ``partition``; validated on construction."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise OffsetError(f"topic must be a non-empty string, found {self.topic!r}")
        _check_int("partition", self.partition, topic=self.topic, partition=self.partition)
        _check_int("start", self.start, topic=self.topic, partition=self.partition)
        _check_int("end", self.end, topic=self.topic, partition=self.partition)
        if self.start > self.end:
            raise OffsetError(
                f"start ({self.start}) is after end ({self.end}) for {self.topic}[{self.partition}]; "
                "a range is [start, end) with start <= end",
                topic=self.topic, partition=self.partition)

    @property
    def size(self) -> int:
        """Number of offsets in the range (an upper bound on records: offsets may have gaps)."""
        return self.end - self.start

    def __contains__(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping) -> "OffsetRange":
        missing = {"topic", "partition", "start", "end"} - set(d)
        if missing:
            raise OffsetError(f"offset range is missing {sorted(missing)}: {dict(d)!r}")
        return cls(d["topic"], d["partition"], d["start"], d["end"])

    @classmethod
    def from_json(cls, s: str) -> "OffsetRange":
        try:
            return cls.from_dict(json.loads(s))
        except json.JSONDecodeError as e:
            raise OffsetError(f"offset range is not valid JSON: {e}") from None

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]:{self.start}-{self.end}"


def spark_offsets_json(topic: str, offsets: Mapping[int, int]) -> str:
    """Spark Kafka source offsets JSON: ``{"topic": {"0": 12, "1": 40}}``."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def parse_spark_offsets(s: str | Mapping) -> dict[str, dict[int, int]]:
    """Parse Spark's offsets JSON (as found in streaming progress) to ``{topic: {p: offset}}``."""
    data = json.loads(s) if isinstance(s, str) else s
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in (data or {}).items()}


def ranges_for(topic: str, starts: Mapping[int, int], ends: Mapping[int, int]) -> list[OffsetRange]:
    """One range per partition from ``starts`` to ``ends`` (both keyed by partition)."""
    if set(starts) != set(ends):
        raise OffsetError(f"start and end partitions differ for {topic}: {sorted(starts)} vs {sorted(ends)}",
                          topic=topic)
    return [OffsetRange(topic, p, starts[p], ends[p]) for p in sorted(starts)]


def total_size(ranges: Iterable[OffsetRange]) -> int:
    return sum(r.size for r in ranges)
