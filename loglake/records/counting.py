"""A validated pass's records counted as a write reads them (``counted``: no extra pass), and its
quarantined records: carried to the driver in the observation while they are few, else read
again (by a Kafka client in the driver, or by a second Spark pass over only their offsets).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce
from typing import Callable, Sequence

from py4j.java_gateway import JavaClass
from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.classic.column import Column as JvmColumn

from loglake.core import contracts
from loglake.core.config import Dataset
from loglake.core.errors import KafkaUnavailableError, SetupError
from loglake.core.offsets import OffsetRange
from loglake.kafka.admin import read_records
from loglake.records.validation import quarantine_rows, validate

# A pass notes quarantined offsets one by one (for a second pass that parses only them)
# while its range holds at most this many offsets; beyond, it notes one window per
# partition (lowest..highest bad offset), so the driver's memory stays bounded whatever
# the bad fraction: 10 M malformed records in a row are two numbers, not a 10 M list.
EXACT_BAD_LIMIT = 1_000_000

# The quarantined records of a pass ride to the driver in its observation while they are at
# most this many rows and bytes (io.loglake.spark.BoundedCollect, jvm/spark-ext): the
# quarantine is then written from them, with no second pass over the range and no read by the
# driver. Beyond, the aggregate keeps only a count (the driver's memory stays bounded).
CARRY_ROWS = 10_000
CARRY_BYTES = 16 << 20
# What rides: a quarantine row but its layer (the writer adds it).
CARRIED = contracts.Contract(tuple(c for c in contracts.QUARANTINE.columns if c.name != "_layer"))


def _carry(bad: Column) -> Column:
    """The bounded aggregate of the quarantine rows of the records ``bad`` marks."""
    jvm = SparkContext._jvm
    agg = getattr(jvm, "io.loglake.spark.BoundedCollect") if jvm is not None else None
    if not isinstance(agg, JavaClass):
        raise SetupError("loglake's Spark extension (io.loglake.spark.BoundedCollect) is not on this Spark "
                         "session's class path: the spark jar set lacks loglake-spark-ext.jar; run `make setup`")
    made = {"reason_code": F.col("_reason.code"), "reason": F.col("_reason.message")}
    row = F.when(bad, F.struct(*(made.get(c, F.col(c)).alias(c) for c in CARRIED.names)))
    return JvmColumn(agg.column(row._jc, CARRIED.ddl, CARRY_ROWS, CARRY_BYTES))


def counted(validated: DataFrame, ranges: Sequence[OffsetRange] = (), *, partitions: Sequence[int] = (),
            exact: bool = True, fresh_from: Sequence[int | None] = ()) -> tuple[DataFrame, Observation]:
    """``validated`` with its rows counted as a write reads them (no extra pass).

    After the first action on the returned frame (or one derived from it), the
    observation's ``get`` holds ``records`` (valid), ``quarantined`` and, per range ``i``
    of ``ranges``, ``records_<i>`` and ``quarantined_<i>``; ``carried``: the quarantined
    rows themselves while they are few (``CARRY_ROWS``, ``CARRY_BYTES``; ``quarantined``
    writes them); and where the quarantined records are, for ``bad_records`` when they are
    more: ``bad`` ("p:o,p:o,...", ``exact``) or, per partition in ``partitions``,
    ``bad_min_<p>`` and ``bad_max_<p>`` (not ``exact``: bounded). With ``fresh_from`` (an
    offset or None per range), ``fresh_<i>``: range ``i``'s valid records from that offset on.
    """
    obs = Observation("loglake_counts")
    return validated.observe(obs, *_metrics(tuple(ranges), tuple(partitions), exact, tuple(fresh_from))), obs


_METRICS: dict = {}


def _metrics(ranges: tuple, partitions: tuple, exact: bool, fresh_from: tuple) -> list[Column]:
    """``counted``'s aggregates, built once per shape, carry bounds and Spark context (a speed
    stream's are the same every micro-batch; building them is tens of Py4J calls)."""
    sc = SparkContext._active_spark_context
    key = (ranges, partitions, exact, fresh_from, CARRY_ROWS, CARRY_BYTES, sc.applicationId, sc.startTime)
    if key not in _METRICS:
        if len(_METRICS) > 32:  # bounded: every batch run has ranges of its own
            _METRICS.clear()
        _METRICS[key] = _build_metrics(ranges, partitions, exact, fresh_from)
    return _METRICS[key]


