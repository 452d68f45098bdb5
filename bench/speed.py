"""P1, P2, P10 and the scaling curve: the speed layer's sustained records/s beside its references.

All on the benchmark dataset (``loglake.testing.workload``: job_views' typed fields padded to a
record size, 1 in 1,000 records malformed), all on the same topic per configuration:

- the speed layer: ``loglake.speed.stream.run_speed`` (available-now, the run's shared
  in-process Spark session, a fresh checkpoint and fresh tables each run). Steady state =
  the micro-batches after the first (the first pays query start and code generation);
  records/s = their records ÷ their trigger time. The session's start and the first
  micro-batch are reported separately.
- P1's reference: a bare confluent-kafka consumer reading the same topic (``bench.pyloop.bare``).
- P2's reference: the plain Python loop a user might write (``bench.pyloop.run``):
  confluent-kafka → json → the same checks → Arrow → delta-rs append, same flush size.
  CPU-seconds per million records: the loop's process CPU; the speed layer's JVM + driver
  CPU over its whole run (first micro-batch included, so it is an upper bound).
- P10's reference: the Spark Structured Streaming job a user would write by hand (``hand_job``):
  the Kafka source, ``from_json`` with the dataset's fields, appended to a Delta table, in the
  same Spark session with the same micro-batch size and trigger (available-now); no validation,
  no quarantine, no provenance columns, no position record. Measured as the speed layer is:
  the steady micro-batches' records ÷ their trigger time, from the query's own progress. With
  P10 asked, one warm-up run of each comes first (not counted) and then their runs alternate:
  both share the session's JVM, whose JIT warms with every run. The warm-ups warm the runs
  behind P1 and P2 (and the first micro-batch's figure) too.
- Scaling: the speed layer's steady records/s at 1, 2, 4, 8 partitions (1 KB records) and
  at 100 B, 1 KB, 10 KB records (6 partitions).
"""

from __future__ import annotations

import time
import uuid

from bench import pyloop
from bench.harness import Harness, jvm_pid, median, result
from loglake.core.contracts import FIELD_TYPES
from loglake.core.processes import cpu_seconds
from loglake.testing import workload

KB = 1024
P1_RECORDS = 600_000            # 1 KB records: 3 micro-batches of 200,000
SIZES = {100: 1_200_000, KB: P1_RECORDS, 10 * KB: 60_000}
PARTITIONS = [1, 2, 4, 8]
PARTITION_RECORDS = 300_000     # 1 KB records per partition-count configuration
BATCHES = 3                     # micro-batches per run: the first is start-up, the rest steady state


