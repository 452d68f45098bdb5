"""P3 freshness: producer send → row visible in the serving view, at half the speed layer's capacity.

Issue 6: "at half of the speed layer's capacity, latency from the producer's send to the
row being visible in the serving view: p50, p99, max. Goal p50 <= 1 s, p99 <= 2 s. Report
a bare Kafka produce→consume p99 beside it as the floor."

1. Capacity: the P1 module's steady-state records/s when it left one on the harness
   (``h.speed_capacity``), else measured here: ``CAPACITY_RECORDS`` 1 KB ``bench_events``
   records through the real speed layer, available-now, ``CAPACITY_BATCH`` records per
   micro-batch, after a small warm-up run on the same checkpoint (query start, code
   generation). ``detail.capacity_source`` says which.
2. Freshness: the real speed stream (``loglake.speed.stream.start_stream``, in-process in the
   harness's shared Spark session: the same code ``loglake speed start`` runs under
   spark-submit, without a second JVM on 2 cores) with ``TRIGGER`` / ``MAX_OFFSETS``, fed by
   ``loglake.testing.workload.produce`` in a *separate process* (as a user's producer is; it does not
   contend for the driver's GIL) at half capacity for ``WARMUP_S`` + ``WINDOWS_PER_REPEAT`` x
   repeats x ``WINDOW_S``,
   after the stream has run ``WARM_BATCHES`` micro-batches on an unpaced warm-up set.
   A record's send time is its Kafka CreateTime, which the speed table keeps as
   ``_kafka_timestamp``. A poller thread stats ``<speed table>/_delta_log/<next version>.json``
   every ``POLL_S``: a reader (Spark or delta-rs) sees a version exactly when that file
   exists (Delta commits by an atomic rename), so a row's visible time is when the poller
   first sees the version that added it (late by at most one poll interval: the error
   bound; the commit file's mtime gives a second estimate, in detail). After the run, the
   added files' ``_kafka_timestamp`` is read with pyarrow; latency = visible - send, per row.
   No batch run happens here, so every partition's batch watermark is 0 and the serving
   view (batch rows below W_p, speed rows at or above it) is exactly the speed table:
   visible in the speed table = visible in the serving view.
   Records sent during the warm-up are left out; the rest is cut by send time into
   ``WINDOWS_PER_REPEAT`` x ``h.repeats`` windows, each one "run"; the value is the median over
   the windows of each percentile (pooled figures in detail).
3. Breakdown: every micro-batch's progress (``durationMs``: latestOffset, walCommit,
   queryPlanning, addBatch, commitOffsets, triggerExecution) is collected by a listener;
   each speed commit carries its batch id (its userMetadata, or Delta's txn version), so each row's latency splits
   into *queue* (send → start of the trigger that read it) and *in batch* (trigger start →
   speed commit visible); ``batch_end_after_visible_s`` is what a micro-batch still does
   after its rows are visible (the quarantine append), which the next one waits for.
4. Floor: the same producer at the same rate into a topic of its own, read by a bare
   confluent-kafka consumer thread (assigned, no group); latency = receive time - CreateTime.

Value: p99 in seconds (median over windows); met when p50 <= 1 s and p99 <= 2 s.
Environment overrides for exploring: LOGLAKE_BENCH_P3_TRIGGER ("0 seconds", "200
milliseconds", ...), LOGLAKE_BENCH_P3_MAX_OFFSETS, LOGLAKE_BENCH_P3_RATE (records/s; skips
the capacity figure).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

from bench.harness import Harness, percentile, result
from loglake.core.paths import REPO_ROOT
from loglake.testing import workload

RECORD_BYTES = 1024             # 1 KB records, as P1 measures capacity on
PARTITIONS = 6
TRIGGER = "0 seconds"           # next micro-batch as soon as the previous one ends: no idle wait added
MAX_OFFSETS = 100_000           # only a cap: at half capacity a micro-batch holds rate x its duration
WARMUP_S = 10.0                 # paced records sent this early are left out (the stream settles to the rate)
WINDOW_S = 20.0                 # one measured "run"; WINDOWS_PER_REPEAT x h.repeats of them (120 s by default)
WINDOWS_PER_REPEAT = 2          # three windows' medians moved by seconds between runs of one commit
POLL_S = 0.02                   # Delta log poll interval: the visible-time error bound
WARM_RECORDS = 5_000           # unpaced warm-up set; then more until WARM_BATCHES micro-batches ran
WARM_BATCHES = 4
WARM_TIMEOUT_S = 120.0
DRAIN_S = 60.0                  # after the last send, wait this long at most for the last rows
CAPACITY_RECORDS = 100_000      # after a warm-up run of WARM_RECORDS
CAPACITY_BATCH = 50_000
FLOOR_S = 20.0                  # bare Kafka run; the first FLOOR_WARMUP_S left out
FLOOR_WARMUP_S = 2.0
DURATION_KEYS = ["latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets",
                 "triggerExecution"]


# -- helpers ------------------------------------------------------------------------------
def _producer(bootstrap: str, topic: str, count: int, rate: float) -> subprocess.Popen:
    """``loglake.testing.workload.produce`` in a process of its own (a user's producer is not the driver)."""
    code = ("import sys; from loglake.testing.workload import produce; "
            "print(round(produce(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "
            "rate=float(sys.argv[5])), 3))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, "-c", code, bootstrap, topic, str(count), str(RECORD_BYTES), str(rate)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)


def _wait_producer(proc: subprocess.Popen, what: str, timeout: float) -> float:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: producer exited with {proc.returncode}")
    return float(out.strip().splitlines()[-1])


def _stats(values: list[float]) -> dict:
    if not values:
        return {"count": 0}
    return {"count": len(values), "p50": round(percentile(values, 50), 4), "p90": round(percentile(values, 90), 4),
            "p99": round(percentile(values, 99), 4), "max": round(max(values), 4),
            "mean": round(statistics.fmean(values), 4)}


def _capacity_from_harness(h: Harness) -> float | None:
    for name in ("speed_capacity", "capacity"):
        v = getattr(h, name, None)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


class _LogPoller(threading.Thread):
    """Sees each new version of a Delta table as soon as its commit file exists."""

    def __init__(self, table_path: str, interval: float):
        super().__init__(name="p3-delta-log-poller", daemon=True)
        self.log = Path(table_path) / "_delta_log"
        self.interval = interval
        self.next = 0
        self.versions: dict[int, dict] = {}  # version → seen (epoch s), mtime, adds, txn
        self.polls = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            f = self.log / f"{self.next:020d}.json"
            self.polls += 1
            try:
                st = f.stat()
            except FileNotFoundError:
                self.stop.wait(self.interval)
                continue
            seen = time.time()
            adds, txn = [], None
            for line in f.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    adds.append(unquote(action["add"]["path"]))
                elif "txn" in action:
                    txn = action["txn"]
                elif "commitInfo" in action and txn is None:
                    # A micro-batch after its query's first names (stream, batch) in its metadata only.
                    try:
                        meta = json.loads(action["commitInfo"].get("userMetadata") or "{}")
                    except ValueError:
                        meta = {}
                    if isinstance(meta, dict) and "loglake_batch" in meta:
                        txn = {"appId": meta.get("loglake_stream", ""), "version": meta["loglake_batch"]}
            self.versions[self.next] = {"seen": seen, "mtime": st.st_mtime, "adds": adds, "txn": txn}
            self.next += 1  # look for the following version at once


class _ProgressLog:
    """Every progress event of one query (``recentProgress`` keeps only the last 100)."""

    def __init__(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        events = self.events = {}
        self.query_id = None
        outer = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = json.loads(event.progress.json)
                if outer.query_id is None or p.get("id") == outer.query_id:
                    events[p["batchId"]] = p

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = Listener()
        self.spark = spark
        spark.streams.addListener(self.listener)

    def close(self) -> None:
        self.spark.streams.removeListener(self.listener)


def _check(query) -> None:
    if query.exception() is not None:
        raise RuntimeError(f"speed stream failed: {query.exception()}")


def _position(progress: _ProgressLog, topic: str) -> int:
    """Records the stream has committed (sum over partitions of its newest end offset)."""
    from loglake.core.offsets import parse_spark_offsets

    events = list(progress.events.values())
    if not events:
        return 0
    last = max(events, key=lambda p: p["batchId"])
    ends = parse_spark_offsets(last["sources"][0].get("endOffset") or "{}").get(topic, {})
    return sum(ends.values())


def _records(p: dict, topic: str) -> int:
    """Records a micro-batch covered: its end minus start offsets (all partitions)."""
    from loglake.core.offsets import parse_spark_offsets

    src = p["sources"][0]
    start = parse_spark_offsets(src.get("startOffset") or "{}").get(topic, {})
    end = parse_spark_offsets(src.get("endOffset") or "{}").get(topic, {})
    return sum(e - start.get(part, 0) for part, e in end.items())


def _data_batches(progress: _ProgressLog) -> int:
    return sum(1 for p in list(progress.events.values()) if p.get("numInputRows"))


def _end_offsets_sum(config, topic: str) -> int:
    from loglake.kafka.admin import end_offsets

    return sum(end_offsets(config, topic).values())


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# -- 1. capacity --------------------------------------------------------------------------
def measure_capacity(h: Harness) -> dict:
    """Steady-state records/s of the real speed layer on 1 KB records (available-now)."""
    from loglake.kafka.admin import ensure_topic
    from loglake.speed.stream import run_speed

    n = CAPACITY_RECORDS // 4 if h.quick else CAPACITY_RECORDS
    batch = CAPACITY_BATCH // 4 if h.quick else CAPACITY_BATCH
    config = h.config("freshness-capacity", extra_datasets={workload.DATASET: workload.dataset_file(PARTITIONS)},
                      speed={"max_offsets_per_trigger": batch})
    ds = config.dataset(workload.DATASET)
    ensure_topic(config, ds)
    spark = h.spark(config)
    # A small warm-up run first (query start, code generation, table creation), then the
    # measured run on the same checkpoint: every one of its micro-batches is warm.
    workload.produce(config.kafka.bootstrap_servers, ds.topic, WARM_RECORDS, RECORD_BYTES)
    t0 = time.monotonic()
    run_speed(spark, config, ds, available_now=True)
    warm_s = time.monotonic() - t0
    produce_s = workload.produce(config.kafka.bootstrap_servers, ds.topic, n, RECORD_BYTES)
    progress = _ProgressLog(spark)
    t0 = time.monotonic()
    try:
        run_speed(spark, config, ds, available_now=True)
    finally:
        progress.close()
    wall = time.monotonic() - t0
    # Records per micro-batch from its offset range: numInputRows counts a record once per
    # read of the source, and a micro-batch with quarantined records reads it twice.
    batches = [(_records(p, ds.topic), p["durationMs"]["triggerExecution"], p["numInputRows"])
               for _b, p in sorted(progress.events.items()) if p.get("numInputRows")]
    # A leftover micro-batch far below the cap (offsets split per partition) is mostly fixed cost.
    full = [b for b in batches if b[0] >= batch // 2] or batches
    rows, ms = sum(r for r, _, _ in full), sum(t for _, t, _ in full)
    cap = rows / (ms / 1000)
    h.log(f"P3: capacity {cap:,.0f} records/s ({len(batches)} micro-batches of {batch:,}: trigger ms "
          f"{[t for _, t, _ in batches]}, numInputRows {[i for _, _, i in batches]}; after a warm-up run "
          f"of {WARM_RECORDS:,} in {warm_s:.1f}s); produced {n:,} in {produce_s:.1f}s, stream wall {wall:.1f}s")
    return {"records_per_second": round(cap), "records": n, "batch": batch,
            "warm_up_run_s": round(warm_s, 1), "trigger_ms": [t for _, t, _ in batches],
            "records_per_batch": [r for r, _, _ in batches], "num_input_rows": [i for _, _, i in batches],
            "wall_s": round(wall, 1)}


# -- 2. freshness -------------------------------------------------------------------------
def measure_freshness(h: Harness, rate: float, trigger: str, max_offsets: int, warmup_s: float, window_s: float,
                      windows: int, name: str = "freshness") -> dict:
    """Run the speed stream at ``rate`` and measure send → visible per row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from loglake.kafka.admin import ensure_topic
    from loglake.speed.stream import start_stream

    config = h.config(name, extra_datasets={workload.DATASET: workload.dataset_file(PARTITIONS)},
                      speed={"trigger_interval": trigger, "max_offsets_per_trigger": max_offsets})
    ds = config.dataset(workload.DATASET)
    ensure_topic(config, ds)
    spark = h.spark(config)
    path = config.table_path(ds, "speed")
    total_s = warmup_s + windows * window_s
    count = int(rate * total_s)

    progress = _ProgressLog(spark)
    poller = _LogPoller(path, POLL_S)
    poller.start()
    query = recorder = None
    try:
        query, recorder = start_stream(spark, config, ds)
        progress.query_id = str(query.id)
        # Warm the stream first (code generation, table creation, first commits): a few
        # micro-batches of a small unpaced set, so the paced phase starts on a warm query.
        t0 = time.monotonic()
        sent = [WARM_RECORDS]  # records per produce call (each starts the pool over: its bad records)
        workload.produce(config.kafka.bootstrap_servers, ds.topic, WARM_RECORDS, RECORD_BYTES)
        warm_deadline = time.monotonic() + WARM_TIMEOUT_S
        while time.monotonic() < warm_deadline:
            _check(query)
            if _position(progress, ds.topic) >= WARM_RECORDS and _data_batches(progress) >= WARM_BATCHES:
                break
            workload.produce(config.kafka.bootstrap_servers, ds.topic, WARM_RECORDS // 10, RECORD_BYTES)
            sent.append(WARM_RECORDS // 10)
            time.sleep(0.5)
        warm_records = sum(sent)
        sent.append(count)
        warm_s = time.monotonic() - t0
        h.log(f"P3: stream warm after {warm_s:.1f}s ({_data_batches(progress)} micro-batches, {warm_records:,} "
              f"records); now {count:,} records at {rate:,.0f}/s for {total_s:.0f}s (trigger {trigger!r}, "
              f"maxOffsetsPerTrigger {max_offsets:,})")
        paced_t0 = time.time()
        proc = _producer(config.kafka.bootstrap_servers, ds.topic, count, rate)
        produce_s = _wait_producer(proc, "P3", total_s + 120)
        # Wait for the last rows (the stream may be behind if the rate is above its capacity).
        t0 = time.monotonic()
        end = _end_offsets_sum(config, ds.topic)
        while time.monotonic() < t0 + DRAIN_S:
            _check(query)
            if _position(progress, ds.topic) >= end:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        drain_s = time.monotonic() - t0
    finally:
        if query is not None:
            query.stop()
        if recorder is not None:
            spark.streams.removeListener(recorder)
            recorder.positions.close()
        poller.stop.set()
        poller.join()
        progress.close()

    # -- rows → latency --------------------------------------------------------------------
    batch_of_version, visible_of_batch = {}, {}
    sends, visible, mtimes, batch_ids = [], [], [], []
    for v, info in sorted(poller.versions.items()):
        txn = info["txn"]
        if not info["adds"] or not txn or not str(txn.get("appId", "")).startswith("loglake-speed-"):
            continue
        b = int(txn["version"])
        batch_of_version[v] = b
        visible_of_batch[b] = info["seen"]
        for f in info["adds"]:
            col = pq.read_table(os.path.join(path, f), columns=["_kafka_timestamp"]).column("_kafka_timestamp")
            ts = col.cast(pa.timestamp("us"), safe=False).cast(pa.int64()).to_pylist()  # µs since epoch
            sends += [x / 1e6 for x in ts]
            visible += [info["seen"]] * len(ts)
            mtimes += [info["mtime"]] * len(ts)
            batch_ids += [b] * len(ts)
    if not sends:
        raise RuntimeError("P3: no speed rows became visible")
    starts = {b: _epoch(p["timestamp"]) for b, p in progress.events.items()}
    cut = paced_t0 + warmup_s
    per_window: list[list[float]] = [[] for _ in range(windows)]
    pooled, pooled_mtime, queue, in_batch = [], [], [], []
    for s, vis, mt, b in zip(sends, visible, mtimes, batch_ids):
        if s < cut:
            continue
        w = int((s - cut) // window_s)
        if w >= windows:
            continue
        lat = vis - s
        per_window[w].append(lat)
        pooled.append(lat)
        pooled_mtime.append(mt - s)
        if b in starts:
            queue.append(starts[b] - s)
            in_batch.append(vis - starts[b])
    runs = [{"window": i, **_stats(v)} for i, v in enumerate(per_window)]
    measured_batches = sorted(b for b in set(batch_ids) if b in progress.events
                              and _epoch(progress.events[b]["timestamp"]) >= cut)
    durations = {k: _stats([progress.events[b]["durationMs"].get(k, 0) / 1000 for b in measured_batches])
                 for k in DURATION_KEYS}
    commit_after_start = _stats([visible_of_batch[b] - starts[b] for b in measured_batches if b in visible_of_batch])
    # What a micro-batch still does after its rows are visible (the quarantine append, the
    # offset commit): time the next micro-batch, and so the queue, waits for.
    ends = {b: starts[b] + progress.events[b]["durationMs"]["triggerExecution"] / 1000 for b in measured_batches}
    after_visible = _stats([ends[b] - visible_of_batch[b] for b in measured_batches if b in visible_of_batch])
    batch_rows = [_records(progress.events[b], ds.topic) for b in measured_batches]
    gaps = [starts[b] - starts[a] for a, b in zip(measured_batches, measured_batches[1:])]
    landed_rows = len(sends)
    expected = sum(n - workload.bad_count(n) for n in sent)
    return {
        "trigger_interval": trigger, "max_offsets_per_trigger": max_offsets, "rate": round(rate),
        "produced": count, "warm_records": warm_records, "warm_s": round(warm_s, 1),
        "load_average": os.getloadavg(), "valid_expected": expected, "valid_visible": landed_rows,
        "complete": landed_rows >= expected, "produce_s": produce_s, "drain_s": round(drain_s, 1),
        "warmup_s": warmup_s, "window_s": window_s, "runs": runs, "pooled": _stats(pooled),
        "pooled_by_commit_mtime": _stats(pooled_mtime),
        "queue_s": _stats(queue), "in_batch_s": _stats(in_batch),
        "commit_visible_after_trigger_start_s": commit_after_start, "batch_end_after_visible_s": after_visible,
        "micro_batches": len(measured_batches), "batch_rows": _stats(batch_rows),
        "trigger_start_gap_s": _stats(gaps), "duration_s": durations,
        "poll_interval_s": POLL_S, "polls": poller.polls,
    }


# -- 3. floor -----------------------------------------------------------------------------
def measure_floor(h: Harness, rate: float, seconds: float) -> dict:
    """Bare Kafka: the same producer at the same rate, a confluent-kafka consumer; receive - CreateTime."""
    from confluent_kafka import Consumer, TopicPartition

    from loglake.kafka.admin import ensure_topic

    config = h.config("freshness-floor", extra_datasets={workload.DATASET: workload.dataset_file(PARTITIONS)})
    ds = config.dataset(workload.DATASET)
    topic = ensure_topic(config, ds, topic=f"{ds.topic}-floor")
    count = int(rate * seconds)
    consumer = Consumer(config.kafka_client_conf(**{"group.id": "loglake-bench-p3-floor", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    lat: list[tuple[float, float]] = []
    done = threading.Event()

    def consume():
        got = 0
        while not done.is_set() and got < count:
            for m in consumer.consume(1000, 0.05):
                now = time.time()
                if m.error() is None:
                    lat.append((m.timestamp()[1] / 1000, now))
                    got += 1

    t = threading.Thread(target=consume, name="p3-floor-consumer", daemon=True)
    t.start()
    proc = _producer(config.kafka.bootstrap_servers, topic, count, rate)
    _wait_producer(proc, "P3 floor", seconds + 120)
    t.join(30)
    done.set()
    t.join()
    consumer.close()
    first = min(s for s, _ in lat)
    values = [r - s for s, r in lat if s >= first + FLOOR_WARMUP_S]
    return {"rate": round(rate), "produced": count, "received": len(lat), **_stats(values),
            "consumer": "confluent-kafka, assigned, librdkafka defaults (fetch.wait.max.ms 500, fetch.min.bytes 1)",
            "producer": "loglake.testing.workload.produce (linger.ms 5, lz4, acks=all, idempotent) in its own process"}


# -- the module ---------------------------------------------------------------------------
def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P3" not in only:
        return []
    trigger = os.environ.get("LOGLAKE_BENCH_P3_TRIGGER", TRIGGER)
    max_offsets = int(os.environ.get("LOGLAKE_BENCH_P3_MAX_OFFSETS", MAX_OFFSETS))
    warmup_s, window_s = (8.0, 8.0) if h.quick else (WARMUP_S, WINDOW_S)
    windows = max(1, WINDOWS_PER_REPEAT * h.repeats)

    cap_detail = None
    if os.environ.get("LOGLAKE_BENCH_P3_RATE"):
        rate = float(os.environ["LOGLAKE_BENCH_P3_RATE"])
        capacity, source = 2 * rate, "LOGLAKE_BENCH_P3_RATE (rate given; capacity = 2 x rate)"
    elif _capacity_from_harness(h):
        capacity, source = _capacity_from_harness(h), "P1 (bench.speed) steady-state figure left on the harness"
        rate = capacity / 2
    else:
        cap_detail = measure_capacity(h)
        capacity = cap_detail["records_per_second"]
        source = (f"measured here: {cap_detail['records']:,} 1 KB records, available-now, micro-batches of "
                  f"{cap_detail['batch']:,}, after a warm-up run")
        rate = capacity / 2

    fresh = measure_freshness(h, rate, trigger, max_offsets, warmup_s, window_s, windows)
    h.log(f"P3: speed layer pooled {fresh['pooled']}; queue {fresh['queue_s']}; in batch {fresh['in_batch_s']}")
    floor = measure_floor(h, rate, 10.0 if h.quick else FLOOR_S)
    h.log(f"P3: bare Kafka p50 {floor['p50']:.4f}s p99 {floor['p99']:.4f}s max {floor['max']:.4f}s")

    runs = fresh["runs"]
    med = {q: round(statistics.median(r[q] for r in runs if r["count"]), 3) for q in ("p50", "p99", "max")}
    met = med["p50"] <= 1.0 and med["p99"] <= 2.0 and fresh["complete"]
    d = fresh["duration_s"]
    summary = (f"p50 {med['p50']:.2f} s, p99 {med['p99']:.2f} s, max {med['max']:.2f} s at {rate:,.0f} rec/s "
               f"(half of {capacity:,.0f}); trigger {trigger!r}; bare Kafka p99 {floor['p99'] * 1000:.0f} ms; "
               f"micro-batch median {d['triggerExecution']['p50']:.2f} s (addBatch {d['addBatch']['p50']:.2f} s; rows "
               f"visible {fresh['commit_visible_after_trigger_start_s']['p50']:.2f} s after its start); "
               f"load {os.getloadavg()[1]:.1f}")
    chart = {"kind": "panels", "panels": [
        {"kind": "bar", "title": f"{q} (goal {g} s)" if g else q,
         "labels": ["speed layer → serving view", "bare Kafka"],
         "values": [med[q], round(floor[q], 4)], "colors": ["tab:blue", "tab:gray"], "ylabel": "seconds",
         "goal": g}
        for q, g in (("p50", 1.0), ("p99", 2.0), ("max", None))]}
    m = result("P3", "freshness: send → visible in the serving view, at half capacity", med["p99"], "s",
               goal="p50 <= 1 s, p99 <= 2 s", met=met,
               reference={"bare Kafka produce→consume p99 (s)": round(floor["p99"], 4),
                          "bare Kafka p50 (s)": round(floor["p50"], 4)},
               runs=runs,
               detail={"p50_s": med["p50"], "p99_s": med["p99"], "max_s": med["max"],
                       "rate_records_per_second": round(rate), "capacity_records_per_second": round(capacity),
                       "capacity_source": source, "capacity_run": cap_detail, "record_bytes": RECORD_BYTES,
                       "partitions": PARTITIONS, "mode": "in-process: loglake.speed.stream.start_stream in the harness's "
                       "Spark session; producer (loglake.testing.workload.produce) in a process of its own",
                       "visibility": "a row is visible when the Delta commit that added it exists in the speed "
                       "table's _delta_log (polled every poll_interval_s; the error bound). No batch run: every "
                       "batch watermark is 0, so the serving view is exactly the speed table.",
                       "value": "median over the windows (runs) of each window's percentile; pooled in freshness",
                       "freshness": fresh, "floor": floor},
               chart=chart)
    m["summary"] = summary
    return [m]
