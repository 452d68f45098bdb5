"""Delta commits per second on one table: the capacity model's commit rate (docs/capacity.md).

    .venv/bin/python -m bench.commit_rate [--commits 200] [--rows 60] [--writers 1,2]

Appends of ``--rows`` rows (the speed table's columns, from a job_views micro-batch's shape)
by delta-rs — the writer of a small micro-batch (``loglake.lake.delta_io.append_arrow``), each
commit with its SetTransaction and ``userMetadata`` — to one table with Spark's checkpoint
interval (10), back to back, by 1 and by 2 writers at once (threads, each its own app id). Once
on the local filesystem and once on an S3 store (versitygw on loopback, a line per request in
its log). Prints commits per second, each commit's median and p99 milliseconds, the commits
that wrote a checkpoint, and on the store the requests per commit. A probe, not one of
``make bench``'s metrics: it reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import threading
import time
from pathlib import Path


def _rows(n: int):
    import pyarrow as pa

    return pa.table({"_topic": ["t"] * n, "_partition": [i % 6 for i in range(n)], "_offset": list(range(n)),
                     "view_id": [f"v{i}" for i in range(n)], "user_id": [f"u{i % 97}" for i in range(n)],
                     "duration_ms": list(range(n)), "payload": ["x" * 120] * n})


def _run(uri: str, options: dict, commits: int, rows: int, writers: int) -> dict:
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    data = _rows(rows)
    write_deltalake(uri, data.slice(0, 0), storage_options=options,
                    configuration={"delta.checkpointInterval": "10"})
    times: list[list[float]] = [[] for _ in range(writers)]
    retries = collections.Counter()

    def writer(w: int) -> None:
        for version in range(commits // writers):
            props = CommitProperties(custom_metadata={"userMetadata": f'{{"w": {w}, "b": {version}}}'},
                                     app_transactions=[Transaction(app_id=f"writer-{w}", version=version)])
            t0 = time.perf_counter()
            while True:
                table = DeltaTable(uri, storage_options=options)
                if (table.transaction_version(f"writer-{w}") or -1) >= version:
                    break
                try:
                    write_deltalake(table, data, mode="append", commit_properties=props)
                    break
                except CommitFailedError:
                    retries[w] += 1
            times[w].append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    each = sorted(x for ts in times for x in ts)
    table = DeltaTable(uri, storage_options=options)
    return {"commits": len(each), "wall_seconds": round(wall, 2), "commits_per_second": round(len(each) / wall, 1),
            "median_ms": round(1000 * statistics.median(each), 1),
            "p99_ms": round(1000 * each[int(0.99 * (len(each) - 1))], 1), "max_ms": round(1000 * each[-1], 1),
            "retried": sum(retries.values()), "version": table.version()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rows", type=int, default=60)
    ap.add_argument("--writers", default="1,2")
    args = ap.parse_args(argv)
    from loglake.local.versitygw import Gateway
    from bench.harness import store_requests

    with tempfile.TemporaryDirectory(prefix="loglake-commit-rate-") as tmp:
        root = Path(tmp)
        with Gateway.on_free_port(root / "s3", quiet=False) as gateway:
            gateway.create_bucket("commit-rate")
            from loglake.core.config import ObjectStoreSettings
            from loglake.core.objectstore import delta_location

            store = ObjectStoreSettings(**gateway.settings(gateway.write_credentials_file(root / "s3-credentials")))
            for writers in (int(w) for w in args.writers.split(",")):
                r = _run(str(root / f"fs-{writers}"), {}, args.commits, args.rows, writers)
                print(f"filesystem, {writers} writer(s): {r}", flush=True)
                uri, options = delta_location(f"s3a://commit-rate/t{writers}", store)
                logged = gateway.log_path.stat().st_size
                r = _run(uri, options, args.commits, args.rows, writers)
                counts = store_requests(gateway.log_path, logged)
                r["requests_per_commit"] = round(sum(counts.values()) / r["commits"], 1)
                r["by_kind_per_commit"] = {f"{op} {what}": round(c / r["commits"], 1)
                                           for (op, what), c in counts.most_common()}
                print(f"S3 store (versitygw), {writers} writer(s): {r}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
