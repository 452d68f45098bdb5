"""Writers beside the speed stream's appends (found by R4, soak/busy.py).

The tables are not partitioned and Delta's isolation is Serializable: a commit that read the
table (a DELETE, a ``replaceWhere``) fails when an append landed while it ran. Such a
conflict must arrive as Delta's Python exception (so it is retried and called transient),
a first-time range must not need a reading commit at all, and the stream must hold its
appends while a writer asks it to.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from delta.exceptions import ConcurrentAppendException
from deltalake import write_deltalake
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from loglake.core.errors import is_transient
from loglake.leases import appends_pause, appends_paused, wait_while_paused
from loglake.lake import delta_io

pytestmark = pytest.mark.integration


def appending_once(path: str, marker):
    """A UDF that, the first time it runs, appends a row to ``path`` (another writer, delta-rs)
    while the Spark write that evaluates it is under way: a concurrent append, on cue. Its
    tasks run in two Python workers at once: the marker is created exclusively, so exactly
    one of them appends."""
    def udf(x):
        try:
            with open(marker, "x") as f:
                f.write("appended")
        except FileExistsError:
            return x
        write_deltalake(path, pa.table({"_offset": pa.array([1000], pa.int64())}), mode="append")
        return x
    return F.udf(udf, LongType())


def test_a_conflict_arrives_as_deltas_exception_and_is_retried(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(10).withColumnRenamed("id", "_offset").write.format("delta").save(path)
    df = spark.range(3).select(appending_once(path, tmp_path / "marker")(F.col("id")).alias("_offset"))

    def overwrite():
        df.write.format("delta").mode("overwrite").option("replaceWhere", "_offset < 3").save(path)

    with pytest.raises(ConcurrentAppendException) as caught:
        overwrite()
    assert is_transient(caught.value)
    (tmp_path / "marker").unlink()
    _result, attempts = delta_io.retry_conflicts(overwrite, "overwrite", base_delay=0.01)
    assert attempts == 2
    assert sorted(r["_offset"] for r in spark.read.format("delta").load(path).collect()) == \
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1000, 1000]


def test_replacing_rows_no_row_holds_yet_is_a_blind_append_beside_concurrent_appends(spark, tmp_path):
    path = str(tmp_path / "q")
    spark.range(5).withColumnRenamed("id", "_offset").write.format("delta").save(path)
    df = spark.range(100, 103).select(appending_once(path, tmp_path / "marker")(F.col("id")).alias("_offset"))
    assert delta_io.replace_rows(spark, df, path, "_offset >= 100 AND _offset < 200") == 1  # no conflict
    assert sorted(r["_offset"] for r in spark.read.format("delta").load(path).collect()) == \
        [0, 1, 2, 3, 4, 100, 101, 102, 1000]


def test_the_stream_holds_its_appends_while_a_writer_asks(make_config):
    config = make_config()
    assert wait_while_paused(config, "job_views") == (0.0, None)
    waited = {}
    with appends_paused(config, "job_views", "maintenance run-1: expire speed.job_views"):
        assert appends_pause(config, "job_views")["what"].startswith("maintenance run-1")
        stream = threading.Thread(target=lambda: waited.update(r=wait_while_paused(config, "job_views", poll=0.05)))
        stream.start()
        time.sleep(0.5)
        assert stream.is_alive()  # held
    stream.join(5)
    seconds, request = waited["r"]
    assert seconds >= 0.4 and request["what"].startswith("maintenance run-1")
    assert appends_pause(config, "job_views") is None
