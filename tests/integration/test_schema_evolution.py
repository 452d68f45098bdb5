"""Schemas that evolve without losing an offset (issue 12).

An additive change (a new optional field, a loosened rule) applies while data flows: after
the conf change and a restart of the stream every typed table and the serving view have the
new column, older rows read it as null, a recompute of an old range gives the same rows plus
the null column, and every offset is still in the tables exactly once. A breaking change is
refused before anything runs and changes no table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from loglake.ops.audit import audit_dataset
from loglake.core.errors import SchemaChangeError
from loglake.ledger.history import table_history
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import ledger_rows
from loglake.batch.planning import plan_backfill, plan_batch
from loglake.local.produce import produce
from loglake.schema_versions import check, recorded_versions, schema_status, schema_text
from loglake.tables import open_table, query as delta_query
from loglake.quality.pipeline import recompute_and_publish
from loglake.serving.spark import query
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration

JOB_VIEWS_FIELDS = {
    "view_id": {"type": "string"}, "user_id": {"type": "long", "min": 1}, "job_id": {"type": "long", "min": 1},
    "viewed_at": {"type": "timestamp"},
    "source": {"type": "string", "enum": ["search", "recommendation", "email", "company_page", "direct"]},
    "duration_ms": {"type": "long", "min": 0, "max": 86400000},
}


def evolved(**changes) -> dict:
    """job_views' schema with ``changes`` (field → spec, None: removed)."""
    fields = {**JOB_VIEWS_FIELDS, **changes}
    return {"job_views": {"schema": {k: v for k, v in fields.items() if v is not None}}}


def columns(config, ds, layer) -> list[str]:
    return [f.name for f in open_table(config.table_path(ds, layer)).schema().fields]


def test_a_new_optional_field_applies_while_data_flows(spark, make_config):
    config = make_config(topic_suffix="evolve", datasets=evolved())
    ds = config.dataset("job_views")
    produce(config, ds, 300, seed=1)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "v1")
    before = {r["_offset"] * 10 + r["_partition"]: r for r in
              query(spark, config, "SELECT * FROM batch.job_views").collect()}
    assert [v["version"] for v in recorded_versions(config, ds)] == [1]

    # The conf gains an optional field and a loosened rule (a new enum value); the stream restarts.
    referrer = {"type": "string", "required": False, "description": "where the user came from"}
    config = make_config(topic_suffix="evolve", datasets=evolved(referrer=referrer, source={
        "type": "string", "enum": [*JOB_VIEWS_FIELDS["source"]["enum"], "ads"]}))
    ds = config.dataset("job_views")
    check(config, ds)  # additive: accepted
    assert "the next writer records it" in schema_text(schema_status(config, ds))
    produce(config, ds, 200, seed=3)  # the generator fills the new field
    run_speed(spark, config, ds, available_now=True)
    versions = recorded_versions(config, ds)
    assert [v["version"] for v in versions] == [1, 2] and "referrer: new optional field" in versions[1]["change"]
    assert "referrer" in columns(config, ds, "speed")

    # New records carry it; older speed rows read it as null.
    speed = query(spark, config, "SELECT _partition, _offset, referrer FROM speed.job_views").collect()
    assert len(speed) == 500
    assert sum(r["referrer"] is not None for r in speed) == 200

    # One recompute of the whole log: the old range gives the same rows + the null column, the new one has it.
    everything = plan_backfill(config, ds, ranges=[f"{p}:0-{hi}" for p, (_lo, hi) in log_bounds(config, ds.topic).items()])
    recompute_and_publish(spark, config, ds, everything, "v2-all")
    assert "referrer" in columns(config, ds, "batch")
    after = {r["_offset"] * 10 + r["_partition"]: r.asDict() for r in
             query(spark, config, "SELECT * FROM batch.job_views").collect()}
    for k, row in before.items():
        assert after[k] == {**row.asDict(), "referrer": None}
    assert sum(r["referrer"] is not None for r in after.values()) == 200

    # The serving view has the column, every offset once; the ledger says which version validated which range.
    served = query(spark, config, "SELECT count(*) AS n, count(referrer) AS r FROM job_views").first()
    assert (served["n"], served["r"]) == (500, 200)
    by_run = {r["run_id"]: r["schema_version"] for r in ledger_rows(config, ds) if r["state"] == "published"}
    assert by_run == {"v1": 1, "v2-all": 2}
    assert audit_dataset(config, ds, record=False).ok
    # Each speed micro-batch's commit says the version it validated under.
    history = open_table(config.table_path(ds, "speed")).history()
    commits = [json.loads(h["userMetadata"]) for h in history if h.get("userMetadata")]
    metas = [m["loglake_schema_version"] for m in commits if "loglake_batch" in m]  # the micro-batches'
    assert sorted(set(metas)) == [1, 2]
    # ... and `loglake history` says so, with the column added and the old range swapped in after its gate.
    speed_said = "\n".join(r["meaning"] for r in table_history(config, "speed.job_views", 50))
    assert "(schema v1)" in speed_said and "(schema v2)" in speed_said and "schema evolved: columns added" in speed_said
    batch_said = "\n".join(r["meaning"] for r in table_history(config, "batch.job_views", 50))
    assert "quality gate of run v2-all: validated rows of" in batch_said, batch_said


