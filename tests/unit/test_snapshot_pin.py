"""A snapshot pins the speed-side tables at one micro-batch of the stream (loglake.ledger.snapshots).

A micro-batch commits its valid rows to the speed table, then its quarantined rows to the
quarantine table: two Delta commits. A reader pinning between them saw the batch's rows
without its quarantined offsets — a gap in "served + quarantined = the log" (found by R4,
soak/busy.py). The tables are written here with delta-rs, tagged the way the stream tags
them; the stream's checkpoint is two files (its id, its commit log).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from loglake.core.config import load_config
from loglake.testing import write_conf
from loglake.ledger.snapshots import pin
from loglake.tables import open_table, query


@pytest.fixture
def lake(tmp_path):
    config = load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")
    ds = config.dataset("job_views")
    checkpoint = Path(config.checkpoint_path(ds))
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"stream-1"}\n')
    paths = {layer: config.table_path(ds, layer) for layer in ("speed", "quarantine")}
    write_deltalake(paths["quarantine"], rows([]), mode="append")  # the stream creates it empty at start
    return config, ds, checkpoint, paths


APP = "loglake-speed-job_views-stream-1"  # how spark_jobs/speed.py tags its commits: the checkpoint's id


def rows(offsets: list[int]) -> pa.Table:
    return pa.table({"_partition": pa.array([0] * len(offsets), pa.int32()), "_offset": pa.array(offsets, pa.int64())})


STYLE = {"style": "metadata"}


@pytest.fixture(params=["metadata", "txn"], autouse=True)
def style(request):
    """How the stream tags its commits: "metadata" as it does now (each commit's userMetadata
    names stream and batch; Delta's SetTransaction only on the query's first micro-batch,
    batch 0 here), "txn" as it did before (a SetTransaction in every commit, no batch in the
    metadata: tables written then are still pinned right)."""
    STYLE["style"] = request.param
    yield request.param


def append(path: str, offsets: list[int], app: str, batch: int) -> None:
    txn = [Transaction(app_id=app, version=batch)] if STYLE["style"] == "txn" or batch == 0 else None
    meta = {"userMetadata": json.dumps({"loglake_stream": app, "loglake_batch": batch})} \
        if STYLE["style"] == "metadata" else None
    write_deltalake(path, rows(offsets), mode="append",
                    commit_properties=CommitProperties(app_transactions=txn, custom_metadata=meta))


def served(config, ds, paths) -> tuple[list[int], list[int]]:
    """Offsets of the speed and the quarantine table at one pinned snapshot."""
    snap = pin(config, ds)
    out = []
    for layer in ("speed", "quarantine"):
        v = snap.version(layer)
        table = None if v is None else open_table(paths[layer], v)
        out.append(sorted(r["_offset"] for r in query(table, 'SELECT "_offset" FROM t')) if table else [])
    return out[0], out[1]


def test_a_snapshot_never_holds_a_batch_without_its_quarantined_offsets(lake):
    config, ds, checkpoint, paths = lake
    app = APP

    append(paths["speed"], [0, 1, 2, 4], app, 0)   # batch 0: valid rows,
    append(paths["quarantine"], [3], app, 0)        # its quarantined offset,
    (checkpoint / "commits" / "0").write_text("v1")  # finished
    assert served(config, ds, paths) == ([0, 1, 2, 4], [3])

    append(paths["speed"], [5, 6, 8], app, 1)       # batch 1: valid rows committed, the quarantine part not yet
    assert served(config, ds, paths) == ([0, 1, 2, 4], [3])  # batch 1 is not whole: batch 0
    append(paths["quarantine"], [7], app, 1)
    assert served(config, ds, paths) == ([0, 1, 2, 4], [3])  # whole, but not finished (a changelog MERGEs next)
    (checkpoint / "commits" / "1").write_text("v1")
    assert served(config, ds, paths) == ([0, 1, 2, 4, 5, 6, 8], [3, 7])

    append(paths["speed"], [9, 10], app, 2)         # batch 2: clean, no quarantine commit
    (checkpoint / "commits" / "2").write_text("v1")
    append(paths["speed"], [12], app, 3)            # batch 3 under way; meanwhile maintenance deletes below 2
    DeltaTable(paths["speed"]).delete("_offset < 2")
    assert served(config, ds, paths) == ([0, 1, 2, 4, 5, 6, 8, 9, 10], [3, 7])  # batch 2, before the delete
    append(paths["quarantine"], [11], app, 3)
    (checkpoint / "commits" / "3").write_text("v1")
    append(paths["quarantine"], [13], app, 4)       # batch 4's quarantine part, ahead of its speed part: left out
    assert served(config, ds, paths) == ([2, 4, 5, 6, 8, 9, 10, 12], [3, 7, 11])


def test_a_batch_not_finished_before_the_first_is_not_served(lake):
    config, ds, checkpoint, paths = lake
    app = APP
    append(paths["speed"], [0, 2], app, 0)
    assert pin(config, ds).version("speed") is None  # the table did not exist before batch 0
    (checkpoint / "commits" / "0").write_text("v1")
    assert served(config, ds, paths) == ([0, 2], [])


def test_without_a_stream_checkpoint_the_tables_are_pinned_as_they_are(tmp_path):
    config = load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")
    ds = config.dataset("job_views")
    paths = {layer: config.table_path(ds, layer) for layer in ("speed", "quarantine")}
    append(paths["speed"], [0, 1], "someone-else", 5)
    write_deltalake(paths["quarantine"], rows([2]), mode="append")
    assert served(config, ds, paths) == ([0, 1], [2])