class Topic:
    """A topic of the benchmark dataset filled once, read by every run of a configuration."""

    def __init__(self, h: Harness, partitions: int, record_bytes: int, records: int):
        from loglake.kafka.admin import ensure_topic

        self.h, self.partitions, self.record_bytes, self.records = h, partitions, record_bytes, records
        self.suffix = uuid.uuid4().hex[:8]
        config = self.config("produce")
        self.ds = config.dataset(workload.DATASET)
        self.topic = ensure_topic(config, self.ds)
        self.produce_seconds = self.fill(config, self.topic)
        h.log(f"topic {self.topic}: {records:,} × {record_bytes} B on {partitions} partitions "
              f"produced in {self.produce_seconds:.1f}s")

    def fill(self, config, topic: str) -> float:
        """Produce the topic's records; seconds taken."""
        return workload.produce(self.h.bootstrap, topic, self.records, self.record_bytes)

    def dataset_file(self) -> dict:
        """The benchmark dataset's file (a subclass: another format of it)."""
        return workload.dataset_file(self.partitions)

    def profile(self) -> dict:
        """More of the profile (``loglake.testing.conf.write_conf``'s keywords)."""
        return {}

    def config(self, name: str, dataset: dict | None = None):
        """A config (own state dir, same topic) with micro-batches of a third of the topic;
        ``dataset``: the dataset's file instead of ``dataset_file()``."""
        per_batch = -(-self.records // BATCHES)
        return self.h.config(f"speed-{self.suffix}-{name}", topic_suffix=self.suffix,
                             extra_datasets={workload.DATASET: dataset or self.dataset_file()},
                             speed={"max_offsets_per_trigger": per_batch}, **self.profile())

    def speed_run(self, i: int) -> dict:
        """One run of the speed layer over the whole topic, from a fresh checkpoint and tables."""
        from loglake.speed.stream import run_speed

        config = self.config(f"run{i}")
        ds = config.dataset(workload.DATASET)
        spark = self.h.spark(config)
        return self._timed(i, "speed run", spark,
                           lambda: run_speed(spark, config, ds, available_now=True)["_batches"])

    def hand_run(self, i: int) -> dict:
        """One run of ``hand_job`` over the whole topic, from a fresh checkpoint and table."""
        spark, root = self.h.spark(), self.h.root / f"hand-{self.suffix}-{i}"
        return self._timed(i, "hand-written job run", spark, lambda: hand_job(
            spark, self.h.bootstrap, self.topic, self.ds, str(root / "table"), str(root / "checkpoint"),
            -(-self.records // BATCHES)))

    def _timed(self, i: int, what: str, spark, go) -> dict:
        """``go()`` (→ batch id: (records, trigger ms)) timed: the steady micro-batches' records/s,
        wall and CPU (the driver JVM's and this process')."""
        jvm = jvm_pid(spark)
        cpu0 = cpu_seconds(jvm) + time.process_time()
        t0 = time.monotonic()
        batches = sorted(go().items())
        wall = time.monotonic() - t0
        cpu = cpu_seconds(jvm) + time.process_time() - cpu0
        total = sum(r for _b, (r, _ms) in batches)
        if total != self.records:
            raise RuntimeError(f"{what} {i} on {self.topic} covered {total:,} records, expected {self.records:,}")
        steady = batches[1:]
        records = sum(r for _b, (r, _ms) in steady)
        seconds = sum(ms for _b, (_r, ms) in steady) / 1000
        run = {"records_per_second": round(records / seconds), "steady_records": records,
               "steady_seconds": round(seconds, 2), "first_batch_seconds": batches[0][1][1] / 1000,
               "batches": [[b, r, ms] for b, (r, ms) in batches], "wall_seconds": round(wall, 2),
               "cpu_seconds": round(cpu, 2), "cpu_seconds_per_million": round(cpu / total * 1e6, 1)}
        self.h.log(f"  {what} {i}: {run['records_per_second']:,} rec/s steady, batches {run['batches']}")
        return run


def hand_job(spark, bootstrap: str, topic: str, ds, table: str, checkpoint: str, per_batch: int) -> dict:
    """P10's reference, as a user would write it: Kafka → ``from_json`` → Delta append, until the
    topic's end (available-now); its micro-batches (``loglake.speed.stream.query_batches``)."""
    from pyspark.sql import functions as F

    from loglake.speed.stream import query_batches

    schema = ", ".join(f"{name} {FIELD_TYPES[spec.type]}" for name, spec in ds.fields.items())
    query = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", per_batch)
             .load()
             .select(F.from_json(F.col("value").cast("string"), schema).alias("v"))
             .select("v.*")
             .writeStream.format("delta")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start(table))
    query.awaitTermination()
    return query_batches(query, topic)


def against(mid: str, title: str, speed: float, speed_runs: list[dict], refs: list[dict], *, key: str, label: str,
            noun: str, reference: str, ylabel: str, cpu_title: str, detail: dict | None = None) -> dict:
    """A ratio metric: the speed layer's steady records/s ÷ a reference's (``refs``: its runs, each
    with records_per_second and cpu_seconds_per_million), with both CPU costs."""
    ref_rps = median([r["records_per_second"] for r in refs])
    ratio = speed / ref_rps
    speed_cpu = median([r["cpu_seconds_per_million"] for r in speed_runs])
    ref_cpu = median([r["cpu_seconds_per_million"] for r in refs])
    labels = [label, "loglake speed layer"]
    m = result(mid, title, round(ratio, 3), "ratio", goal=">= 1.0", met=ratio >= 1.0, reference={reference: ref_rps},
               runs=[{"speed": s, key: r} for s, r in zip(speed_runs, refs)],
               detail={"speed_records_per_second": speed, f"{key}_records_per_second": ref_rps,
                       "speed_cpu_seconds_per_million": speed_cpu, f"{key}_cpu_seconds_per_million": ref_cpu,
                       **(detail or {})},
               chart={"kind": "panels", "panels": [
                   {"kind": "bar", "labels": labels, "values": [ref_rps, speed], "ylabel": ylabel,
                    "title": "throughput"},
                   {"kind": "bar", "labels": labels, "values": [ref_cpu, speed_cpu],
                    "ylabel": "CPU-seconds per million records", "title": cpu_title}]})
    m["summary"] = (f"speed {speed:,.0f} vs {noun} {ref_rps:,.0f} rec/s; CPU-s per million: speed {speed_cpu}, "
                    f"{noun.split()[0]} {ref_cpu}")
    return m


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    want = {m for m in ("P1", "P2", "P10", "S") if only is None or m in only}
    if not want:
        return []
    scale = 0.2 if h.quick else 1.0
    n = lambda x: max(30_000, int(x * scale))  # noqa: E731
    out = []
    main = Topic(h, 6, KB, n(P1_RECORDS))
    session_t0 = time.monotonic()
    h.spark(main.config("session"))
    session_seconds = time.monotonic() - session_t0
    if "P10" in want:
        # The speed layer and P10's reference share the session's JVM, whose JIT warms with every
        # run: one warm-up run of each (not counted), then their runs alternate, so that neither
        # side meets a JVM the other one's runs warmed more.
        main.speed_run("warm-up")
        main.hand_run("warm-up")
        pairs = h.repeat(lambda i: (main.speed_run(i), main.hand_run(i)))
        speed_runs, hands = [s for s, _ in pairs], [r for _, r in pairs]
    else:
        speed_runs = h.repeat(main.speed_run)
    speed = median([r["records_per_second"] for r in speed_runs])
    h.speed_capacity = speed  # P3 runs at half of it
    startup = {"spark_session_start_seconds": round(session_seconds, 1),
               "first_micro_batch_seconds": median([r["first_batch_seconds"] for r in speed_runs])}

    if "P1" in want:
        bare = h.repeat(lambda i: pyloop.bare(h.bootstrap, main.topic, main.records))
        bare_rps = median([b["records_per_second"] for b in bare])
        ratio = speed / bare_rps
        m = result("P1", "speed-layer efficiency (speed ÷ bare consumer)", round(ratio, 3), "ratio", goal=">= 0.5",
                   met=ratio >= 0.5, reference={"bare consumer records/s": bare_rps},
                   runs=[{"speed": s, "bare": b} for s, b in zip(speed_runs, bare)],
                   detail={"speed_records_per_second": speed, "bare_records_per_second": bare_rps,
                           "records": main.records, "record_bytes": KB, "partitions": 6,
                           "max_offsets_per_trigger": -(-main.records // BATCHES), **startup},
                   chart={"kind": "bar", "labels": ["bare confluent-kafka consumer", "loglake speed layer"],
                          "values": [bare_rps, speed], "ylabel": "records/s (1 KB, 6 partitions)"})
        m["summary"] = (f"speed {speed:,.0f} rec/s vs bare consumer {bare_rps:,.0f} rec/s; start-up apart: "
                        f"session {startup['spark_session_start_seconds']}s, first micro-batch "
                        f"{startup['first_micro_batch_seconds']}s")
        out.append(m)

    if "P2" in want:
        flush = -(-main.records // BATCHES)
        loops = h.repeat(lambda i: pyloop.run(h.bootstrap, main.topic, main.ds, str(h.root / f"pyloop-{i}"),
                                              main.records, flush))
        out.append(against("P2", "against the simple alternative (speed ÷ Python loop)", speed, speed_runs, loops,
                           key="loop", label="Python loop", noun="loop", reference="Python loop records/s",
                           ylabel="records/s", cpu_title="CPU cost (speed: whole run incl. first batch)",
                           detail={"flush_records": flush}))

    if "P10" in want:
        out.append(against("P10", "against a hand-written Spark job (speed ÷ Kafka → from_json → Delta)", speed,
                           speed_runs, hands, key="hand", label="hand-written Spark job", noun="hand-written job",
                           reference="hand-written job records/s", ylabel="records/s (steady state)",
                           cpu_title="CPU cost (whole run incl. first batch)",
                           detail={"hand_first_micro_batch_seconds": median([r["first_batch_seconds"] for r in hands])}))

    if "S" in want:
        by_size = {KB: speed}
        runs: dict[str, list] = {"6 partitions, 1024 B": speed_runs}
        for size, records in SIZES.items():
            if size == KB:
                continue
            t = Topic(h, 6, size, n(records))
            rs = h.repeat(t.speed_run)
            runs[f"6 partitions, {size} B"] = rs
            by_size[size] = median([r["records_per_second"] for r in rs])
        by_parts = {}
        for parts in PARTITIONS:
            t = Topic(h, parts, KB, n(PARTITION_RECORDS))
            rs = h.repeat(t.speed_run)
            runs[f"{parts} partitions, 1024 B"] = rs
            by_parts[parts] = median([r["records_per_second"] for r in rs])
        sizes = sorted(by_size)
        m = result("S", "scaling of the speed layer", by_parts[max(PARTITIONS)], "records/s",
                   runs=[{"config": k, "runs": v} for k, v in runs.items()],
                   detail={"records_per_second_by_partitions": by_parts, "records_per_second_by_record_bytes": by_size},
                   chart={"kind": "panels", "panels": [
                       {"kind": "lines", "x": PARTITIONS, "series": {"1 KB records": [by_parts[p] for p in PARTITIONS]},
                        "xlabel": "partitions", "ylabel": "records/s (steady state)", "title": "by partitions"},
                       {"kind": "lines", "x": sizes, "series": {"6 partitions": [by_size[s] for s in sizes]},
                        "xlabel": "record size (bytes)", "ylabel": "records/s (steady state)", "logx": True,
                        "xticklabels": ["100 B", "1 KB", "10 KB"], "title": "by record size"}]})
        m["summary"] = ("partitions " + ", ".join(f"{p}: {v:,.0f}" for p, v in by_parts.items()) +
                        " rec/s; sizes " + ", ".join(f"{s} B: {v:,.0f}" for s, v in by_size.items()) + " rec/s")
        out.append(m)
    return out
