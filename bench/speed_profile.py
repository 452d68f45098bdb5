"""Where the speed layer's CPU goes beside the hand-written job's: the profile behind P2 and P10
(not in ``make bench``).

    .venv/bin/python -m bench.speed_profile [--records 600000] [--out FILE.json]

One topic of the benchmark dataset (``--records`` × 1 KB, 6 partitions, as P1/P2/P10 read),
on a broker and state directory of its own. After one warm-up run of each, the real speed
layer (``loglake.speed.stream.run_speed``, available-now) and P10's reference
(``bench.speed.hand_job``) each read the whole topic twice more, in micro-batches of a third of
it: once plain (its steady records/s and the JVM's CPU-seconds per million records), once
under JFR (execution samples of the driver JVM, ``bench.batch.profiled``; sampling slows the
JVM several times over, so only the samples' shares are used). It prints the samples by layer
(``bench.batch.CATEGORIES``) as CPU-seconds per million records (share × the plain run's): what
loglake's speed layer spends beyond the job a user would write, and where. A program, not a
test: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench.harness import jvm_pid, scratch
from loglake.core.processes import cpu_seconds

KB = 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--out", type=Path, help="write the result (JSON) to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with scratch("loglake-speed-profile-", repeats=1) as h:
        from bench.batch import profiled
        from bench.speed import Topic

        topic = Topic(h, 6, KB, args.records)
        runs = {"speed layer": topic.speed_run, "hand-written job": topic.hand_run}
        for name, go in runs.items():  # warm-up: the JIT and Spark's caches, as P10's repeats have them
            go(0)
        out = {"records": args.records, "record_bytes": KB, "partitions": 6}
        for name, go in runs.items():
            spark = h.spark()
            pid = jvm_pid(spark)
            # Unprofiled first: JFR's sampling slows the JVM several times over (P4's own profile
            # shows it), so its samples give the shares and this run the CPU they divide.
            cpu0 = cpu_seconds(pid)
            plain = go(1)
            per_million = (cpu_seconds(pid) - cpu0) / args.records * 1e6
            cpu0 = cpu_seconds(pid)
            profiled_run, profile = profiled(spark, lambda: go(2), h.root / f"{name.split()[0]}.jfr", h)
            profile["jvm_cpu_seconds_per_million_under_jfr"] = round((cpu_seconds(pid) - cpu0) / args.records * 1e6, 1)
            profile["records_per_second_under_jfr"] = profiled_run["records_per_second"]
            profile["cpu_seconds_per_million_by_layer"] = {
                k: round(v * per_million, 2) for k, v in profile.get("by_layer", {}).items()}
            out[name] = {"records_per_second": plain["records_per_second"],
                         "jvm_cpu_seconds_per_million": round(per_million, 1), "profile": profile}
            print(f"{name}: {plain['records_per_second']:,} rec/s steady; JVM {per_million:.1f} CPU-s per million "
                  f"records (unprofiled run); {profile.get('samples', 0):,} samples of the next run under JFR, "
                  f"as CPU-s per million:")
            for layer, secs in profile["cpu_seconds_per_million_by_layer"].items():
                print(f"  {secs:6.2f}  {layer}")
        print(json.dumps(out))
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
