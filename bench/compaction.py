"""P6 compaction: a fixed query on a speed table of 1,000 micro-batches, before and after OPTIMIZE.

Issue 6: "a fixed query on a speed table after 1,000 micro-batches, before and after
OPTIMIZE. Goal >= 5x faster after."

1. Small job_views events go to a topic of the module's own, ``EVENTS_PER_BATCH`` per
   micro-batch (6 partitions, so about 6 small files per micro-batch).
2. The first ``PROBE_BATCHES`` micro-batches are written by the real speed layer
   (``loglake.speed.stream.run_speed``, available-now, ``max_offsets_per_trigger =
   EVENTS_PER_BATCH``); its time per micro-batch is measured (a fixed-cost figure of the
   speed layer). If the rest at that pace fits the time budget, the real stream writes the
   rest too; otherwise the rest is written by the speed layer's own per-batch function,
   ``loglake.speed.writer.process_batch`` (same writes: speed and quarantine appends tied to
   the stream's txn app id and the following batch ids), on successive exact offset
   slices read with Spark's Kafka source in batch mode. ``detail.mode`` says which.
   The write phase stops at its deadline (``LOGLAKE_BENCH_P6_WRITE_BUDGET`` seconds after
   the module starts, default 450; 0 = no limit): then the table holds fewer micro-batches
   than asked and ``detail.complete`` is false.
3. ``QUERY`` (filter on a user_id range, group by) is timed on ``speed.job_views``: one
   warm-up, then the median of ``h.repeats`` runs; the maintenance job's OPTIMIZE
   (``loglake.maintenance.job.optimize`` with the dataset's ``zorder_by``) runs; the query
   is timed again and its rows compared with those before.

Value: the speed-up (median before / median after), goal >= 5.
Supersedes bench/maintenance_query.py (203 micro-batches, a different query).
"""

from __future__ import annotations

import json
import os
import statistics
import time

from bench.harness import Harness, result

TARGET_BATCHES = 1_000
QUICK_BATCHES = 100
EVENTS_PER_BATCH = 60          # 10 per partition: small files, as a busy stream with a short trigger makes
PROBE_BATCHES = 12             # real micro-batches measured before choosing how to write the rest
WARMUP_BATCHES = 2             # the stream's first micro-batches (JVM, code generation) are left out of its pace
WRITE_BUDGET_S = 450.0         # the write phase ends this long after the module starts (~9.5 min in all)
QUERY = ("SELECT source, count(*) AS views, sum(duration_ms) AS total_ms, count(DISTINCT user_id) AS users "
         "FROM delta.`{path}` WHERE user_id BETWEEN 100 AND 999 GROUP BY source ORDER BY source")


def _timed_query(spark, sql: str, repeats: int) -> tuple[list[float], list]:
    """Seconds of ``repeats`` runs after one warm-up run, and the rows."""
    rows = spark.sql(sql).collect()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = spark.sql(sql).collect()
        runs.append(time.perf_counter() - t0)
    return runs, [r.asDict() for r in rows]


def _write_budget() -> float | None:
    raw = os.environ.get("LOGLAKE_BENCH_P6_WRITE_BUDGET")
    budget = float(raw) if raw else WRITE_BUDGET_S
    return budget if budget > 0 else None


