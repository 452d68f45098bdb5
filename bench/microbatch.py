"""Where a small speed micro-batch's time goes: the profile behind P3 and P6 (not in ``make bench``).

    .venv/bin/python -m bench.microbatch [--records 60] [--batches 40] [--bad-fraction 0.01]

The real speed layer (``loglake.speed.stream.run_speed``, available-now, in-process) runs over
``--batches`` micro-batches of ``--records`` job_views events (6 partitions) on a broker and
state directory of its own. It prints each micro-batch's trigger time, the median time of
the steps of ``process_batch`` (validation, the observation, the Delta append), and the
Spark jobs the run made, grouped by call site and description, with their total time: a
micro-batch's fixed cost, what P3 (freshness) and P6 (1,000 micro-batches in the write
budget) are bounded by. A program, not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import time

from bench.harness import scratch

STEPS = {"loglake.speed.stream": ["process_batch"], "loglake.speed.writer": ["wait_while_paused"],
         "loglake.lake.delta_io": ["append_idempotent", "append_arrow", "committed_version"],
         "loglake.records.validation": ["validate", "apply_transform"],
         "loglake.records.counting": ["counted", "quarantined", "bad_records"]}


def _timed_steps() -> dict[str, list[float]]:
    """Wrap the steps of a micro-batch so each call's seconds are recorded."""
    import importlib

    times: dict[str, list[float]] = collections.defaultdict(list)
    for module, names in STEPS.items():
        mod = importlib.import_module(module)
        for name in names:
            fn = getattr(mod, name, None)
            if fn is None:  # not in this tree (bench.compare runs older commits)
                continue

            def timed(*a, _fn=fn, _name=name, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    times[_name].append(time.perf_counter() - t0)

            setattr(mod, name, timed)
    return times


def _jobs(spark) -> dict[tuple[str, str], list[float]]:
    """Completed Spark jobs: (call site, description without the query's ids) → seconds each."""
    out: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    it = spark._jsparkSession.sparkContext().statusStore().jobsList(None).iterator()
    while it.hasNext():
        j = it.next()
        if not (j.submissionTime().isDefined() and j.completionTime().isDefined()):
            continue
        desc = j.description().get() if j.description().isDefined() else ""
        # A stream's job descriptions name the query, run and batch ids, and Delta's the version.
        what = ("Delta: state reconstruction of the new snapshot" if "Compute snapshot" in desc else
                "the micro-batch's write" if "batch = " in desc else desc.split("\n")[0][:60])
        out[(j.name().split(" at ")[0], what)].append(
            (j.completionTime().get().getTime() - j.submissionTime().get().getTime()) / 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60, help="events per micro-batch (maxOffsetsPerTrigger)")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--bad-fraction", type=float, default=0.0, help="malformed share of the events")
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with scratch("loglake-microbatch-") as h:
        from loglake.local.produce import produce
        from loglake.speed import stream as streaming

        config = h.config("microbatch", speed={"max_offsets_per_trigger": args.records})
        ds = config.dataset("job_views")
        produce(config, ds, args.records * args.batches, seed=6, progress=False, bad_fraction=args.bad_fraction)
        spark = h.spark(config)
        times = _timed_steps()
        t0 = time.monotonic()
        last = streaming.run_speed(spark, config, ds, available_now=True)
        wall = time.monotonic() - t0
        batches = last["_batches"]
        trigger = [batches[b][1] for b in sorted(batches)]
        steady = trigger[2:] or trigger
        print(f"{len(trigger)} micro-batches of {args.records} events in {wall:.1f}s; trigger ms {trigger}")
        print(f"median trigger after the first two: {statistics.median(steady):.0f} ms")
        print("steps (median ms, calls):")
        for name, values in times.items():
            print(f"  {name:18s} {1000 * statistics.median(values):8.1f}  {len(values)}")
        print("Spark jobs (count, total s, median ms, call site, what):")
        for (site, what), secs in sorted(_jobs(spark).items(), key=lambda kv: -sum(kv[1])):
            print(f"  {len(secs):4d} {sum(secs):7.2f} {1000 * statistics.median(secs):7.0f}  {site}: {what}")
        print(json.dumps({"records_per_batch": args.records, "trigger_ms": trigger,
                          "steps_median_ms": {k: round(1000 * statistics.median(v), 1) for k, v in times.items()},
                          "steps_ms": {k: [round(1000 * x) for x in v] for k, v in times.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
