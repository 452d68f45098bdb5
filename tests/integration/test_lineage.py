"""OpenLineage events of a batch run (issue 27): the jobs' events through the OpenLineage
client's file transport, read back and checked: the input topic and the offset ranges per
partition, the output tables and the versions they were left at, the quality gate's result."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from loglake.jobs.protocol import JobRequest
from loglake.ledger.planning import plan_batch
from loglake.ledger.tables import snapshot
from loglake.local.produce import produce
from loglake.testing import config_environment
from spark_jobs import batch, entry, quality

pytestmark = pytest.mark.integration


def test_a_batch_runs_events_name_its_topic_offset_ranges_tables_and_versions(spark, make_config, tmp_path):
    events_file = tmp_path / "lineage" / "events.jsonl"
    events_file.parent.mkdir()
    config = make_config(lineage={"transport": {"type": "file", "log_file_path": str(events_file), "append": True},
                         "namespace": "loglake-test"})
    ds = config.dataset("job_views")
    produce(config, ds, 240, bad_fraction=0.05, seed=281)

    @contextmanager
    def session(_config, _name):
        yield spark, 0.0, True

    plan = plan_batch(config, ds)
    with config_environment(config):
        wrote = entry.execute("batch", JobRequest("batch", ds.name, plan, "lineage-1").argv(), batch.run_job, session)
        gate = entry.execute("quality", JobRequest("quality", ds.name, plan, "lineage-1").argv(), quality.run_job,
                             session)
    assert wrote.records + wrote.quarantined == 240 and gate.published

    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("loglake.batch.job_views", "START"), ("loglake.batch.job_views", "COMPLETE"),
        ("loglake.quality.job_views", "START"), ("loglake.quality.job_views", "COMPLETE")]
    assert {e["job"]["namespace"] for e in events} == {"loglake-test"}
    start, done = events[0], events[1]
    assert start["run"]["runId"] == done["run"]["runId"] != events[2]["run"]["runId"]
    assert done["run"]["facets"]["loglake_run"]["runId"] == "lineage-1"
    assert done["run"]["facets"]["loglake_run"]["summary"]["records"] == wrote.records

    # The input: the topic, and exactly the plan's offset ranges per partition.
    [topic] = done["inputs"]
    assert (topic["namespace"], topic["name"]) == (f"kafka://{config.kafka.bootstrap_servers}", ds.topic)
    ranges = topic["inputFacets"]["loglake_offsetRanges"]["ranges"]
    assert ranges == [{"partition": r.partition, "start": r.start, "end": r.end} for r in plan.ranges if r.size]
    assert sum(r["end"] - r["start"] for r in ranges) == 240

    # The outputs: the batch and quarantine tables at the versions the run left them.
    outputs = {o["outputFacets"]["loglake_table"]["layer"]: o for o in done["outputs"]}
    assert set(outputs) == {"batch", "quarantine"}
    for layer, out in outputs.items():
        path = config.table_path(ds, layer)
        assert (out["namespace"], out["name"]) == ("file", path)
        assert out["outputFacets"]["loglake_table"]["table"] == getattr(ds.tables, layer)
    # The quality gate published afterwards: the batch run's COMPLETE names the version it wrote,
    # the gate's names the one after its publish (the live table's now).
    gate_done = events[3]
    gate_out = {o["outputFacets"]["loglake_table"]["layer"]: o for o in gate_done["outputs"]}
    assert gate_out["batch"]["facets"]["version"]["datasetVersion"] == str(snapshot(config.table_path(ds, "batch")).version)
    assert int(outputs["batch"]["facets"]["version"]["datasetVersion"]) <= int(
        gate_out["batch"]["facets"]["version"]["datasetVersion"])
    assert outputs["quarantine"]["facets"]["version"]["datasetVersion"] == str(
        snapshot(config.table_path(ds, "quarantine")).version)
    # The gate's input: the table it validated, with its result.
    [checked] = [i for i in gate_done["inputs"] if "dataQualityAssertions" in i["inputFacets"]]
    assert checked["name"] == config.table_path(ds, "batch")
    assert all(a["success"] for a in checked["inputFacets"]["dataQualityAssertions"]["assertions"])
    assert gate_done["run"]["facets"]["loglake_run"]["summary"]["published"] is True