def _build_metrics(ranges: tuple, partitions: tuple, exact: bool, fresh_from: tuple) -> list[Column]:
    bad = F.col("_reason").isNotNull()
    metrics = [F.count_if(~bad).alias("records"), F.count_if(bad).alias("quarantined"),
               _carry(bad).alias("carried"), F.collect_set(F.col("_reason.code")).alias("codes")]
    if exact:
        # "p:o,p:o,...": a string crosses Py4J in one piece, a list of rows would not.
        metrics.append(F.concat_ws(",", F.collect_list(F.when(bad, F.concat_ws(":", "_partition", "_offset"))))
                       .alias("bad"))
    else:
        for p in partitions:
            here_bad = bad & (F.col("_partition") == p)
            metrics += [F.min(F.when(here_bad, F.col("_offset"))).alias(f"bad_min_{p}"),
                        F.max(F.when(here_bad, F.col("_offset"))).alias(f"bad_max_{p}")]
    for i, r in enumerate(ranges):
        here = (F.col("_partition") == r.partition) & (F.col("_offset") >= r.start) & (F.col("_offset") < r.end)
        metrics += [F.count_if(here & ~bad).alias(f"records_{i}"), F.count_if(here & bad).alias(f"quarantined_{i}")]
        if i < len(fresh_from) and fresh_from[i] is not None:
            metrics.append(F.count_if(here & ~bad & (F.col("_offset") >= fresh_from[i])).alias(f"fresh_{i}"))
    return metrics


# The quarantined records of a pass are read again by the driver (a Kafka client, no Spark
# job) when they are at most this many; more go through a second Spark pass over the range.
DRIVER_READ_LIMIT = 1_000
# The driver reads on from one quarantined offset to the next when the offsets it would read
# in all are at most this many (a few per cent malformed in a micro-batch), else it seeks.
DRIVER_READ_SPAN = 200_000


def quarantined(raw: DataFrame, counts: dict, ds: Dataset, layer: str, config, topic: str) -> DataFrame:
    """The quarantine rows of a pass that ``counted`` saw quarantine some: those its observation
    carried when they are all there, else the records ``bad_records`` reads again, validated again."""
    carried = carried_rows(counts, layer)
    if carried is not None:
        return raw.sparkSession.createDataFrame(carried, contracts.QUARANTINE.ddl)
    return quarantine_rows(validate(bad_records(raw, counts, config, topic), ds), layer)


def reason_counts(counts: dict) -> dict[str, int] | None:
    """Quarantined records per reason code, from the rows a pass carried (``counted``); None
    when it did not carry them all (``observe_reasons`` counts them as they are written)."""
    rows = counts["carried"]["rows"] if counts.get("carried") is not None else None
    if rows is None or len(rows) != counts["quarantined"]:
        return None
    at = CARRIED.names.index("reason_code")
    out: dict[str, int] = {}
    for r in rows:
        out[r[at]] = out.get(r[at], 0) + 1
    return out


def observe_reasons(rows: DataFrame, codes: Sequence[str]) -> tuple[DataFrame, Callable[[], dict[str, int]]]:
    """Quarantine ``rows`` counted per reason code as a write reads them; ``codes``: the codes
    ``counted`` saw (its ``codes``, a handful). The second value reads the counts after the write."""
    codes = sorted(codes)
    obs = Observation("loglake_reasons")
    observed = rows.observe(obs, F.count(F.lit(1)).alias("all"),
                            *(F.count_if(F.col("reason_code") == c).alias(f"r{i}") for i, c in enumerate(codes)))

    def read() -> dict[str, int]:
        got = obs.get
        out = {c: got[f"r{i}"] for i, c in enumerate(codes) if got[f"r{i}"]}
        rest = got["all"] - sum(out.values())
        if rest:
            out["other"] = rest
        return out
    return observed, read


def carried_arrow(counts: dict, layer: str):
    """``carried_rows`` as a pyarrow Table of the quarantine's columns (None as there)."""
    import pyarrow as pa  # deferred: only a pass with quarantined records needs it

    rows = carried_rows(counts, layer)
    return None if rows is None else pa.Table.from_pylist(rows, schema=contracts.QUARANTINE.arrow_schema())


