"""The batch layer's plans against the live log: from each partition's watermark to its end
(``plan_batch``, the scheduled run), or a backfill's ranges or times (``plan_backfill``). The
rules they apply, and the ``Plan`` they return, are ``loglake.core.plans``'.
"""

from __future__ import annotations

from typing import Sequence

from loglake.core.errors import ParamError
from loglake.core.offsets import OffsetRange
from loglake.core.plans import Plan, parse_range_spec, parse_timestamp, plan_from_watermarks, validate_ranges
from loglake.kafka.admin import dataset_bounds, offsets_for_times
from loglake.ledger.ranges import batch_watermarks


def plan_batch(config, ds) -> Plan:
    """Recompute from each partition's watermark to the current end (the scheduled run)."""

    log = dataset_bounds(config, ds)
    if ds.kind == "changelog":
        # The latest state is rebuilt from the whole retained log, not appended to.
        ranges = [OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in sorted(log.items())]
        return Plan(ds.name, tuple(ranges), "rebuild", ("changelog: latest state rebuilt from the full log",))
    earliest = {p: lo for p, (lo, _hi) in log.items()}
    ranges = plan_from_watermarks(ds.topic, batch_watermarks(config, ds, earliest), log)
    return Plan(ds.name, tuple(r for r in ranges if r.size), "batch")


def plan_backfill(config, ds, ranges: Sequence[str] | None = None, from_ts: str | None = None,
                  to_ts: str | None = None) -> Plan:
    """Validate a backfill request and turn it into a plan (nothing runs here)."""

    ranges = list(ranges or [])
    if ranges and (from_ts or to_ts):
        raise ParamError("ranges", "give either ranges or from_ts/to_ts, not both")
    if not ranges and not (from_ts and to_ts):
        missing = "to_ts" if from_ts else "from_ts"
        raise ParamError("ranges" if not (from_ts or to_ts) else missing,
                         "give ranges (PARTITION:START-END) or both from_ts and to_ts")
    if ds.kind == "changelog":
        raise ParamError("dataset", f"{ds.name} is a changelog: its latest state is rebuilt from the full log "
                         "by `loglake batch`, not backfilled by range")
    log = dataset_bounds(config, ds)
    if ranges:
        specs = [parse_range_spec(s, i) for i, s in enumerate(ranges)]
        return Plan(ds.name, tuple(validate_ranges(ds.topic, specs, log)), "backfill")
    start_ms, end_ms = parse_timestamp(from_ts, "from_ts"), parse_timestamp(to_ts, "to_ts")
    if start_ms > end_ms:
        raise ParamError("from_ts", f"from_ts ({from_ts}) is after to_ts ({to_ts})")
    starts = offsets_for_times(config, ds.topic, start_ms, log)
    ends = offsets_for_times(config, ds.topic, end_ms, log)
    specs = [(p, starts[p], ends[p]) for p in sorted(log) if ends[p] > starts[p]]
    if not specs:
        return Plan(ds.name, (), "backfill", (f"no records between {from_ts} and {to_ts}",))
    return Plan(ds.name, tuple(validate_ranges(ds.topic, specs, log)), "backfill",
                (f"from {from_ts} to {to_ts} (Kafka offsets-for-times)",))
