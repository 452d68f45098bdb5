"""P11, the fixed cost of a micro-batch, and where a small speed micro-batch's time goes (P3, P6).

    .venv/bin/python -m bench.microbatch [--records 60] [--batches 40] [--bad-fraction 0.01] [--object-store]

The real speed layer (``loglake.speed.stream.run_speed``, available-now, in-process) runs over
``--batches`` micro-batches of ``--records`` job_views events (6 partitions) on a broker and
state directory of its own. It prints each micro-batch's trigger time, the median time of
the steps of ``process_batch`` (validation, the observation, the Delta append), and the
Spark jobs the run made, grouped by call site and description, with their total time: a
micro-batch's fixed cost, what P3 (freshness) and P6 (1,000 micro-batches in the write
budget) are bounded by. With ``--object-store`` the lake and checkpoints are on an S3 store
(versitygw on loopback, a line per request in its log) and it also prints the requests the run
made per micro-batch, by method and by what they touch (the capacity model's object-store
requests, docs/capacity.md). A program, not a test: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import time

from contextlib import contextmanager
from typing import Iterator

from bench.harness import median, result, scratch, store_requests

STEPS = {"loglake.speed.stream": ["process_batch"], "loglake.speed.writer": ["wait_while_paused", "collected"],
         "loglake.lake.delta_io": ["append_idempotent", "append_arrow", "committed_version"],
         "loglake.records.validation": ["validate", "apply_transform"],
         "loglake.records.counting": ["counted", "quarantined", "bad_records"]}


@contextmanager
def _timed_steps() -> Iterator[dict[str, list[float]]]:
    """Wrap the steps of a micro-batch so each call's seconds are recorded (unwrapped after)."""
    import importlib

    times: dict[str, list[float]] = collections.defaultdict(list)
    undo = []
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
            undo.append((mod, name, fn))
    try:
        yield times
    finally:
        for mod, name, fn in undo:
            setattr(mod, name, fn)


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


def measure(h, name: str, records: int, batches: int, bad_fraction: float, **conf) -> dict:
    """One available-now run of the real speed layer over ``batches`` micro-batches of ``records``
    job_views events: each micro-batch's trigger time, the steps' times, the Spark jobs
    (``conf``: more of the profile, e.g. its ``lake``)."""
    from loglake.local.produce import produce
    from loglake.speed import stream as streaming

    config = h.config(name, speed={"max_offsets_per_trigger": records}, **conf)
    ds = config.dataset("job_views")
    produce(config, ds, records * batches, seed=6, progress=False, bad_fraction=bad_fraction)
    spark = h.spark(config)
    with _timed_steps() as times:
        t0 = time.monotonic()
        last = streaming.run_speed(spark, config, ds, available_now=True)
        wall = time.monotonic() - t0
    batches_seen = last["_batches"]
    trigger = [batches_seen[b][1] for b in sorted(batches_seen)]
    steady = trigger[2:] or trigger
    return {"wall_seconds": round(wall, 1), "trigger_ms": trigger, "median_ms": statistics.median(steady),
            "p90_ms": sorted(steady)[int(0.9 * (len(steady) - 1))], "max_ms": max(steady),
            "steps_median_ms": {k: round(1000 * statistics.median(v), 1) for k, v in times.items()},
            "steps_ms": {k: [round(1000 * x) for x in v] for k, v in times.items()}, "spark": spark}


TITLE = "fixed cost of a micro-batch (60 records)"


