"""A query on the speed table before and after OPTIMIZE: same query, same data.

Produces ``--events`` job_views events, runs the speed layer over them with a small
``maxOffsetsPerTrigger`` (``--batch-records``), so it makes many small micro-batches and
many small files, then times ``QUERY`` through Spark (median of ``--repeat`` runs, after
one warm-up run), runs the maintenance job, and times it again. Prints the figures and
writes them to ``bench/results/maintenance_query.json``.

Starts its own Kafka broker on a free port with its state in a temporary directory,
unless ``--bootstrap`` names one. A program, not a test: it asserts nothing.

    PYTHONPATH=$PWD .venv/bin/python bench/maintenance_query.py --events 50000 --batch-records 250
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QUERY = "SELECT _partition, count(*) AS n, sum(duration_ms) AS total_ms FROM speed.job_views GROUP BY 1 ORDER BY 1"


def write_conf(root: Path, bootstrap: str, batch_records: int) -> Path:
    """The repo's conf/ with the local profile pointed at ``bootstrap`` and small micro-batches."""
    conf = root / "conf"
    (conf / "datasets").mkdir(parents=True)
    main = yaml.safe_load((REPO / "conf" / "loglake.yaml").read_text())
    profile = main["profiles"]["local"]
    profile["kafka"] = {"bootstrap_servers": bootstrap, "embedded": False}
    profile["speed"] = {**profile.get("speed", {}), "max_offsets_per_trigger": batch_records}
    (conf / "loglake.yaml").write_text(yaml.safe_dump({"default_profile": "local", "profiles": {"local": profile}}))
    for src in (REPO / "conf" / "datasets").glob("*.yaml"):
        (conf / "datasets" / src.name).write_text(src.read_text())
    return conf


def timed(spark, sql: str, repeat: int) -> tuple[float, list[float], list]:
    """Median seconds of ``repeat`` runs after one warm-up, the runs, and the result rows."""
    rows = spark.sql(sql).collect()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = spark.sql(sql).collect()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), runs, rows


def run(args, home: Path, bootstrap: str) -> dict:
    from loglake.config import load_config
    from loglake.maintenance import format_log_rows, snapshot
    from loglake.produce import produce
    from spark_jobs.maintenance import run_maintenance
    from spark_jobs.serving import register_tables
    from spark_jobs.session import get_spark
    from spark_jobs.speed import run_speed

    config = load_config(write_conf(home, bootstrap, args.batch_records), home=home / "state")
    ds = config.dataset("job_views")
    path = config.table_path(ds, "speed")
    res = produce(config, ds, args.events, seed=1)
    spark = get_spark(config, "loglake-bench-maintenance", {"spark.ui.showConsoleProgress": "false"})
    t0 = time.monotonic()
    run_speed(spark, config, ds, available_now=True)
    speed_seconds = time.monotonic() - t0
    register_tables(spark, config)

    before = snapshot(path)
    median_before, runs_before, rows_before = timed(spark, QUERY, args.repeat)
    summary = run_maintenance(spark, config, ds, "bench")
    after = snapshot(path)
    median_after, runs_after, rows_after = timed(spark, QUERY, args.repeat)
    optimize = next(r for r in summary["operations"] if r["table"] == ds.tables.speed and r["operation"] == "optimize")
    spark.stop()
    return {
        # One speed-table commit per micro-batch (the query's own progress keeps only the last 100).
        "query": QUERY, "events": res.records, "micro_batches": before.version + 1,
        "batch_records": args.batch_records, "speed_seconds": round(speed_seconds, 1),
        "files_before": before.files, "bytes_before": before.bytes, "files_after": after.files,
        "bytes_after": after.bytes, "optimize_seconds": optimize["seconds"],
        "median_before_s": round(median_before, 3), "runs_before_s": [round(x, 3) for x in runs_before],
        "median_after_s": round(median_after, 3), "runs_after_s": [round(x, 3) for x in runs_after],
        "same_result": rows_before == rows_after, "spark_master": config.profile.spark.master,
        "maintenance": format_log_rows(summary["operations"]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--batch-records", type=int, default=250, help="maxOffsetsPerTrigger of the speed run")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--bootstrap", help="an existing Kafka (default: start one on a free port)")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "maintenance_query.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        home = Path(tmp)
        if args.bootstrap:
            result = run(args, home, args.bootstrap)
        else:
            from loglake.embedded_kafka import EmbeddedKafka, free_port

            kafka = EmbeddedKafka(home / "kafka-home", port=free_port(), controller_port=free_port(), heap="512m")
            kafka.start()
            try:
                result = run(args, home, kafka.bootstrap)
            finally:
                kafka.stop()
    print(f"{result['events']} events in {result['micro_batches']} micro-batches "
          f"(maxOffsetsPerTrigger {result['batch_records']}), speed run {result['speed_seconds']}s")
    print(f"speed.job_views files: {result['files_before']} → {result['files_after']} "
          f"({result['bytes_before']:,} → {result['bytes_after']:,} bytes); OPTIMIZE {result['optimize_seconds']}s")
    print(f"{QUERY}\n  before OPTIMIZE: median {result['median_before_s']}s of {result['runs_before_s']}\n"
          f"  after OPTIMIZE:  median {result['median_after_s']}s of {result['runs_after_s']}\n"
          f"  same result: {result['same_result']}")
    print("maintenance run (as `loglake maintain` prints it):\n" + "\n".join(result["maintenance"]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
