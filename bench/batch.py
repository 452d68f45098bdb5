"""P4 batch recompute: the batch layer's records/s on a 5,000,000-record offset range ÷ Spark's
bare read-and-count of the same range.

Issue 6: "P4 batch recompute: records/s for recomputing a 5,000,000-record offset range ÷
Spark's bare read-and-count of the same range. Goal >= 0.5."

1. ``RECORDS`` ``bench_events`` records (``loglake.testing.workload``, about 1 in 1000 malformed) go to
   a 6-partition topic of the module's own, ``WARMUP_RECORDS`` first (step 4), then the rest. Record size: the workload's smallest record
   (``RECORD_BYTES`` = 100 B asked; the typed fields alone make a ~170 B JSON value, no
   padding): 5M × 1 KB would be 5 GB of log and far more minutes than the bench has.
2. The plan is the whole range, ``[0, end)`` of every partition (``loglake.core.plans.Plan``).
   Recompute = the real batch layer, ``loglake.batch.recompute.run_batch``: read exactly those
   offsets, parse/validate/transform, replace them in ``batch.bench_events`` and in the
   batch part of ``quarantine.bench_events`` (``replaceWhere``), append the ledger. Running
   the same range again replaces it again (the batch layer is repeatable), so every run is
   a real re-run on the same tables.
3. Reference: Spark's bare read-and-count of the same range in the same session —
   ``loglake.records.kafka_source.read_ranges`` (the batch layer's own Kafka options: assign, exact
   starting/ending offsets) then ``.count()``.
4. One warm-up of each on the first ``WARMUP_RECORDS`` (not counted: JVM start, code
   generation, JIT, the tables' first commit; a full-range warm-up would cost another full
   run), then a second, warm recompute and count of that slice and of a tenth of it as
   probes of the pace: seconds = fixed + per record x records, fitted to the two sizes (a
   run's fixed costs — jobs, commits, the ledger — do not grow with the range; a pace from
   one size multiplied them, and projected 656 s for three pairs of 5M that would have
   taken ~225 s). If ``h.repeats`` bare counts and recomputes of ``RECORDS`` at that pace
   would not end within the module's time budget
   (``LOGLAKE_BENCH_P4_BUDGET`` seconds after it starts, default ``BUDGET_S``; 0 = no
   limit), only as many records as fit are produced and measured (``detail.complete``
   false, ``met`` not judged). Then ``h.repeats`` pairs on the whole produced range, bare count and recompute interleaved so background load on the
   shared cores hits both alike.
   Medians reported, with every run's seconds, the JVM's CPU seconds (user+sys of the
   Spark process during the run) and, for the last recompute, its Spark stages.
5. Exact-replace check after the last run: ``batch.bench_events`` holds exactly
   ``records − quarantined`` rows, each (partition, offset) once; the batch part of the
   quarantine holds the rest; the ledger has one row per partition per run.
6. Profile (unless ``LOGLAKE_BENCH_P4_PROFILE=0``): one more recompute of the warm-up slice,
   after the measured runs and not counted, under Java Flight Recorder, execution samples
   only (``JFC``); its seconds and CPU are beside the unprofiled probe's of the same slice,
   so any overhead shows (on a busy machine profiled runs were up to ~3x slower or not at
   all, so a measured run is never profiled). Its
   execution samples are attributed to the layer they are in (Kafka fetch, JSON →
   VARIANT, from_json, Parquet write, ...) — see ``CATEGORIES`` — with the top self
   frames, in ``detail.profile``.

Value: median recompute records/s ÷ median bare read-count records/s; goal >= 0.5.

P12 (issue 47), in the same runs: the recompute ÷ the batch job a Spark user would write by
hand for the same offset ranges (``hand_batch``: Spark's Kafka source with the exact
starting/ending offsets, ``from_json`` with the dataset's fields, ``replaceWhere`` of those
offsets into a Delta table of its own; no validation, quarantine, counts or ledger), one run
of it beside each bare count and recompute (and one on the warm-up slice first, not counted).
Goal >= 1.0: loglake's recompute costs no more than that job.
``LOGLAKE_BENCH_P4_RECORDS`` overrides the record count (figures then not comparable).
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from bench.harness import Harness, jvm_pid, median, result
from loglake.core.processes import cpu_seconds
from loglake.testing import workload

RECORDS = 5_000_000
QUICK_RECORDS = 300_000
WARMUP_RECORDS = 300_000  # the warm-up slice (quick: a tenth of the range)
BUDGET_S = 480.0          # the module's wall budget (produce, warm-up, measured runs, checks)
PARTITIONS = 6
RECORD_BYTES = 100  # asked; the workload's typed fields alone make ~170 B (no padding then)
GOAL = 0.5

# Profile attribution: a sample goes to the first category (in this order) any frame of its
# stack matches, so the layer nearest the work wins over the wrappers around it (every task
# of a write runs inside Delta's writer and generated code; Kafka and parsing run inside it).
CATEGORIES = [
    ("task set-up (deserialise, compile code)", ("java.io.ObjectInputStream", "org.codehaus.janino",
                                                 "codegen.CodeGenerator", "codegen.Generate")),
    ("Kafka fetch (consumer, decompress, to rows)", ("org.apache.kafka.", "net.jpountz", "kafka010.")),
    ("JSON → VARIANT (try_parse_json, variant_get)", ("variant", "Variant")),
    ("from_json (Jackson)", ("JsonToStructs", "JacksonParser", "com.fasterxml.jackson", "json.")),
    ("regex (pattern checks)", ("java.util.regex",)),
    ("timestamp parsing", ("DateTimeUtils", "java.time.", "TimestampFormatter")),
    ("Parquet write (encode, compress)", ("org.apache.parquet", "xerial.snappy", "com.github.luben",
                                         "ParquetOutputWriter", "ParquetWriteSupport")),
    ("Delta per-file statistics", ("sql.delta.stats",)),
    ("observe (counts, collect_list)", ("CollectList", "AggregatingAccumulator", "Observation")),
    ("generated code (validate, filter, project)", ("GeneratedClass",)),
    ("Delta (log, commit, writer)", ("org.apache.spark.sql.delta", "io.delta")),
]
# Execution samples only (every 10 ms per running Java thread), the least JFR can record.
JFC = """<?xml version="1.0" encoding="UTF-8"?>
<configuration version="2.0" label="loglake P4" description="execution samples only">
  <event name="jdk.ExecutionSample"><setting name="enabled">true</setting><setting name="period">10 ms</setting></event>
