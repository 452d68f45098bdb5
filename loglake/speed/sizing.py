"""The speed stream's micro-batch cap, sized by bytes at each stream start.

Spark's Kafka source bounds a micro-batch by offsets only (``maxOffsetsPerTrigger``): a cap of
100,000 is 15 MB of 150-byte events or 1 GB of 10 KB records. A micro-batch costs a fixed part
plus its records, so a stream that is behind drains faster in fewer, larger micro-batches, as
long as one fits the driver. With ``speed.max_bytes_per_trigger`` set, the cap is that budget ÷
the mean size (key, value and headers) of the topic's newest committed records, read when the
stream starts, and never above ``speed.max_offsets_per_trigger``: the newest records stand in
for the ones the stream has not read yet.

An empty topic has no size to read: the cap is then ``max_offsets_per_trigger`` until the
stream next starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from loglake.core.config import Config
from loglake.core.errors import KafkaUnavailableError
from loglake.kafka.admin import log_bounds, read_records

SAMPLE = 512          # records read from the tail, spread over the partitions
SAMPLE_SECONDS = 10.0


@dataclass(frozen=True)
class Sizing:
    max_offsets: int                  # the maxOffsetsPerTrigger the stream starts with
    mean_bytes: float | None = None   # mean record size of the sample (None: not sized)
    sampled: int = 0
    bound: str = ""                   # the setting that bounds the cap, and why it alone when it does

    def describe(self) -> str:
        if self.mean_bytes is None:
            return f"micro-batches of at most {self.max_offsets:,} records ({self.bound})"
        return (f"micro-batches of at most {self.max_offsets:,} records (mean record {self.mean_bytes:,.0f} B "
                f"over the newest {self.sampled:,}; bound by {self.bound})")


def record_bytes(msg) -> int:
    """A record's size as the stream holds it: key, value and headers."""
    headers = msg.headers() or []
    return (len(msg.key() or b"") + len(msg.value() or b"")
            + sum(len(k) + len(v or b"") for k, v in headers))


def tail_sample(config: Config, topic: str, size: int = SAMPLE, timeout: float = SAMPLE_SECONDS,
                bounds: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """The sizes of up to ``size`` of the newest committed records of ``topic``, an equal share
    from each partition that has records. ``bounds``: ``log_bounds(topic)``, if just read."""
    bounds = {p: (lo, hi) for p, (lo, hi) in (bounds or log_bounds(config, topic)).items() if hi > lo}
    if not bounds:
        return []
    share = max(1, size // len(bounds))
    wanted = {p: list(range(max(lo, hi - share), hi)) for p, (lo, hi) in bounds.items()}
    found = read_records(config, topic, wanted, timeout=timeout, read_on=share)
    # A transaction marker's offset names the record after it: each record counted once.
    records = {(p, m.offset()): m for (p, _), m in found.items()}
    return [record_bytes(m) for m in records.values()]


def size_micro_batches(config: Config, topic: str, bounds: dict[int, tuple[int, int]] | None = None) -> Sizing:
    """The records cap of the stream on ``topic`` (see the module docstring). ``bounds``:
    ``log_bounds(topic)``, if the caller just read them."""
    speed = config.profile.speed
    budget = speed.max_bytes
    if budget is None:
        return Sizing(speed.max_offsets_per_trigger, bound="speed.max_offsets_per_trigger; no byte budget set")
    try:
        sizes = tail_sample(config, topic, bounds=bounds)
    except KafkaUnavailableError as e:
        return Sizing(speed.max_offsets_per_trigger, bound=f"speed.max_offsets_per_trigger; the record size unread: {e}")
    if not sizes:
        return Sizing(speed.max_offsets_per_trigger, bound="speed.max_offsets_per_trigger; the topic holds no record "
                                                         "to size the byte budget by yet")
    mean = max(1.0, sum(sizes) / len(sizes))
    by_bytes = int(budget // mean)
    if by_bytes < speed.max_offsets_per_trigger:
        return Sizing(max(1, by_bytes), mean, len(sizes), f"speed.max_bytes_per_trigger {speed.max_bytes_per_trigger}")
    return Sizing(speed.max_offsets_per_trigger, mean, len(sizes), "speed.max_offsets_per_trigger")
