"""The explained diff between batch and speed rows, on tables built by the real jobs."""

from __future__ import annotations

import json

import pytest
from delta.tables import DeltaTable

from loglake.ops.diff import ChangedValue, diff_plan, diff_range, format_diff
from loglake.core.errors import ParamError
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.tables import open_table, query
from loglake.quality.pipeline import recompute_and_publish
from loglake.speed.stream import run_speed

from loglake.testing import run_loglake

pytestmark = pytest.mark.integration


def test_diff_explains_a_changed_row_and_missing_rows(spark, make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 900, bad_fraction=0.05, seed=71)
    run_speed(spark, config, ds, available_now=True)
    plan = plan_batch(config, ds)
    recompute_and_publish(spark, config, ds, plan, "all")
    batch_path, speed_path = config.table_path(ds, "batch"), config.table_path(ds, "speed")
    rows = query(open_table(batch_path), 'SELECT "_partition" AS p, "_offset" AS o, duration_ms FROM t '
                                         'ORDER BY p, o LIMIT 3')
    p, end = rows[0]["p"], next(r.end for r in plan.ranges if r.partition == rows[0]["p"])

    clean = diff_range(config, ds, p, 0, end)
    assert clean.missing_in_speed.count == clean.missing_in_batch.count == clean.changed.rows == 0
    assert clean.changed.in_both > 0 and {"duration_ms", "view_date", "_kafka_timestamp"} <= set(
        clean.compared_columns)
    assert any("below the batch watermark" in n for n in clean.notes)
    assert all(d.changed.rows == 0 for d in diff_plan(config, ds, plan))

    changed, gone_batch, gone_speed = (r["o"] for r in rows)
    DeltaTable.forPath(spark, batch_path).update(f"_partition = {p} AND _offset = {changed}",
                                                 {"duration_ms": "duration_ms + 1"})
    DeltaTable.forPath(spark, batch_path).delete(f"_partition = {p} AND _offset = {gone_batch}")
    DeltaTable.forPath(spark, speed_path).delete(f"_partition = {p} AND _offset = {gone_speed}")

    d = diff_range(config, ds, p, 0, end)
    assert d.changed.rows == 1 and list(d.changed.columns) == ["duration_ms"]
    assert d.changed.columns["duration_ms"].sample == [
        ChangedValue(changed, rows[0]["duration_ms"] + 1, rows[0]["duration_ms"])]
    assert (d.missing_in_batch.count, d.missing_in_batch.quarantined) == (1, 0)
    assert d.missing_in_batch.sample == [gone_batch]
    assert (d.missing_in_speed.count, d.missing_in_speed.quarantined) == (1, 0)
    assert d.missing_in_speed.sample == [gone_speed]
    text = "\n".join(format_diff(d))
    assert "duration_ms: 1 row(s) differ" in text and f"offset {changed}:" in text

    # The command line prints the same and exits 0: a diff explains, it does not judge.
    cli = run_loglake(config, "diff", "job_views", "--partition", str(p), "--from", "0", "--to", str(end), "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["changed"]["columns"]["duration_ms"]["rows"] == 1


def test_diff_rejects_bad_arguments_naming_the_flag(make_config):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 10, seed=72)
    for args, flag in ((["--partition", "0", "--from", "-1", "--to", "5"], "--from"),
                       (["--partition", "0", "--from", "0", "--to", "-5"], "--to"),
                       (["--partition", "0", "--from", "9", "--to", "5"], "--from"),
                       (["--partition", "99", "--from", "0", "--to", "5"], "--partition")):
        cli = run_loglake(config, "diff", "job_views", *args)
        assert cli.returncode == 2 and f"loglake: error: {flag}:" in cli.stderr, (args, cli.stderr)
    with pytest.raises(ParamError) as e:
        diff_range(config, ds, 6, 0, 1)
    assert e.value.field == "partition"


def test_changelog_diff_counts_superseded_rows_not_missing(spark, make_config):
    config = make_config()
    ds = config.dataset("company_ceos")
    res = produce(config, ds, 400, seed=73)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "rebuild")
    latest = query(open_table(config.table_path(ds, "batch")), 'SELECT "_partition" AS p, count(*) AS n FROM t '
                                                                'GROUP BY p ORDER BY n DESC LIMIT 1')[0]
    end = res.by_partition[latest["p"]]
    d = diff_range(config, ds, latest["p"], 0, end)
    assert d.missing_in_batch is None
    assert d.missing_in_speed.count == 0 and d.changed.rows == 0
    assert d.changed.in_both == latest["n"]
    assert d.superseded_in_batch.count == end - latest["n"]
    assert "_deleted" not in d.compared_columns
