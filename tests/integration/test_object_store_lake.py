"""loglake on an object-store lake (issue 25): tables, checkpoints and leases on a real S3 server
(versitygw), no filesystem shared between writers. The speed layer, a batch run and its quality
gate, the audit and the serving view, each through the `loglake` command as an operator runs
it; then what other tools see on the store: delta-rs reads the same tables, every version of
every table is one commit file, and the leases are objects beside the tables."""

from __future__ import annotations

import pytest

from loglake.core import objectstore
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks
from loglake.tables import open_table, query
from loglake.local.produce import produce
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

NOISE = ["WARN ", "Stage ", "Traceback", "Using incubator modules"]


def _commit_versions(config, path: str) -> list[int]:
    names = [uri.rsplit("/", 1)[1] for uri in objectstore.listing(config.object_store, f"{path}/_delta_log/")]
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


# make test-long only; make test covers its parts: Spark's and delta-rs's commits on the store in
# test_object_store_commits, the leases on the store in test_object_store_leases, the same commands on
# a filesystem lake in test_cli; the whole stack on the store in make test-compose.
@pytest.mark.long
def test_speed_batch_audit_and_serving_on_an_s3_lake(make_config, s3_lake):
    config = make_config(lake=s3_lake)
    ds = config.dataset("job_views")
    produce(config, ds, 300, bad_fraction=0.1, seed=11)
    ends = {p: hi for p, (_lo, hi) in log_bounds(config, ds.topic).items()}

    speed = run_loglake(config, "speed", "run", "job_views", "--available-now", timeout=600)
    assert speed.returncode == 0, speed.stdout + speed.stderr
    batch = run_loglake(config, "batch", "job_views", timeout=600)
    assert batch.returncode == 0, batch.stdout + batch.stderr
    assert "batch job_views: 270 rows to batch.job_views, 30 to quarantine.job_views" in batch.stdout
    assert "published" in batch.stdout
    assert batch_watermarks(config, ds) == {p: e for p, e in ends.items() if e}
    audit = run_loglake(config, "audit", "job_views", timeout=600)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "0 missing, 0 duplicated" in audit.stdout
    served = run_loglake(config, "query", "SELECT count(*) AS n FROM job_views", "--format", "csv")
    assert (served.returncode, served.stdout) == (0, "n\n270\n"), served.stderr
    for r in (speed, batch, audit, served):
        assert not [n for n in NOISE if n in r.stdout + r.stderr], r.stdout + r.stderr

    # What another tool sees on the store: delta-rs reads the tables Spark wrote (s3://, the
    # same objects), and every version of each table is exactly one commit file, 0..N.
    distinct = "count(DISTINCT _partition * 1000000 + _offset)"
    for layer, rows, sql in (("speed", 270, f"SELECT count(*) AS n, {distinct} AS d FROM t"),
                             ("batch", 270, f"SELECT count(*) AS n, {distinct} AS d FROM t"),
                             ("quarantine", 30, f"SELECT count(*) AS n, {distinct} AS d FROM t WHERE _layer = 'speed'"),
                             ("quarantine", 30, f"SELECT count(*) AS n, {distinct} AS d FROM t WHERE _layer = 'batch'")):
        path = config.table_path(ds, layer)
        assert path.startswith("s3a://")
        got = query(open_table(path, store=config.object_store), sql)
        assert got[0]["n"] == got[0]["d"] == rows, (layer, sql, got)
        versions = _commit_versions(config, path)
        assert versions == list(range(len(versions))) and versions, (layer, versions)
    # The leases and the checkpoint live on the store, beside the tables: no shared filesystem.
    assert objectstore.get_json(config.object_store, f"{config.lock_root}/job_views.json")[1] is not None
    assert objectstore.read_text(config.object_store, f"{config.checkpoint_path(ds)}/metadata")
