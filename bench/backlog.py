"""A backlog drained by the speed layer, by its micro-batch caps (not in ``make bench``).

    .venv/bin/python -m bench.backlog [--records 2000000] [--record-bytes 200]
        [--max-offsets 200000] [--max-bytes 64m|none] [--out FILE.jsonl]

``--records`` events of about ``--record-bytes`` each (``bench_events``, 6 partitions, one in
1,000 malformed) wait in the topic; the real speed layer (``loglake.speed.stream.run_speed``,
available-now, in-process, on a broker and state directory of its own) drains them with the
caps ``speed.max_offsets_per_trigger`` and ``speed.max_bytes_per_trigger`` given, after a
warm-up run of 20,000 on the same checkpoint. It prints the drain's wall time and records/s,
the micro-batches (records each, trigger ms) and the driver JVM's peak memory (PSS) while
draining: what sizing micro-batches by bytes changes when a stream is behind. One setting per
process (a fresh JVM each, so the peaks compare). A program, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from bench.harness import PeakPss, jvm_pid, scratch
from loglake.testing import workload

WARM_RECORDS = 20_000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--record-bytes", type=int, default=200)
    ap.add_argument("--max-offsets", type=int, default=200_000, help="speed.max_offsets_per_trigger")
    ap.add_argument("--max-bytes", default="none", help="speed.max_bytes_per_trigger ('64m'; 'none': unset)")
    ap.add_argument("--out", type=Path, help="append the result as a JSON line to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    max_bytes = None if args.max_bytes == "none" else args.max_bytes
    with scratch("loglake-backlog-") as h:
        from loglake.kafka.admin import ensure_topic
        from loglake.speed.stream import run_speed

        config = h.config("backlog", extra_datasets={workload.DATASET: workload.dataset_file(6)},
                          speed={"max_offsets_per_trigger": args.max_offsets, "max_bytes_per_trigger": max_bytes})
        ds = config.dataset(workload.DATASET)
        ensure_topic(config, ds)
        spark = h.spark(config)
        workload.produce(config.kafka.bootstrap_servers, ds.topic, WARM_RECORDS, args.record_bytes)
        run_speed(spark, config, ds, available_now=True)
        produce_s = workload.produce(config.kafka.bootstrap_servers, ds.topic, args.records, args.record_bytes)
        driver = jvm_pid(spark)
        with PeakPss(lambda: [driver], every=0.2) as peak:
            t0 = time.monotonic()
            last = run_speed(spark, config, ds, available_now=True)
            wall = time.monotonic() - t0
        sizing = last["_sizing"]  # the cap the stream sized when it started
        batches = [last["_batches"][b] for b in sorted(last["_batches"])]
        records = sum(r for r, _ in batches)
        out = {"records": args.records, "record_bytes": args.record_bytes, "max_offsets_per_trigger": args.max_offsets,
               "max_bytes_per_trigger": max_bytes, "cap": sizing.max_offsets,
               "mean_record_bytes": None if sizing.mean_bytes is None else round(sizing.mean_bytes, 1),
               "produce_s": round(produce_s, 1), "drain_s": round(wall, 1),
               "records_per_second": round(records / wall), "micro_batches": len(batches),
               "records_per_batch": [r for r, _ in batches], "trigger_ms": [t for _, t in batches],
               "median_trigger_ms": statistics.median(t for _, t in batches),
               "driver_peak_pss_gib": round(peak.peak / 2**30, 2)}
        print(f"cap {sizing.describe(config)}; drained {records:,} in {wall:.1f}s ({out['records_per_second']:,} "
              f"records/s), {len(batches)} micro-batches, median trigger {out['median_trigger_ms']:,} ms; driver "
              f"peak PSS {out['driver_peak_pss_gib']} GiB")
        print(json.dumps(out))
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