def _slices(starts: dict[int, int], ends: dict[int, int], n: int) -> list[tuple[dict[int, int], dict[int, int]]]:
    """``n`` successive exact offset ranges covering [starts, ends) per partition, evenly."""
    out = []
    for i in range(n):
        lo = {p: starts[p] + (ends[p] - starts[p]) * i // n for p in ends}
        hi = {p: starts[p] + (ends[p] - starts[p]) * (i + 1) // n for p in ends}
        out.append((lo, hi))
    return out


def run(h: Harness, only: set[str] | None = None) -> list[dict]:
    if only is not None and "P6" not in only:
        return []
    from loglake.core.offsets import parse_spark_offsets, spark_offsets_json
    from loglake.kafka.admin import end_offsets
    from loglake.tables import TableRef, snapshot
    from loglake.local.produce import produce
    from loglake.records.kafka_source import source_options
    from loglake.maintenance.job import optimize
    from loglake.speed.stream import run_speed
    from loglake.speed.writer import process_batch

    started = time.monotonic()
    budget = _write_budget()
    deadline = started + budget if budget else None
    target = QUICK_BATCHES if h.quick else TARGET_BATCHES
    config = h.config("compaction", speed={"max_offsets_per_trigger": EVENTS_PER_BATCH})
    ds = config.dataset("job_views")
    topic = ds.topic
    path = config.table_path(ds, "speed")
    spark = h.spark(config)

    # -- 1. the real speed layer over the first micro-batches ------------------------------
    events = produce(config, ds, PROBE_BATCHES * EVENTS_PER_BATCH, seed=6).records
    h.log(f"P6: real speed layer over {PROBE_BATCHES * EVENTS_PER_BATCH} events "
          f"(maxOffsetsPerTrigger {EVENTS_PER_BATCH})")
    t0 = time.monotonic()
    last = run_speed(spark, config, ds, available_now=True)
    probe_wall = time.monotonic() - t0
    batches = last["_batches"]  # batch id → (rows, trigger ms)
    real_batches = max(batches) + 1
    trigger_ms = [batches[b][1] for b in sorted(batches)]
    steady_ms = trigger_ms[WARMUP_BATCHES:] or trigger_ms
    real_pace = statistics.median(steady_ms) / 1000  # seconds per micro-batch, warm
    positions = parse_spark_offsets(last["sources"][0]["endOffset"])[topic]
    h.log(f"P6: real stream {real_batches} micro-batches in {probe_wall:.1f}s; trigger ms {trigger_ms}; "
          f"median after warm-up {real_pace:.3f}s per micro-batch")

    # -- 2. the rest: the real stream if it fits the budget, else process_batch on slices --
    rest = target - real_batches
    events += produce(config, ds, max(0, rest) * EVENTS_PER_BATCH, seed=7).records if rest > 0 else 0
    projected = rest * real_pace
    fits = deadline is None or time.monotonic() + projected <= deadline
    fallback_runs: list[float] = []
    complete = True
    t0 = time.monotonic()
    if rest <= 0:
        mode = f"real speed layer (run_speed) for all {real_batches} micro-batches"
    elif fits:
        h.log(f"P6: {rest} more micro-batches by the real stream (projected {projected:.0f}s)")
        more = run_speed(spark, config, ds, available_now=True)
        mode = "real speed layer (run_speed, available-now) for every micro-batch"
        real_batches = max(more["_batches"]) + 1 if more and more["_batches"] else real_batches
    else:
        checkpoint = config.checkpoint_path(ds)
        stream_id = json.loads(spark.read.text(f"{checkpoint}/metadata").first()[0])["id"]
        app_id = f"loglake-speed-{ds.name}-{stream_id}"  # what the stream's own batches use
        ends = end_offsets(config, topic)
        starts = {p: positions.get(p, 0) for p in ends}
        h.log(f"P6: the real stream would need ~{projected:.0f}s for {rest} more micro-batches; writing them "
              f"with process_batch on exact offset slices (deadline in "
              f"{(deadline - time.monotonic()) if deadline else float('inf'):.0f}s)")
        source = source_options(config, topic)
        for i, (lo, hi) in enumerate(_slices(starts, ends, rest)):
            if deadline is not None and time.monotonic() > deadline:
                complete = False
                h.log(f"P6: write budget spent after {i} of {rest} process_batch micro-batches")
                break
            t1 = time.monotonic()
            batch = (spark.read.format("kafka").options(**source)
                     .option("startingOffsets", spark_offsets_json(topic, lo))
                     .option("endingOffsets", spark_offsets_json(topic, hi)).load())
            # As the stream runs a micro-batch after its query's first: no replay possible.
            process_batch(spark, config, ds, batch, app_id, real_batches + i, replay_possible=False)
            fallback_runs.append(time.monotonic() - t1)
            if (i + 1) % 100 == 0:
                h.log(f"P6: {i + 1}/{rest} process_batch micro-batches, "
                      f"median {statistics.median(fallback_runs):.3f}s each")
        mode = (f"real speed layer (run_speed) for the first {real_batches} micro-batches, then "
                f"loglake.speed.writer.process_batch on exact offset slices (Kafka batch reads) for "
                f"{len(fallback_runs)}: the real stream at {real_pace:.2f}s per micro-batch would not fit "
                f"the {budget:.0f}s write budget")
    rest_wall = time.monotonic() - t0
    write_wall = probe_wall + rest_wall

    # -- 3. the query before and after OPTIMIZE --------------------------------------------
    before = snapshot(path)
    micro_batches = before.version + 1  # one speed-table commit per micro-batch
    sql = QUERY.format(path=path)
    h.log(f"P6: speed table {micro_batches} micro-batches, {before.files:,} files; timing the query")
    runs_before, rows_before = _timed_query(spark, sql, h.repeats)
    opt = optimize(spark, TableRef("speed", ds.tables.speed, path), ds.maintenance.zorder_by)
    after = snapshot(path)
    runs_after, rows_after = _timed_query(spark, sql, h.repeats)
    med_before, med_after = statistics.median(runs_before), statistics.median(runs_after)
    speedup = med_before / med_after if med_after > 0 else float("inf")
    same = rows_before == rows_after
    if not same:
        h.log(f"P6: WARNING: the query's rows differ after OPTIMIZE: {rows_before} vs {rows_after}")
    fallback_pace = statistics.median(fallback_runs[WARMUP_BATCHES:] or fallback_runs) if fallback_runs else None
    h.log(f"P6: files {before.files} → {after.files}; query {med_before:.3f}s → {med_after:.3f}s "
          f"({speedup:.1f}x); OPTIMIZE {opt['seconds']:.1f}s; same rows: {same}")

    detail = {
        "mode": mode, "complete": complete, "target_micro_batches": target, "micro_batches": micro_batches,
        "events_per_batch": EVENTS_PER_BATCH, "events_produced": events,
        "real_stream_batches": real_batches, "real_stream_wall_s": round(probe_wall, 1),
        "real_stream_trigger_ms": trigger_ms,
        "real_stream_s_per_batch": round(real_pace, 3),
        "real_stream_projected_1000_s": round(real_pace * 1000),
        "process_batch_batches": len(fallback_runs),
        "process_batch_s_per_batch": round(fallback_pace, 3) if fallback_pace is not None else None,
        "write_wall_s": round(write_wall, 1), "write_budget_s": budget,
        "query": QUERY.format(path="<speed.job_views>"), "rows": rows_after, "same_result": same,
        "files_before": before.files, "files_after": after.files,
        "bytes_before": before.bytes, "bytes_after": after.bytes,
        "version_before": before.version, "version_after": after.version,
        "optimize_seconds": opt["seconds"], "optimize_attempts": opt["attempts"],
        "zorder_by": list(ds.maintenance.zorder_by),
        "query_before_s": round(med_before, 3), "query_after_s": round(med_after, 3),
    }
    m = result(
        "P6", "Query speed-up after OPTIMIZE", round(speedup, 2), "x", goal=">= 5",
        # Fewer micro-batches than asked (write budget spent) do not test the goal.
        met=(speedup >= 5 and same) if complete else None,
        reference={"files": f"{before.files:,} → {after.files:,}",
                   "query": f"{med_before:.3f}s → {med_after:.3f}s"},
        runs=[{"phase": "before", "seconds": [round(x, 3) for x in runs_before]},
              {"phase": "after", "seconds": [round(x, 3) for x in runs_after]}],
        detail=detail,
        chart={"kind": "panels", "panels": [
            {"kind": "bar", "labels": ["before OPTIMIZE", "after OPTIMIZE"], "values": [med_before, med_after],
             "ylabel": "query seconds (median)", "colors": ["tab:red", "tab:green"],
             "title": f"query on speed.job_views after {micro_batches:,} micro-batches"},
            {"kind": "bar", "labels": ["before", "after"], "values": [before.files, after.files],
             "ylabel": "data files", "colors": ["tab:red", "tab:green"],
             "title": f"files (Z-order by {', '.join(ds.maintenance.zorder_by) or '-'}; "
                      f"OPTIMIZE {opt['seconds']:.1f}s)"},
            {"kind": "bar", "labels": ["real stream", "process_batch"],
             "values": [real_pace, fallback_pace or 0.0], "ylabel": "seconds per micro-batch (median)",
             "colors": ["tab:blue", "tab:gray"], "title": "speed layer cost per micro-batch"},
        ]},
    )
    partial = "" if complete else f" (of {target:,}: write budget spent)"
    m["summary"] = (f"{micro_batches:,} micro-batches{partial}, {before.files:,} → {after.files:,} files; "
                    f"query {med_before:.2f}s → {med_after:.2f}s; OPTIMIZE {opt['seconds']:.1f}s; "
                    f"stream {real_pace:.2f}s/batch" + ("" if same else "; ROWS DIFFER"))
    return [m]
