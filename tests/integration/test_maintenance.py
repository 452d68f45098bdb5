"""Delta maintenance against a real broker, real Spark and real Delta (OPTIMIZE while the stream
writes, with queries beside it: the R4 scenario, tests/reliability/test_busy.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from pyspark.sql import functions as F

from loglake.core.config import load_config
from loglake.core.errors import ParamError
from loglake.ledger.history import table_history
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.ledger.results import last_maintenance
from loglake.tables import open_table
from loglake.lake import delta_io
from loglake.quality.pipeline import recompute_and_publish
from loglake.maintenance.job import run_maintenance
from loglake.serving.spark import serving_view
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def version(path: str) -> int:
    table = open_table(path)
    return -1 if table is None else table.version()


def history(spark, path: str) -> list[dict]:
    from delta.tables import DeltaTable

    return [r.asDict() for r in DeltaTable.forPath(spark, path).history().collect()]


def offsets(df) -> list[tuple[int, int]]:
    return sorted((r["_partition"], r["_offset"]) for r in df.select("_partition", "_offset").collect())


def log_offsets(config, topic: str) -> list[tuple[int, int]]:
    # An idempotent, non-transactional producer writes contiguous offsets.
    return sorted((p, o) for p, (lo, hi) in log_bounds(config, topic).items() for o in range(lo, hi))


def landed(spark, config, ds):
    speed = spark.read.format("delta").load(config.table_path(ds, "speed"))
    quarantine = spark.read.format("delta").load(config.table_path(ds, "quarantine")).where("_layer = 'speed'")
    return speed.select("_partition", "_offset").unionByName(quarantine.select("_partition", "_offset"))


def row_hashes(df) -> list[str]:
    return sorted(r[0] for r in df.select(F.sha2(F.to_json(F.struct(*sorted(df.columns))), 256)).collect())


def test_expiry_removes_speed_rows_below_the_watermark_only(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 900, bad_fraction=0.1, seed=81)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "batch-1")
    marks = batch_watermarks(config, ds)
    assert marks and all(w > 0 for w in marks.values())
    produce(config, ds, 300, bad_fraction=0.1, seed=82)
    run_speed(spark, config, ds, available_now=True)

    def read(layer):
        return spark.read.format("delta").load(config.table_path(ds, layer))

    below = " OR ".join(f"(_partition = {p} AND _offset < {w})" for p, w in marks.items())
    speed_above = offsets(read("speed").where(f"NOT ({below})"))
    speed_below = read("speed").where(below).count()
    batch_quarantine = offsets(read("quarantine").where("_layer = 'batch'"))
    speed_quarantine_above = offsets(read("quarantine").where(f"_layer = 'speed' AND NOT ({below})"))
    assert speed_above and speed_below and batch_quarantine and speed_quarantine_above
    view_before = row_hashes(serving_view(spark, config, ds))

    summary = run_maintenance(spark, config, ds, "expire-1")

    assert read("speed").where(below).count() == 0
    assert offsets(read("speed")) == speed_above
    assert offsets(read("quarantine").where("_layer = 'speed'")) == speed_quarantine_above
    assert offsets(read("quarantine").where("_layer = 'batch'")) == batch_quarantine
    assert row_hashes(serving_view(spark, config, ds)) == view_before
    expired = {r["table"]: r["rows_deleted"] for r in summary.operations if r["operation"] == "expire"}
    assert expired[ds.tables.speed] == speed_below
    assert set(expired) == {ds.tables.speed, ds.tables.quarantine}  # never the batch table

    # The run is recorded: one row per table and operation, sizes before and after.
    log = last_maintenance(config, ds)
    assert {r["run_id"] for r in log} == {"expire-1"}
    assert {(r["table"], r["operation"]) for r in log} == {
        (t, op) for t in (ds.tables.speed, ds.tables.batch, ds.tables.quarantine) for op in ("optimize", "vacuum")
    } | {(ds.tables.speed, "expire"), (ds.tables.quarantine, "expire")}
    for r in log:
        assert min(r["files_before"], r["bytes_before"], r["files_after"], r["bytes_after"]) >= 0
        assert r["version_after"] >= r["version_before"] and r["attempts"] == 1
    speed_expire = next(r for r in log if r["table"] == ds.tables.speed and r["operation"] == "expire")
    assert speed_expire["rows_deleted"] == speed_below and speed_expire["version_after"] > speed_expire["version_before"]

    # `loglake history` says what each version is: micro-batches, the batch run, the publish, maintenance.
    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)}
    speed_history = subprocess.run([sys.executable, "-m", "loglake.cli", "history", "speed.job_views", "--limit", "50"],
                                   capture_output=True, text=True, env=env, timeout=120)
    assert speed_history.returncode == 0 and speed_history.stderr == "", speed_history.stderr
    said = speed_history.stdout
    assert "speed micro-batch 0 (schema v1)" in said and "maintenance expire (run expire-1)" in said, said
    assert "maintenance optimize (run expire-1)" in said and "WRITE" in said and "DELETE" in said
    batch = "\n".join(r["meaning"] for r in table_history(config, "batch.job_views"))
    assert "batch run batch-1 wrote ranges 0:0-" in batch and "served from here on (published by run batch-1" in batch
    with pytest.raises(ParamError, match="unknown table 'batch.nope'; known tables: batch.company_ceos"):
        table_history(config, "batch.nope")

    # Batch catches up with the log end, so expiry leaves no speed row at all. A lost
    # checkpoint then resumes at the watermark instead of replaying the log from the start.
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "batch-2")
    run_maintenance(spark, config, ds, "expire-2")
    assert landed(spark, config, ds).count() == 0
    marks = batch_watermarks(config, ds)
    shutil.rmtree(config.checkpoint_path(ds))
    produce(config, ds, 60, seed=83)
    run_speed(spark, config, ds, available_now=True)
    new = sorted((p, o) for p, o in log_offsets(config, ds.topic) if o >= marks.get(p, 0))
    assert offsets(landed(spark, config, ds)) == new and len(new) == 60


def test_short_vacuum_retention_runs_only_when_allowed_explicitly(spark, make_config):
    config = make_config()
    path = config.conf_dir / "datasets" / "job_views.yaml"
    data = yaml.safe_load(path.read_text())
    data["maintenance"] = {"vacuum_retention_hours": 0, "allow_short_vacuum_retention": True}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_config(config.conf_dir, home=config.home)
    ds = config.dataset("job_views")
    res = produce(config, ds, 400, seed=91)
    for _ in range(3):  # several appends: files for OPTIMIZE to replace and VACUUM to delete
        produce(config, ds, 100, seed=None)
        run_speed(spark, config, ds, available_now=True)

    summary = run_maintenance(spark, config, ds, "short-vacuum")

    speed_path = config.table_path(ds, "speed")
    operations = [h["operation"] for h in history(spark, speed_path)]
    assert "VACUUM START" in operations and "VACUUM END" in operations
    vac = next(r for r in summary.operations if r["table"] == ds.tables.speed and r["operation"] == "vacuum")
    opt = next(r for r in summary.operations if r["table"] == ds.tables.speed and r["operation"] == "optimize")
    # With no retention, the files OPTIMIZE replaced are deleted from storage.
    assert vac["files_before"] > vac["files_after"] == opt["files_after"]
    assert spark.read.format("delta").load(speed_path).count() == res.good + 300
    # Delta's own guard is back on for everything else.
    assert spark.conf.get("spark.databricks.delta.retentionDurationCheck.enabled") == "true"


def test_conflicts_are_retried_with_a_bound_and_counted(spark):
    from delta.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException

    failures = [ConcurrentAppendException("files were added", "trace"),
                ConcurrentDeleteReadException("a file was removed", "trace")]

    def flaky():
        if failures:
            raise failures.pop(0)
        return "done"

    assert delta_io.retry_conflicts(flaky, "test", base_delay=0.01) == ("done", 3)

    calls = []

    def always():
        calls.append(1)
        raise ConcurrentAppendException("files were added", "trace")

    with pytest.raises(ConcurrentAppendException):
        delta_io.retry_conflicts(always, "test", attempts=4, base_delay=0.01)
    assert len(calls) == 4

    def broken():
        calls.append(2)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        delta_io.retry_conflicts(broken, "test", base_delay=0.01)
    assert calls.count(2) == 1


# make test-long only; make test covers its parts: maintenance beside readers: test_snapshots; expiry by the
# watermark: the expiry test above.
@pytest.mark.long
def test_loglake_maintain_on_a_changelog_keeps_its_state_and_view(spark, make_config):
    config = make_config(datasets={"company_ceos": {"maintenance": {"zorder_by": ["company_id", "ceo"]}}})
    ds = config.dataset("company_ceos")
    produce(config, ds, 400, bad_fraction=0.05, seed=95)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "batch-1")
    marks = batch_watermarks(config, ds)
    produce(config, ds, 150, bad_fraction=0.05, seed=96)
    run_speed(spark, config, ds, available_now=True)

    def read(layer):
        return spark.read.format("delta").load(config.table_path(ds, layer))

    below = " OR ".join(f"(_partition = {p} AND _offset < {w})" for p, w in marks.items())
    assert read("speed").where(below).count() > 0
    speed_above = offsets(read("speed").where(f"NOT ({below})"))
    latest = row_hashes(read("latest"))
    view = row_hashes(serving_view(spark, config, ds))

    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)}
    r = subprocess.run([sys.executable, "-m", "loglake.cli", "maintain", "company_ceos"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr

    assert read("speed").where(below).count() == 0 and offsets(read("speed")) == speed_above
    assert row_hashes(read("latest")) == latest  # the latest state is never expired
    assert row_hashes(serving_view(spark, config, ds)) == view
    out = r.stdout
    assert "maintain company_ceos: 4 table(s)" in out
    for table, operations in ((ds.tables.speed, ("expire", "optimize", "vacuum")),
                              (ds.tables.quarantine, ("expire", "optimize", "vacuum")),
                              (ds.tables.batch, ("optimize", "vacuum")), (ds.tables.latest, ("optimize", "vacuum"))):
        for op in operations:
            assert any(line.split()[:2] == [table, op] for line in out.splitlines()), (table, op, out)
    log = last_maintenance(config, ds)
    assert {(row["table"], row["operation"]) for row in log} >= {
        (ds.tables.latest, "optimize"), (ds.tables.speed, "expire")}

    # Z-order where a table has every maintenance.zorder_by column, bin-packing where not (the
    # quarantine holds raw bytes): each table's OPTIMIZE commit, read from its Delta history.
    def optimize_commit(layer: str) -> dict:
        (row,) = [r for r in log if r["path"] == config.table_path(ds, layer) and r["operation"] == "optimize"]
        assert row["version_after"] > row["version_before"], row  # it committed
        (entry,) = [e for e in open_table(row["path"]).history()
                    if e["version"] == row["version_after"]]
        assert entry["operation"] == "OPTIMIZE", entry
        return entry["operationParameters"]

    for layer in ("speed", "batch", "latest"):
        assert json.loads(optimize_commit(layer)["zOrderBy"]) == ["company_id", "ceo"], layer
    assert json.loads(optimize_commit("quarantine")["zOrderBy"]) == []