</configuration>
"""
_FRAME = re.compile(r"^\s{4}([^\s(]+)\(", re.M)
_THREAD = re.compile(r'sampledThread = "([^"]*)"')


def hand_rows(spark, bootstrap: str, ds, ranges):
    """The rows of exact offset ranges as a Spark user would read them: Spark's Kafka source,
    ``from_json`` with the dataset's fields."""
    import json

    from pyspark.sql import functions as F

    from loglake.core.contracts import FIELD_TYPES

    topic = ranges[0].topic
    schema = ", ".join(f"{name} {FIELD_TYPES[spec.type]}" for name, spec in ds.fields.items())
    return (spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("assign", json.dumps({topic: [r.partition for r in ranges]}))
            .option("startingOffsets", json.dumps({topic: {str(r.partition): r.start for r in ranges}}))
            .option("endingOffsets", json.dumps({topic: {str(r.partition): r.end for r in ranges}}))
            .load()
            .select("partition", "offset", F.from_json(F.col("value").cast("string"), schema).alias("v"))
            .select("partition", "offset", "v.*"))


def hand_batch(spark, bootstrap: str, ds, ranges, path: str) -> int:
    """P12's reference, as a Spark user would write it for exact offset ranges: ``hand_rows``
    replacing those offsets in a Delta table (``replaceWhere``; the first run makes the table).
    Its row count."""
    where = " OR ".join(f"(partition = {r.partition} AND offset >= {r.start} AND offset < {r.end})" for r in ranges)
    (hand_rows(spark, bootstrap, ds, ranges).write.format("delta").mode("overwrite")
     .option("replaceWhere", where).save(path))
    return sum(r.size for r in ranges)


