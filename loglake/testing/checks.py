"""What tests, benchmarks and soak scenarios wait for, check and break: a stream's position
against the log, every offset a layer landed, exactly once; a process crashed on purpose."""

from __future__ import annotations

import os
import signal

import numpy as np
import psutil

from loglake.core.config import Config, Dataset
from loglake.core.processes import descendants
from loglake.kafka.admin import group_offsets
from loglake.tables import layer_table, query
from loglake.ops.coverage import check_exactly_once


def caught_up(config: Config, ds: Dataset, ends: dict[int, int]) -> bool:
    """The speed stream's committed position has reached ``ends`` in every partition."""
    now = group_offsets(config, ds.consumer_group, ds.topic, ds.partitions)
    return all((now.get(p) or 0) >= e for p, e in ends.items())


def landed(config: Config, ds: Dataset, layer: str = "speed") -> np.ndarray:
    """(partition, offset) of every row ``layer`` (speed or batch) landed, in its table and in
    its part of quarantine, with repeats: an (n, 2) array."""
    out = []
    for table_layer, where in ((layer, ""), ("quarantine", f" WHERE \"_layer\" = '{layer}'")):
        table = layer_table(config, ds, table_layer)
        if table is not None:
            out += [(r["_partition"], r["_offset"])
                    for r in query(table, f"SELECT \"_partition\", \"_offset\" FROM t{where}")]
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def count_exactly_once(config: Config, ds: Dataset, ends: dict[int, int], layer: str = "speed") -> tuple[int, int]:
    """(lost, duplicated) offsets of ``layer`` against the log ``[0, end)`` per partition; an
    offset landed that the log does not hold counts as lost."""
    rows = landed(config, ds, layer)
    lost = dup = 0
    for p, end in ends.items():
        cov = check_exactly_once(np.arange(end), rows[rows[:, 0] == p][:, 1], 0, end)
        lost += len(cov.missing) + len(cov.unexpected)
        dup += len(cov.duplicated)
    return lost, dup


def sigkill(pids) -> int:
    """SIGKILL each of ``pids`` (a crash: no shutdown hook runs); how many were still there."""
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass  # gone already
    return killed


def spark_drivers(pid: int) -> list[int]:
    """The Spark driver JVMs (spark-submit's ``SparkSubmit``) among ``pid`` and the processes
    below it (one that ends meanwhile, or is a zombie, is not one)."""
    out = []
    for p in descendants(pid):
        try:
            if "org.apache.spark.deploy.SparkSubmit" in psutil.Process(p).cmdline():
                out.append(p)
        except psutil.Error:
            pass
    return out
