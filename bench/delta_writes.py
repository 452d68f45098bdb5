"""Write settings compared: the job_views batch table's shape written to Delta with each
setting (statistics columns, Parquet codec, dictionary), in one Spark session.

    .venv/bin/python -m bench.delta_writes [ROWS] [REPEATS]     # default 2,000,000 rows, 3 writes each

Prints seconds per write and the files' size for each setting (the first round warms up).
A probe for choosing settings, not one of `make bench`'s metrics.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

STATS = "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns"
CODEC = "spark.sql.parquet.compression.codec"
VARIANTS = {
    "default (every column's statistics, snappy)": {},
    "statistics of provenance + key": {STATS: "_topic,_partition,_offset,_layer,user_id"},
    "no statistics": {"spark.databricks.delta.stats.collect": "false"},
    "lz4_raw": {CODEC: "lz4_raw"},
    "zstd": {CODEC: "zstd"},
    "uncompressed": {CODEC: "uncompressed"},
    "no dictionary": {"parquet.enable.dictionary": "false"},
    "no dictionary for the unique provenance columns": {"parquet.enable.dictionary#_offset": "false",
                                                        "parquet.enable.dictionary#_kafka_timestamp": "false"},
    "those + statistics of provenance + key": {"parquet.enable.dictionary#_offset": "false",
                                               "parquet.enable.dictionary#_kafka_timestamp": "false",
                                               STATS: "_topic,_partition,_offset,_layer,user_id"},
}


def main(argv: list[str]) -> int:
    from pyspark.sql import functions as F

    from loglake.testing import NO_BROKER, Lab

    rows = int(argv[0]) if argv else 2_000_000
    repeats = int(argv[1]) if len(argv) > 1 else 3
    root = Path(tempfile.mkdtemp(prefix="loglake-writes-"))
    lab = Lab(root, NO_BROKER, app_name="loglake-bench-writes")
    try:
        spark = lab.spark()
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        df = (spark.range(rows).select(
            F.expr("uuid()").alias("view_id"), (F.col("id") % 100000).alias("user_id"),
            (F.col("id") % 5000).alias("job_id"), F.expr("timestamp_seconds(1760000000 + id)").alias("viewed_at"),
            F.expr("element_at(array('web', 'app', 'email'), cast(id % 3 + 1 as int))").alias("source"),
            (F.col("id") * 7 % 60000).alias("duration_ms"), F.lit("job_views-x").alias("_topic"),
            (F.col("id") % 6).cast("int").alias("_partition"), (F.col("id") / 6).cast("long").alias("_offset"),
            F.expr("timestamp_seconds(1760000000 + id)").alias("_kafka_timestamp"),
            F.expr("to_date(timestamp_seconds(1760000000 + id))").alias("view_date"),
            (F.col("id") * 7 % 60000 / 1000.0).alias("duration_s"))).repartition(2).cache()
        df.count()
        seconds: dict[str, list[float]] = {}
        sizes: dict[str, float] = {}
        for rep in range(repeats):
            for i, (name, conf) in enumerate(VARIANTS.items()):
                for k, v in conf.items():
                    hadoop.set(k, v) if k.startswith("parquet.") else spark.conf.set(k, v)
                path = root / f"t{i}-{rep}"
                t0 = time.monotonic()
                df.write.format("delta").save(str(path))
                seconds.setdefault(name, []).append(round(time.monotonic() - t0, 2))
                for k in conf:
                    hadoop.unset(k) if k.startswith("parquet.") else spark.conf.unset(k)
                sizes[name] = round(sum(f.stat().st_size for f in path.rglob("*.parquet")) / 2**20, 1)
                shutil.rmtree(path)
        print(json.dumps({"rows": rows, "seconds": seconds, "mib": sizes}, indent=1))
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