def _timed(pid: int, fn):
    """(fn(), wall seconds, JVM CPU seconds)."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, cpu_seconds(pid) - c0


def _stage_ids(spark) -> set[int]:
    return {s["stage"] for s in _stages(spark)}


def _stages(spark) -> list[dict]:
    """Every completed stage of the session (Spark's status store; empty if unavailable)."""
    try:
        jvm, gw = spark._jvm, spark.sparkContext._gateway
        store = spark._jsparkSession.sparkContext().statusStore()
        it = store.stageList(jvm.java.util.ArrayList(), False, False, gw.new_array(jvm.double, 0),
                             jvm.java.util.ArrayList()).iterator()
        out = []
        while it.hasNext():
            st = it.next()
            if not (st.submissionTime().isDefined() and st.completionTime().isDefined()):
                continue
            out.append({"stage": st.stageId(), "tasks": st.numTasks(),
                        "wall_s": round((st.completionTime().get().getTime()
                                         - st.submissionTime().get().getTime()) / 1000, 2),
                        "task_run_s": round(st.executorRunTime() / 1000, 1),
                        "task_cpu_s": round(st.executorCpuTime() / 1e9, 1),
                        "input_records": st.inputRecords(), "output_records": st.outputRecords()})
        return sorted(out, key=lambda d: d["stage"])
    except Exception:  # an internal API: the breakdown is a nicety, never a failure
        return []


def _stage_summary(stages: list[dict], kafka_tasks: int, records: int, quarantined: int) -> dict:
    """A recompute's stages grouped: Kafka passes (one task per topic partition) by what they
    wrote, and the rest (Delta log/snapshot, replaceWhere's delete scan, ledger)."""
    groups: dict[str, dict] = {}
    for st in stages:
        if st["tasks"] == kafka_tasks and st["output_records"] == records:
            key = "pass 1: read + validate + write valid rows"
        elif st["tasks"] == kafka_tasks and st["output_records"] == quarantined and quarantined:
            key = "pass 2: re-read + validate + write quarantine"
        else:
            key = "other stages (Delta snapshot/delete scan/commit, ledger)"
        g = groups.setdefault(key, {"stages": 0, "wall_s": 0.0, "task_run_s": 0.0, "task_cpu_s": 0.0})
        g["stages"] += 1
        for k in ("wall_s", "task_run_s", "task_cpu_s"):
            g[k] = round(g[k] + st[k], 2)
    return groups


def summarise_profile(text: str, top: int = 10) -> dict:
    """``jfr print --events jdk.ExecutionSample`` output → samples by category and top self frames."""
    samples = text.split("jdk.ExecutionSample {")[1:]
    cats: collections.Counter = collections.Counter()
    selfs: collections.Counter = collections.Counter()
    task_samples = 0
    for s in samples:
        frames = _FRAME.findall(s)
        thread = _THREAD.search(s)
        in_task = bool(thread and thread.group(1).startswith("Executor task launch worker"))
        task_samples += in_task
        if frames:
            selfs[frames[0]] += 1
        cat = next((name for name, pats in CATEGORIES if any(p in f for f in frames for p in pats)), None)
        cats[cat or ("other, in Spark tasks" if in_task else "other threads (driver, Py4J, broker I/O, GC helpers)")] += 1
    n = len(samples) or 1
    return {
        "samples": len(samples), "task_thread_share": round(task_samples / n, 3),
        "by_layer": {k: round(v / n, 3) for k, v in cats.most_common()},
        "top_self_frames": {k: round(v / n, 3) for k, v in selfs.most_common(top)},
    }


def profiled(spark, fn, path: Path, h: Harness) -> tuple[object, dict]:
    """Run ``fn`` under JFR (execution samples only, ``JFC``) in the Spark JVM; its result and
    the summary (or ``{"error": ...}`` when JFR is unavailable)."""
    pid = jvm_pid(spark)
    jcmd, jfr = shutil.which("jcmd"), shutil.which("jfr")
    if not (jcmd and jfr):
        return fn(), {"error": "jcmd/jfr not on PATH"}
    name = f"p4-{os.getpid()}"
    settings = path.with_suffix(".jfc")
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(JFC)
    start = subprocess.run([jcmd, str(pid), "JFR.start", f"name={name}", f"settings={settings}", f"filename={path}"],
                           capture_output=True, text=True)
    if start.returncode != 0 or "Started recording" not in start.stdout:
        return fn(), {"error": f"JFR.start failed: {(start.stdout + start.stderr).strip()[-300:]}"}
    try:
        out = fn()
    finally:
        subprocess.run([jcmd, str(pid), "JFR.stop", f"name={name}"], capture_output=True, text=True)
    t0 = time.monotonic()
    printed = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(path)],
                             capture_output=True, text=True)
    if printed.returncode != 0:
        return out, {"error": f"jfr print failed: {printed.stderr.strip()[-300:]}"}
    summary = summarise_profile(printed.stdout)
    h.log(f"JFR: profile of {summary['samples']} samples summarised in {time.monotonic() - t0:.1f}s")
    return out, summary


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and not {"P4", "P12"} & set(only):
        return []
    from pyspark.sql import functions as F

    from loglake.core.offsets import OffsetRange
    from loglake.core.predicates import range_predicate
    from loglake.kafka.admin import ensure_topic, log_bounds
    from loglake.core.plans import Plan
    from loglake.ledger.ranges import ledger_rows
    from loglake.tables import snapshot
    from loglake.batch.recompute import run_batch
    from loglake.records.kafka_source import read_ranges

    started = time.monotonic()
    count = int(os.environ.get("LOGLAKE_BENCH_P4_RECORDS") or (QUICK_RECORDS if h.quick else RECORDS))
    config = h.config("batch", extra_datasets={workload.DATASET: workload.dataset_file(PARTITIONS)})
    ds = config.dataset(workload.DATASET)
    topic = ensure_topic(config, ds)
    values = [len(v) for _k, v in workload.pool(RECORD_BYTES)]
    value_bytes = sum(values) / len(values)
    raw_budget = os.environ.get("LOGLAKE_BENCH_P4_BUDGET")
    budget = float(raw_budget) if raw_budget else BUDGET_S

    def whole_log() -> list:
        return [OffsetRange(topic, p, lo, hi) for p, (lo, hi) in sorted(log_bounds(config, topic).items())]

    # -- the warm-up slice first: the head of every partition ---------------------------------
    warm_n = min(WARMUP_RECORDS, count // 10 if h.quick else count)
    h.log(f"P4: producing {warm_n:,} warm-up records (~{value_bytes:.0f} B values) to {topic} ({PARTITIONS} partitions)")
    produce_s = workload.produce(h.bootstrap, topic, warm_n, RECORD_BYTES)
    expected_bad = workload.bad_count(warm_n)
    warm_plan = Plan(ds.name, tuple(whole_log()), "backfill", ("P4 benchmark: warm-up slice",))

    spark = h.spark(config)
    pid = jvm_pid(spark)

    def bare(rs) -> int:
        return read_ranges(spark, config, list(rs)).count()

    hand_path = str(h.root / "batch" / "p12-hand-written")

    def hand(rs) -> int:
        return hand_batch(spark, h.bootstrap, ds, list(rs), hand_path)

    # -- warm-up: one of each on the slice, not counted; a warm probe of the pace ---------------
    n_warm, warm_bare_s, _ = _timed(pid, lambda: bare(warm_plan.ranges))
    warm, warm_s, _ = _timed(pid, lambda: run_batch(spark, config, ds, warm_plan, "p4-warmup"))
    _probe, probe_s, probe_cpu = _timed(pid, lambda: run_batch(spark, config, ds, warm_plan, "p4-probe"))
    n_probe, probe_bare_s, _ = _timed(pid, lambda: bare(warm_plan.ranges))
    small_plan = Plan(ds.name, tuple(OffsetRange(r.topic, r.partition, r.start, r.start + max(1, r.size // 10))
                                     for r in warm_plan.ranges), "backfill", ("P4 benchmark: a tenth of the slice",))
    _small, small_s, _ = _timed(pid, lambda: run_batch(spark, config, ds, small_plan, "p4-probe-small"))
    _n, small_bare_s, _ = _timed(pid, lambda: bare(small_plan.ranges))
    _n, warm_hand_s, _ = _timed(pid, lambda: hand(warm_plan.ranges))  # P12's warm-up, not counted
    h.log(f"P4: warm-up on {warm_plan.offsets:,} records: bare read+count {warm_bare_s:.1f}s, recompute "
          f"{warm_s:.1f}s ({warm.records:,} + {warm.quarantined:,} quarantined); warm probe: recompute "
          f"{probe_s:.1f}s, bare {probe_bare_s:.1f}s")

    # -- the measured range: the count, unless the runs would not fit the budget ------
    # A pair (bare count + recompute) of n records takes fixed + per_record x n seconds. The
    # slice's two runs of each (warm-up, probe) give its time: the faster (a slow one is the
    # machine's noise — 10.2 s after 8.5 s once — and projected 414 s for runs of 183 s).
    slice_s = min(warm_s, probe_s) + min(warm_bare_s, probe_bare_s)
    per_record = max(0.0, (slice_s - small_s - small_bare_s) / max(1, warm_plan.offsets - small_plan.offsets))
    fixed = max(0.0, small_s + small_bare_s - per_record * small_plan.offsets)
    per_produced = produce_s / max(1, warm_n)
    profiling = os.environ.get("LOGLAKE_BENCH_P4_PROFILE", "1") != "0"
    reserve = 20 + (3 * probe_s if profiling else 0)  # the checks; the profiled run (JFR slows it)
    left = (started + budget - time.monotonic() - reserve) if budget > 0 else float("inf")
    # Each repeat runs the hand-written job too: counted as costing what a pair does (it reads
    # and writes as the recompute does), so a repeat is two pairs.
    fit = (left - 2 * h.repeats * fixed + warm_n * per_produced) / max(1e-9, 2 * h.repeats * per_record + per_produced)
    target = count if fit >= count else max(warm_n, int(fit))
    complete = target >= count
    if not complete:
        h.log(f"P4: {h.repeats} runs of {count:,} records would take ~{2 * h.repeats * (fixed + per_record * count):.0f}s at the "
              f"probe's pace (the hand-written job's runs as much again); {left:.0f}s of the {budget:.0f}s budget "
              f"left: measuring {target:,} records")
    h.log(f"P4: producing {target - warm_n:,} more records")
    produce_s += workload.produce(h.bootstrap, topic, target - warm_n, RECORD_BYTES) if target > warm_n else 0.0
    expected_bad += workload.bad_count(target - warm_n)
    ranges = whole_log()
    plan = Plan(ds.name, tuple(ranges), "backfill", ("P4 benchmark: the whole produced range",))
    total = plan.offsets
    h.log(f"P4: {total:,} offsets produced in {produce_s:.1f}s ({total / produce_s:,.0f}/s); plan "
          + ", ".join(f"[{r.partition}] [{r.start}, {r.end})" for r in ranges))
    measured = plan.offsets

    # -- measured: bare count and recompute of the whole range, interleaved ---------------
    bare_runs, batch_runs, hand_runs = [], [], []
    profile = stages = None
    for i in range(h.repeats):
        n, s, cpu = _timed(pid, lambda: bare(ranges))
        bare_runs.append({"seconds": round(s, 3), "jvm_cpu_s": round(cpu, 1), "records": n,
                          "records_per_s": round(n / s)})
        seen = _stage_ids(spark)
        summary, s2, cpu2 = _timed(pid, lambda: run_batch(spark, config, ds, plan, f"p4-run-{i + 1}"))
        stages = [st for st in _stages(spark) if st["stage"] not in seen]
        batch_runs.append({"seconds": round(s2, 3), "run_batch_seconds": summary.seconds,
                           "jvm_cpu_s": round(cpu2, 1), "records": summary.records,
                           "quarantined": summary.quarantined,
                           "records_per_s": round((summary.records + summary.quarantined) / s2)})
        n3, s3, cpu3 = _timed(pid, lambda: hand(ranges))
        hand_runs.append({"seconds": round(s3, 3), "jvm_cpu_s": round(cpu3, 1), "records": n3,
                          "records_per_s": round(n3 / s3)})
        h.log(f"P4: run {i + 1}/{h.repeats}: bare read+count {s:.1f}s ({n / s:,.0f}/s, JVM CPU {cpu:.0f}s); "
              f"recompute {s2:.1f}s ({batch_runs[-1]['records_per_s']:,}/s, JVM CPU {cpu2:.0f}s); "
              f"P12's hand-written job {s3:.1f}s ({hand_runs[-1]['records_per_s']:,}/s, JVM CPU {cpu3:.0f}s)")

    # -- profile: one more recompute of the warm-up slice under JFR, not counted ----------------
    if profiling:
        (_summary, prof_s, prof_cpu), profile = profiled(
            spark, lambda: _timed(pid, lambda: run_batch(spark, config, ds, warm_plan, "p4-profile")),
            h.root / "batch" / "p4-recompute.jfr", h)
        profile = {"run": f"one extra recompute of the warm-up slice ({warm_plan.offsets:,} records) under JFR, "
                          "after the measured runs (not counted)",
                   "seconds": round(prof_s, 1), "jvm_cpu_s": round(prof_cpu, 1),
                   "same_slice_unprofiled": {"seconds": round(probe_s, 1), "jvm_cpu_s": round(probe_cpu, 1)},
                   **profile}
        h.log(f"P4: profiled recompute of the slice {prof_s:.1f}s (JVM CPU {prof_cpu:.0f}s; unprofiled probe "
              f"{probe_s:.1f}s, {probe_cpu:.0f}s); by layer {profile.get('by_layer')}")
    runs_done = 3 + h.repeats + (profile is not None)  # warm-up, the two probes, measured, profile
    last = batch_runs[-1]
    stage_groups = _stage_summary(stages or [], len(ranges), last["records"], last["quarantined"])
    h.log(f"P4: last recompute's stages: {stage_groups}")

    # -- exact-replace check --------------------------------------------------------------
    batch_path, q_path = config.table_path(ds, "batch"), config.table_path(ds, "quarantine")
    per_part = {r["_partition"]: r.asDict() for r in spark.read.format("delta").load(batch_path)
                .groupBy("_partition").agg(F.count("*").alias("rows"),
                                           F.countDistinct("_offset").alias("distinct_offsets"),
                                           F.min("_offset").alias("min"), F.max("_offset").alias("max")).collect()}
    batch_rows = sum(r["rows"] for r in per_part.values())
    batch_distinct = sum(r["distinct_offsets"] for r in per_part.values())
    quarantine_rows = (spark.read.format("delta").load(q_path)
                       .where(f"_layer = 'batch' AND ({range_predicate(ranges)})").count())
    ends = {r.partition: r.end for r in ranges}
    in_range = all(0 <= r["min"] and r["max"] < ends[p] for p, r in per_part.items())
    ledger = [r for r in ledger_rows(config, ds) if str(r["run_id"]).startswith("p4-")]
    exact = (batch_rows == batch_distinct == measured - last["quarantined"] and quarantine_rows == last["quarantined"]
             and last["quarantined"] == expected_bad and in_range and len(ledger) == runs_done * len(ranges))
    table = snapshot(batch_path)
    h.log(f"P4: exact replace after {runs_done} runs: batch {batch_rows:,} rows ({batch_distinct:,} distinct "
          f"offsets), quarantine(batch) {quarantine_rows:,} (produced bad {expected_bad:,}), "
          f"ledger rows {len(ledger)}: {'ok' if exact else 'MISMATCH'}")

    # -- result -----------------------------------------------------------------------------
    bare_rps = median([r["records_per_s"] for r in bare_runs])
    batch_rps = median([r["records_per_s"] for r in batch_runs])
    ratio = batch_rps / bare_rps
    detail = {
        "records": measured, "records_asked": count, "complete": complete,
        "budget_s": budget if budget > 0 else None,
        "probe": {"records": warm_plan.offsets, "recompute_s": round(probe_s, 2), "bare_s": round(probe_bare_s, 2),
                  "small_records": small_plan.offsets, "small_recompute_s": round(small_s, 2),
                  "small_bare_s": round(small_bare_s, 2), "pair_fixed_s": round(fixed, 2),
                  "projected_full_pair_s": round(fixed + per_record * count, 1)},
        "partitions": PARTITIONS, "record_bytes_asked": RECORD_BYTES,
        "value_bytes_mean": round(value_bytes, 1), "malformed_every": workload.BAD_EVERY,
        "produce_seconds": round(produce_s, 1), "produce_records_per_s": round(total / produce_s),
        "plan": plan.to_json(),
        "bare_read_count": {"records_per_s": bare_rps, "seconds_median": median([r["seconds"] for r in bare_runs]),
                            "warmup_seconds": round(warm_bare_s, 1),
                            "what": "loglake.records.kafka_source.read_ranges(same ranges).count(), same session"},
        "recompute": {"records_per_s": batch_rps, "seconds_median": median([r["seconds"] for r in batch_runs]),
                      "warmup_seconds": round(warm_s, 1), "records": last["records"],
                      "quarantined": last["quarantined"],
                      "what": "loglake.batch.recompute.run_batch(whole range): replaceWhere batch + quarantine, ledger"},
        # The same ratio per JVM CPU second (less sensitive to other processes on the cores).
        "ratio_by_jvm_cpu": round(median([r["jvm_cpu_s"] for r in bare_runs])
                                  / max(1e-9, median([r["jvm_cpu_s"] for r in batch_runs])), 3),
        "warmup": f"one bare read+count and one recompute of the first {warm_plan.offsets:,} records of the range "
                  "before the measured runs (JVM start, code generation, JIT, first commit excluded); measured "
                  "runs of the whole range interleaved bare/recompute",
        "last_recompute_stages": {"groups": stage_groups, "stages": stages or []},
        "exact_replace": {"ok": exact, "runs_on_the_range": runs_done, "batch_rows": batch_rows,
                          "batch_distinct_offsets": batch_distinct, "expected_batch_rows": measured - last["quarantined"],
                          "quarantine_batch_rows": quarantine_rows, "expected_quarantined": expected_bad,
                          "offsets_within_range": in_range, "ledger_rows": len(ledger),
                          "expected_ledger_rows": runs_done * len(ranges),
                          "batch_table": {"version": table.version, "files": table.files, "bytes": table.bytes}},
        "load_average_end": os.getloadavg(),
        "module_wall_s": round(time.monotonic() - started, 1),
    }
    if profile is not None:
        detail["profile"] = profile
    panels = [{"kind": "bar", "labels": ["bare read+count", "batch recompute"], "values": [bare_rps, batch_rps],
               "ylabel": "records/s (median)", "colors": ["tab:gray", "tab:blue"],
               "title": f"{measured:,} records, ~{value_bytes:.0f} B; ratio {ratio:.2f} (goal ≥ {GOAL})"}]
    if profile and profile.get("by_layer"):
        layers = list(profile["by_layer"].items())[:8]
        panels.append({"kind": "bar", "labels": [k.split(" (")[0] for k, _ in layers],
                       "values": [100 * v for _, v in layers], "ylabel": "% of JFR samples", "rotate": 30,
                       "title": f"where a recompute's time goes (JFR, {profile['samples']:,} samples)"})
    m = result(
        "P4", "Batch recompute vs bare read", round(ratio, 3), "ratio", goal=f">= {GOAL}",
        met=(ratio >= GOAL) if complete else None,  # a budget-limited range does not test the goal
        reference={"bare read+count": f"{bare_rps:,.0f} records/s", "recompute": f"{batch_rps:,.0f} records/s"},
        runs=[{"phase": "bare read+count", **{k: [r[k] for r in bare_runs] for k in ("seconds", "jvm_cpu_s")}},
              {"phase": "recompute", **{k: [r[k] for r in batch_runs] for k in ("seconds", "jvm_cpu_s")}}],
        detail=detail,
        chart={"kind": "panels", "panels": panels} if len(panels) > 1 else panels[0],
    )
    top = ""
    if profile and profile.get("by_layer"):
        top = "; profile: " + ", ".join(f"{k.split(' (')[0]} {100 * v:.0f}%" for k, v in list(profile["by_layer"].items())[:3])
    part = "" if complete else f" (of {count / 1e6:g}M: budget)"
    m["summary"] = (f"{measured / 1e6:g}M{part} × ~{value_bytes:.0f} B: recompute {batch_rps:,.0f}/s "
                    f"({median([r['seconds'] for r in batch_runs]):.1f}s) vs bare read+count {bare_rps:,.0f}/s "
                    f"({median([r['seconds'] for r in bare_runs]):.1f}s); exact replace "
                    f"{'ok' if exact else 'MISMATCH'} ({last['quarantined']:,} quarantined){top}")
    hand_rps = median([r["records_per_s"] for r in hand_runs])
    hand_ratio = batch_rps / hand_rps
    p12 = result(
        "P12", "Batch recompute vs a hand-written Spark batch job", round(hand_ratio, 3), "ratio", goal=">= 1.0",
        met=(hand_ratio >= 1.0) if complete else None,
        reference={"hand-written job": f"{hand_rps:,.0f} records/s", "recompute": f"{batch_rps:,.0f} records/s"},
        runs=[{"phase": "hand-written job", **{k: [r[k] for r in hand_runs] for k in ("seconds", "jvm_cpu_s")}},
              {"phase": "recompute", **{k: [r[k] for r in batch_runs] for k in ("seconds", "jvm_cpu_s")}}],
        detail={"records": measured, "complete": complete, "warmup_seconds": round(warm_hand_s, 1),
                "hand_written": {"records_per_s": hand_rps, "seconds_median": median([r["seconds"] for r in hand_runs]),
                                 "what": "bench.batch.hand_batch: Kafka source (exact offsets) → from_json → "
                                         "Delta replaceWhere, same session, same ranges"},
                "recompute": {"records_per_s": batch_rps, "seconds_median": median([r["seconds"] for r in batch_runs])},
                "ratio_by_jvm_cpu": round(median([r["jvm_cpu_s"] for r in hand_runs])
                                          / max(1e-9, median([r["jvm_cpu_s"] for r in batch_runs])), 3)},
        chart={"kind": "bar", "labels": ["hand-written job", "batch recompute"], "values": [hand_rps, batch_rps],
               "ylabel": "records/s (median)", "colors": ["tab:gray", "tab:blue"],
               "title": f"{measured:,} records; ratio {hand_ratio:.2f} (goal ≥ 1.0)"},
    )
    p12["summary"] = (f"{measured / 1e6:g}M{part}: recompute {batch_rps:,.0f}/s vs the hand-written job "
                      f"{hand_rps:,.0f}/s ({median([r['seconds'] for r in hand_runs]):.1f}s)")
    return [m, p12]