def run(h, only: set[str] | None = None) -> list[dict]:
    """P11: the median trigger time of a 60-record micro-batch (speed table, quarantine when it
    has bad records, 2 % malformed; the position is recorded by its own thread, not inside it),
    the first two of each run left out (the query's start)."""
    if only is not None and "P11" not in only:
        return []
    batches = 10 if h.quick else 40
    runs = h.repeat(lambda i: measure(h, f"p11-{i}", 60, batches, 0.02))
    for r in runs:
        r.pop("spark")
    value = round(median([r["median_ms"] for r in runs]) / 1000, 3)
    steps = {k: round(median([r["steps_median_ms"][k] for r in runs if k in r["steps_median_ms"]]), 1)
             for k in runs[0]["steps_median_ms"]}
    m = result("P11", TITLE, value, "s", goal="<= 0.3", met=value <= 0.3,
               reference={"p90 (median of runs)": round(median([r["p90_ms"] for r in runs]) / 1000, 3),
                          "slowest micro-batch": round(max(r["max_ms"] for r in runs) / 1000, 3)},
               runs=[{k: v for k, v in r.items() if k != "steps_ms"} for r in runs],
               detail={"what": "the real speed layer (run_speed, available-now, in-process) over micro-batches of 60 "
                               "job_views events (6 partitions, 2 % malformed); Spark's triggerExecution of each, "
                               "the median after each run's first two; the steps inside process_batch, median ms",
                       "steps_median_ms": steps},
               chart={"kind": "lines", "x": list(range(len(runs[0]["trigger_ms"]))),
                      "series": {f"run {i + 1}": r["trigger_ms"] for i, r in enumerate(runs)},
                      "xlabel": "micro-batch", "ylabel": "trigger ms"})
    m["summary"] = (f"median of {len(runs)} runs' medians; steps (median ms): "
                    + ", ".join(f"{k} {v}" for k, v in steps.items()))
    return [m]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60, help="events per micro-batch (maxOffsetsPerTrigger)")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--bad-fraction", type=float, default=0.0, help="malformed share of the events")
    ap.add_argument("--object-store", action="store_true", help="the lake on an S3 store (versitygw), requests counted")
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with scratch("loglake-microbatch-", keep=bool(os.environ.get("LOGLAKE_BENCH_KEEP"))) as h, \
            contextlib.ExitStack() as stack:
        conf, gateway = {}, None
        if args.object_store:
            from loglake.local.versitygw import Gateway

            gateway = stack.enter_context(Gateway.on_free_port(h.root / "s3", quiet=False))
            gateway.create_bucket("microbatch-lake")
            store = gateway.settings(gateway.write_credentials_file(h.root / "s3-credentials"))
            conf["lake"] = {"root": "s3a://microbatch-lake/lake", "checkpoints": "s3a://microbatch-lake/checkpoints",
                            "object_store": store}
            logged = gateway.log_path.stat().st_size
        r = measure(h, "microbatch", args.records, args.batches, args.bad_fraction, **conf)
        trigger = r["trigger_ms"]
        print(f"{len(trigger)} micro-batches of {args.records} events in {r['wall_seconds']:.1f}s; trigger ms {trigger}")
        print(f"median trigger after the first two: {r['median_ms']:.0f} ms")
        print("steps (median ms, calls):")
        for name, values in r["steps_ms"].items():
            print(f"  {name:18s} {r['steps_median_ms'][name]:8.1f}  {len(values)}")
        print("Spark jobs (count, total s, median ms, call site, what):")
        for (site, what), secs in sorted(_jobs(r["spark"]).items(), key=lambda kv: -sum(kv[1])):
            print(f"  {len(secs):4d} {sum(secs):7.2f} {1000 * statistics.median(secs):7.0f}  {site}: {what}")
        if gateway:
            counts = store_requests(gateway.log_path, logged)
            n = len(trigger)
            print(f"object-store requests over the run ({sum(counts.values())}, the query's start included), "
                  f"per micro-batch ({n}):")
            for (op, what), c in sorted(counts.items(), key=lambda kv: -kv[1]):
                print(f"  {c / n:7.1f}  {op:6s} {what}")
            print(f"  {sum(counts.values()) / n:7.1f}  in all")
        print(json.dumps({"records_per_batch": args.records, "trigger_ms": trigger,
                          "steps_median_ms": r["steps_median_ms"], "steps_ms": r["steps_ms"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
