"""Commits loglake did not make (issue 22.7): a notebook or another tool appends to a table
behind loglake's back with its own Delta writer (delta-rs here, as such a tool would).

The audit checks the tables' newest versions beside the served ones and says which is
damaged; a publish never moves readers onto a version with a commit loglake did not make,
and ``loglake rebuild --layer batch`` repairs the table.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from loglake.ops.audit import audit_dataset
from loglake.ops.audit_report import format_audit
from loglake.core.contracts import AUDIT_RESULTS
from loglake.core.errors import ForeignCommitError
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.tables import open_table, query
from loglake.quality.pipeline import recompute_and_publish
from loglake.lifecycle.rebuild_job import rebuild
from loglake.serving.spark import query as serving_query
from loglake.speed.stream import run_speed
from tests.integration.test_audit import build_half

pytestmark = pytest.mark.integration


def append_a_copy(path: str) -> tuple[int, int]:
    """Append one copy of an existing row with delta-rs; its (partition, offset)."""
    table = DeltaTable(path)
    row = pa.table(table.to_pyarrow_dataset().head(1))
    write_deltalake(path, row, mode="append")
    return row.column("_partition")[0].as_py(), row.column("_offset")[0].as_py()


def served(spark, config) -> list[tuple]:
    return [tuple(r) for r in serving_query(spark, config, "SELECT _partition, _offset FROM job_views").collect()]


def test_the_audit_names_a_damaged_newest_version_and_the_served_one_ok(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    res = produce(config, ds, 1200, bad_fraction=0.05, seed=81)
    build_half(spark, config, ds)
    batch_path = config.table_path(ds, "batch")
    served_version = open_table(batch_path).version()
    p, offset = append_a_copy(batch_path)

    result = audit_dataset(config, ds, run_id="foreign")
    text = "\n".join(format_audit(result))
    assert not result.ok, text
    # What readers are served is whole; the newest version holds the copy.
    served_rows = [r for r in result.partitions if r.point == "served"]
    newest_rows = [r for r in result.partitions if r.point == "newest"]
    assert all(r.ok for r in served_rows) and sum(r.offsets_checked for r in served_rows) == res.records
    bad = [r for r in newest_rows if not r.ok]
    assert [(r.partition, r.layer, r.table_version, r.sample_duplicated) for r in bad] == [
        (p, "batch", served_version + 1, [offset])]
    assert f"{ds.tables.batch} served version {served_version}: ok" in text
    assert f"{ds.tables.batch} newest version {served_version + 1}: 1 duplicated" in text
    assert f"v{served_version + 1} WRITE by delta-rs" in text  # the commit, named
    # The stored rows say which version each checked.
    stored = query(open_table(config.system_table_path(AUDIT_RESULTS)),
                   "SELECT \"partition\", layer, point, table_version, duplicated FROM t WHERE duplicated > 0")
    assert stored == [{"partition": p, "layer": "batch", "point": "newest", "table_version": served_version + 1,
                       "duplicated": 1}]


def test_a_publish_refuses_a_commit_loglake_did_not_make_and_a_rebuild_repairs(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 1000, seed=82)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "first")
    batch_path = config.table_path(ds, "batch")
    served_version = open_table(batch_path).version()
    append_a_copy(batch_path)
    produce(config, ds, 300, seed=83)
    run_speed(spark, config, ds, available_now=True)

    with pytest.raises(ForeignCommitError) as refused:
        recompute_and_publish(spark, config, ds, plan_batch(config, ds), "second")
    message = str(refused.value)
    assert not refused.value.transient
    assert f"{ds.tables.batch} version {served_version + 1}: WRITE by delta-rs" in message, message
    assert f"loglake rebuild {ds.name} --layer batch" in message and "RESTORE" in message
    # Readers stay on the validated version: every offset once.
    rows = served(spark, config)
    assert len(rows) == 1300 and len(set(rows)) == 1300

    from loglake.ledger.history import foreign_commits

    rebuild(spark, config, ds, "batch", "repair")
    assert foreign_commits(batch_path, None) == []  # the rebuilt table is loglake's alone
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "third")
    rows = served(spark, config)
    assert len(rows) == 1300 and len(set(rows)) == 1300
    assert audit_dataset(config, ds, record=False).ok


def test_a_restore_to_a_checked_version_undoes_the_commits_before_it(tmp_path):
    """RESTORE (another repair) is a commit loglake did not make either: it is taken for what
    it does, the table back at a version whose commits were all checked."""
    from deltalake import CommitProperties

    from loglake.ledger.history import foreign_commits

    path = str(tmp_path / "t")
    ours = CommitProperties(custom_metadata={"userMetadata": '{"loglake_job": "batch"}'})
    write_deltalake(path, pa.table({"_offset": [0, 1]}), commit_properties=ours)  # v0
    write_deltalake(path, pa.table({"_offset": [1]}), mode="append")  # v1: a foreign copy
    write_deltalake(path, pa.table({"_offset": [2]}), mode="append", commit_properties=ours)  # v2
    assert [c["version"] for c in foreign_commits(path, 0)] == [1]
    DeltaTable(path).restore(0)  # v3: back at the served version
    assert foreign_commits(path, 0) == []
    DeltaTable(path).restore(2)  # v4: to a version that holds the foreign commit: still foreign
    assert [c["version"] for c in foreign_commits(path, 0)] == [1, 4]
