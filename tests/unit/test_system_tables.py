"""loglake's own tables appended by delta-rs (``loglake.lake.system_tables.append``): no JVM
here, the tables read back by delta-rs, as the CLI and the audit read them. (A ledger Spark
made, appended to this way and read by Spark: tests/integration/test_batch.py.)"""

from __future__ import annotations

import threading

from deltalake import DeltaTable, write_deltalake

from loglake.core.config import load_config
from loglake.core.contracts import LEDGER, QUALITY_RESULTS
from loglake.lake import system_tables
from loglake.lake.delta_io import APPENDED_BY_DELTA_RS
from loglake.testing import write_conf


def config_in(tmp_path):
    # No broker is reached: appends touch only the lake.
    return load_config(write_conf(tmp_path, "localhost:1"), home=tmp_path / "state")


def row(i: int, **kw) -> dict:
    return {"dataset": "job_views", "topic": "job_views", "partition": i % 3, "start": i, "end": i + 1,
            "records": 1, "quarantined": 0, "run_id": f"run-{i}", "state": "written", **kw}


def test_concurrent_first_appends_all_land_and_the_table_checkpoints_as_spark_would(tmp_path):
    config = config_in(tmp_path)
    errors = []

    def append(i: int) -> None:
        try:
            system_tables.append(None, config, LEDGER, [row(i)], stamp="committed_at")
        except Exception as e:  # noqa: BLE001 - the assertion names it
            errors.append(e)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for i in range(4, 12):
        append(i)
    table = DeltaTable(config.system_table_path(LEDGER))
    got = table.to_pyarrow_table()
    assert sorted(got.column("run_id").to_pylist()) == sorted(f"run-{i}" for i in range(12))
    assert got.schema.equals(LEDGER.contract.arrow_schema())
    assert all(v is not None for v in got.column("committed_at").to_pylist())
    assert table.metadata().configuration == APPENDED_BY_DELTA_RS
    assert table.version() >= 10 and table.metadata().configuration["delta.checkpointInterval"] == "10"
    log = {p.name for p in (tmp_path / "state" / "lake" / "_ledger" / "offsets" / "_delta_log").iterdir()}
    assert any(name.endswith(".checkpoint.parquet") for name in log), sorted(log)


def test_an_append_tied_to_a_transaction_lands_once(tmp_path):
    config = config_in(tmp_path)
    for attempt in range(3):  # a retried writer recording the same version again
        system_tables.append(None, config, QUALITY_RESULTS, [{"dataset": "d", "run_id": f"try-{attempt}"}],
                             stamp="validated_at", txn=("loglake-test", 7))
    system_tables.append(None, config, QUALITY_RESULTS, [{"dataset": "d", "run_id": "next"}], stamp="validated_at",
                         txn=("loglake-test", 8))
    table = DeltaTable(config.system_table_path(QUALITY_RESULTS))
    assert sorted(table.to_pyarrow_table().column("run_id").to_pylist()) == ["next", "try-0"]
    assert table.transaction_version("loglake-test") == 8


def test_a_table_made_without_the_checkpoint_interval_or_a_column_gains_both(tmp_path):
    """A ledger an older loglake made (fewer columns, delta-rs' default checkpoint interval)."""
    config = config_in(tmp_path)
    path = config.system_table_path(LEDGER)
    old = LEDGER.contract.arrow_schema()
    old = old.remove(old.get_field_index("fresh_records"))
    import pyarrow as pa

    write_deltalake(path, pa.Table.from_pylist([row(0, committed_at=None)], schema=old), mode="append")
    system_tables.append(None, config, LEDGER, [row(1, fresh_records=5)], stamp="committed_at")
    table = DeltaTable(path)
    assert table.metadata().configuration == APPENDED_BY_DELTA_RS
    got = {r["run_id"]: r["fresh_records"] for r in table.to_pyarrow_table().to_pylist()}
    assert got == {"run-0": None, "run-1": 5}
