"""P12 taken apart: where the recompute's time per record goes beside the hand-written job's.

    PYTHONPATH=<tree> .venv/bin/python bench/results/levers-2026-11-30/p12/decompose.py [RECORDS] [ROUNDS]

One in-process Spark session (bench.harness), one topic of RECORDS bench_events records (~170 B,
6 partitions, as P4/P12). Each round runs, on the whole range, timed with the driver JVM's CPU:
  hand→noop   Spark's Kafka source + from_json, written to Spark's noop sink
  ours→noop   loglake's read_ranges + validate + valid_rows + apply_transform, to the noop sink
  ours+obs→noop  the same with counting.counted's observation (what run_batch adds)
  hand→delta  P12's reference (bench.batch.hand_batch: replaceWhere)
  ours→delta  the valid rows of 'ours→noop' written by delta_io.replace_rows to a table of their own
  run_batch   loglake's recompute itself
A first round warms the JVM and is not printed in the medians.
"""
import statistics
import sys
import time

from bench.batch import hand_batch, hand_rows
from bench.harness import jvm_pid, scratch
from loglake.core.processes import cpu_seconds
from loglake.testing import workload

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3

with scratch("p12-decompose-") as h:
    from loglake.batch.recompute import run_batch
    from loglake.core.offsets import OffsetRange
    from loglake.core.plans import Plan
    from loglake.core.predicates import range_predicate
    from loglake.kafka.admin import ensure_topic, log_bounds
    from loglake.lake import delta_io
    from loglake.records import counting, validation
    from loglake.records.kafka_source import read_ranges

    config = h.config("p12", extra_datasets={workload.DATASET: workload.dataset_file(6)})
    ds = config.dataset(workload.DATASET)
    topic = ensure_topic(config, ds)
    workload.produce(h.bootstrap, topic, N, 100)
    ranges = [OffsetRange(topic, p, lo, hi) for p, (lo, hi) in sorted(log_bounds(config, topic).items())]
    plan = Plan(ds.name, tuple(ranges), "backfill", ("p12 decompose",))
    spark = h.spark(config)
    pid = jvm_pid(spark)
    root = h.root / "p12"

    def ours(observe: bool):
        validated = validation.validate(read_ranges(spark, config, ranges), ds)
        if observe:
            validated, _obs = counting.counted(validated, ranges, partitions=sorted({r.partition for r in ranges}),
                                               exact=True)
        return validation.apply_transform(validation.valid_rows(validated, ds), ds)

    steps = {
        "hand→noop": lambda: hand_rows(spark, h.bootstrap, ds, ranges).write.format("noop").mode("overwrite").save(),
        "ours→noop": lambda: ours(False).write.format("noop").mode("overwrite").save(),
        "ours+obs→noop": lambda: ours(True).write.format("noop").mode("overwrite").save(),
        "hand→delta": lambda: hand_batch(spark, h.bootstrap, ds, ranges, str(root / "hand")),
        "ours→delta": lambda: delta_io.replace_rows(spark, ours(False), str(root / "ours"), range_predicate(ranges),
                                                    None, ds.stats_columns),
        "run_batch": lambda: run_batch(spark, config, ds, plan, f"p12-{time.monotonic_ns()}"),
    }
    got = {k: [] for k in steps}
    for rnd in range(ROUNDS + 1):
        for name, fn in steps.items():
            c0, t0 = cpu_seconds(pid), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
            print(f"round {rnd} {name:14s} {wall:6.2f} s  JVM CPU {cpu:6.1f} s", flush=True)
            if rnd:
                got[name].append((wall, cpu))
    print(f"medians over {ROUNDS} rounds, {N:,} records:")
    for name, v in got.items():
        w, c = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        print(f"  {name:14s} {w:6.2f} s  JVM CPU {c:6.1f} s  ({1e6 * c / N:5.1f} CPU-s per million)")