def carried_rows(counts: dict, layer: str) -> list[dict] | None:
    """The quarantine rows (``{column: value}``, timestamps as UTC instants) of the records a pass
    carried (``counted``), when it carried every quarantined one (a task run twice would have
    given more); else None."""
    rows = counts["carried"]["rows"] if counts.get("carried") is not None else None
    if rows is None or len(rows) != counts["quarantined"]:
        return None
    names = CARRIED.names
    out = []
    for r in rows:
        row = dict(zip(names, r), _layer=layer)
        ts = row["_kafka_timestamp"]  # pyspark hands timestamps over as naive local times
        row["_kafka_timestamp"] = ts.astimezone(timezone.utc) if ts is not None else None
        out.append(row)
    return out


def bad_records(raw: DataFrame, counts: dict, config, topic: str) -> DataFrame:
    """The Kafka rows of ``raw`` that ``counted`` saw quarantined (exactly those, or every
    row of each partition's bad window): what a second pass parses again. A few exact offsets
    are read by the driver from ``topic`` (``config``'s cluster) instead of by a Spark pass."""
    if "bad" in counts:
        if counts.get("quarantined", 0) <= DRIVER_READ_LIMIT:
            read = _read_in_driver(raw, config, topic, counts["bad"])
            if read is not None:
                return read
        return only_offsets(raw, counts["bad"])
    windows = [(int(k[len("bad_min_"):]), v, counts[f"bad_max_{k[len('bad_min_'):]}"])
               for k, v in counts.items() if k.startswith("bad_min_") and v is not None]
    if not windows:
        return raw.limit(0)
    inside = [(F.col("partition") == p) & F.col("offset").between(lo, hi) for p, lo, hi in windows]
    return raw.where(reduce(lambda a, b: a | b, inside))


def _offset_pairs(offsets: str) -> dict[int, list[int]]:
    """``counted``'s "p:o,p:o,..." as {partition: [offsets]}."""
    wanted: dict[int, list[int]] = {}
    for pair in offsets.split(","):
        p, o = pair.split(":")
        wanted.setdefault(int(p), []).append(int(o))
    return wanted


def _read_in_driver(raw: DataFrame, config, topic: str, offsets: str) -> DataFrame | None:
    """The records at ``counted``'s "p:o,p:o,..." offsets read by a Kafka client in the
    driver, as rows of ``raw``'s schema (the same bytes Spark read: the log is immutable);
    None when one is not there any more (compacted or deleted since) or the reading did not
    finish in time: the Spark pass then decides, as before."""
    wanted = _offset_pairs(offsets)
    span = sum(max(offs) - min(offs) + 1 for offs in wanted.values())
    try:
        records = read_records(config, topic, wanted, read_on=512 if span <= DRIVER_READ_SPAN else 0)
    except KafkaUnavailableError:  # slow or away: the Spark pass has the job's whole time
        return None
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    rows = []
    for p, offs in wanted.items():
        for o in offs:
            m = records.get((p, o))
            if m is None or m.offset() != o:
                return None
            ts_type, ts = m.timestamp()
            row = {"key": m.key(), "value": m.value(), "topic": topic, "partition": p, "offset": o,
                   "timestamp": epoch + timedelta(milliseconds=ts), "timestampType": ts_type - 1}
            rows.append(tuple(row[f.name] for f in raw.schema.fields))
    return raw.sparkSession.createDataFrame(rows, raw.schema)


def only_offsets(raw: DataFrame, offsets: str) -> DataFrame:
    """The Kafka rows of ``raw`` at ``counted``'s "p:o,p:o,..." offsets: a second pass over a
    range then parses only those (typically the few quarantined ones), not every record."""
    pairs = [(p, o) for p, offs in _offset_pairs(offsets).items() for o in offs]
    wanted = raw.sparkSession.createDataFrame(pairs, "partition int, offset long")
    # Materialised (only those rows): otherwise Spark pushes the caller's filter on
    # ``_reason`` below the join, and that filter would parse every record of the range.
    return raw.join(F.broadcast(wanted), ["partition", "offset"], "left_semi").localCheckpoint(eager=True)