def test_a_changelog_gains_a_field_in_its_latest_state(spark, make_config):
    ceos = {"company_id": {"type": "string", "pattern": "^c[0-9]+$"}, "company": {"type": "string"},
            "ceo": {"type": "string"}, "since": {"type": "timestamp"}}
    config = make_config(topic_suffix="evolve-cl")
    ds = config.dataset("company_ceos")
    produce(config, ds, 150, seed=4)
    run_speed(spark, config, ds, available_now=True)
    config = make_config(topic_suffix="evolve-cl", datasets={"company_ceos": {"schema": {
        **ceos, "board_seats": {"type": "long", "required": False, "min": 0}}}})
    ds = config.dataset("company_ceos")
    produce(config, ds, 150, seed=5)
    run_speed(spark, config, ds, available_now=True)
    assert "board_seats" in columns(config, ds, "latest")
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "v2")
    assert "board_seats" in columns(config, ds, "batch")
    served = query(spark, config, "SELECT count(*) AS n, count(board_seats) AS b FROM company_ceos").first()
    latest = delta_query(open_table(config.table_path(ds, "latest")), "SELECT count(*) AS n FROM t")[0]["n"]
    assert served["n"] == latest and 0 < served["b"] < served["n"]
    assert audit_dataset(config, ds, record=False).ok


BREAKING = [
    ("type", evolved(duration_ms={"type": "string"}), "schema.duration_ms", "type changed (long → string)"),
    ("removed", evolved(job_id=None), "schema.job_id", "removed (or renamed)"),
    ("made required", evolved(referrer={"type": "string"}), "schema.referrer", "made required"),
    ("new required", evolved(referrer={"type": "string", "required": False}, channel={"type": "string"}),
     "schema.channel", "new field is required"),
]


def test_a_breaking_change_is_refused_before_anything_runs(spark, make_config):
    config = make_config(topic_suffix="breaking", datasets=evolved(referrer={"type": "string", "required": False}))
    ds = config.dataset("job_views")
    produce(config, ds, 50, seed=6)
    run_speed(spark, config, ds, available_now=True)
    tables = {layer: open_table(config.table_path(ds, layer)).version() for layer in ("speed", "quarantine")}
    for name, datasets, key, words in BREAKING:
        bad = make_config(topic_suffix="breaking", datasets=datasets)
        with pytest.raises(SchemaChangeError) as e:
            check(bad, bad.dataset("job_views"))
        assert e.value.key == key and words in str(e.value) and "dataset job_views" in str(e.value), name
        assert "required: false" in str(e.value) and "backfill it from the log" in str(e.value)
    # The writers refuse it too (a job may start long after the conf was loaded) and no table changes.
    bad = make_config(topic_suffix="breaking", datasets=BREAKING[0][1])
    with pytest.raises(SchemaChangeError):
        run_speed(spark, bad, bad.dataset("job_views"), available_now=True)
    assert {layer: open_table(bad.table_path(ds, layer)).version() for layer in tables} == tables
    # The CLI refuses it in its own words before a JVM starts; status names it.
    env = {**os.environ, "LOGLAKE_CONF": str(bad.conf_dir), "LOGLAKE_HOME": str(bad.home)}
    cli = subprocess.run([sys.executable, "-m", "loglake.cli", "batch", "job_views"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert cli.returncode == 2 and cli.stderr.startswith("loglake: error:") and "Traceback" not in cli.stderr
    assert "duration_ms: type changed (long → string)" in cli.stderr, cli.stderr
    assert "REFUSED" in schema_text(schema_status(bad, bad.dataset("job_views")))
