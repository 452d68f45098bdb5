"""loglake's metrics and lineage as a monitoring system reads them (issue 27): a real Prometheus
(Debian's package) scraping the platform's exporter through the targets file loglake writes, its
values checked against ``loglake status --json``; the speed layer's and the batch jobs' counters
from what they wrote, per reason; an alert firing; the batch run's OpenLineage events (the
OpenLineage client's file transport) read back."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest

from loglake.core import paths
from loglake.core.processes import wait_for
from loglake.jobs.requests import BatchRequest, QualityRequest
from loglake.batch.planning import plan_batch
from loglake.tables import snapshot
from loglake.local.produce import produce
from loglake.local.stack import exporter_process, start_exporter
from loglake.testing import config_environment, run_loglake
from loglake.testing.prometheus import start_prometheus
from loglake.batch import job as batch
from loglake.jobs import entry
from loglake.quality import job as quality
from loglake.speed.stream import run_speed

pytestmark = pytest.mark.integration


def _by_labels(result, *keys):
    return {tuple(labels.get(k) for k in keys): value for labels, value in result}


ALERTS = paths.REPO_ROOT / "docker" / "prometheus" / "loglake-alerts.yml"


def test_a_scrape_says_what_status_json_says_an_alert_fires_when_the_stream_stops_and_lineage_is_emitted(
        spark, make_config, tmp_path):
    events_file = tmp_path / "lineage.jsonl"
    config = make_config(metrics={"sample_interval": 1, "alerts": {"speed_lag_seconds": 4}},
                         lineage={"transport": {"type": "file", "log_file_path": str(events_file), "append": True},
                                  "namespace": "loglake-test"})
    ds = config.dataset("job_views")
    produced = produce(config, ds, 400, bad_fraction=0.1, seed=271)
    run_speed(spark, config, ds, available_now=True)

    # The batch job and its quality gate as the shared application runs them (entry.execute),
    # in this test's Spark session: each records its event in the series.
    @contextmanager
    def session(_config, _name):
        yield spark, 0.0, True

    plan = plan_batch(config, ds)
    with config_environment(config):
        wrote = entry.execute(BatchRequest(ds.name, plan, run_id="metrics-1"), batch.run_job, session)
        gate = entry.execute(QualityRequest(ds.name, plan, run_id="metrics-1"), quality.run_job, session)
    assert gate.published and wrote.quarantined == produced.bad
    assert sum(wrote.quarantined_by_reason.values()) == wrote.quarantined
    lineage(config, ds, plan, wrote, events_file)

    pid, _new = start_exporter(config)
    prom = None
    try:
        prom = start_prometheus(tmp_path, config.home / "metrics" / "targets.json", [ALERTS])
        wait_for(lambda: any(t["health"] == "up" for t in prom.targets()), 60, "Prometheus to scrape the exporter",
                 log=exporter_process(config))
        # Nothing moves now: wait for a scrape after the exporter's first sample, then compare.
        wait_for(lambda: prom.query('loglake_serving_freshness_seconds_count{dataset="job_views"} > 0'), 60,
                 "a sample in the series")
        time.sleep(2)
        r = run_loglake(config, "status", "--json")
        assert r.stderr == "", r.stderr
        status = json.loads(r.stdout)
        at = time.time()
        d = status["datasets"]["job_views"]
        assert status["metrics"] and status["metrics"].endswith("/metrics")
        assert "metrics" in {p["name"] for p in status["processes"] if p["running"]}

        for metric, key in (("loglake_log_end_offset", "end"), ("loglake_log_start_offset", "earliest"),
                            ("loglake_speed_position_offset", "speed_position"), ("loglake_speed_lag_records",
                                                                                 "speed_lag"),
                            ("loglake_speed_lag_seconds", "lag_seconds"), ("loglake_batch_watermark_offset",
                                                                          "watermark"),
                            ("loglake_batch_lag_records", "batch_lag")):
            got = _by_labels(prom.query(f'{metric}{{dataset="job_views"}}'), "partition")
            assert got == {(str(p["partition"]),): p[key] for p in d["partitions"]}, (metric, got)
        # The oldest unprocessed offset's time to retention moves with the clock.
        remaining = _by_labels(prom.query('loglake_retention_remaining_seconds{dataset="job_views"}'), "partition")
        for p in d["partitions"]:
            if p["retention_seconds"] is not None:
                assert abs(remaining[(str(p["partition"]),)] - p["retention_seconds"]) < time.time() - at + 5

        t = d["totals"]
        records = _by_labels(prom.query('loglake_records_total{dataset="job_views"}'), "layer")
        assert records == {("speed",): t["records"]["speed"], ("batch",): t["records"]["batch"]}
        assert t["records"]["speed"] == t["records"]["batch"] == produced.good
        quarantined = _by_labels(prom.query('loglake_quarantined_records_total{dataset="job_views"}'), "layer",
                                 "reason")
        assert quarantined == {(layer, reason): n for layer in ("speed", "batch")
                               for reason, n in t["quarantined"][layer].items()}
        assert sum(t["quarantined"]["speed"].values()) == sum(t["quarantined"]["batch"].values()) == produced.bad
        assert t["quarantined"]["speed"] == t["quarantined"]["batch"]  # the same records, the same reasons
        micro = prom.query('loglake_micro_batch_duration_seconds_count{dataset="job_views"}')
        assert [v for _l, v in micro] == [t["micro_batch_seconds"]["count"]] and t["micro_batch_seconds"]["count"] >= 1
        runs = _by_labels(prom.query('loglake_job_runs_total{dataset="job_views"}'), "kind")
        assert runs == {("batch",): 1, ("quality",): 1}
        phases = _by_labels(prom.query('loglake_job_phase_seconds{dataset="job_views",kind="batch"}'), "phase")
        assert phases == {(k,): v for k, v in t["last_job"]["batch"]["phases"].items()} and phases
        published = prom.query('loglake_batch_last_publish_timestamp_seconds{dataset="job_views"}')
        assert [v for _l, v in published] == [t["last_publish"]]
        assert [v for _l, v in prom.query('loglake_quality_passed{dataset="job_views"}')] == [1.0]
        assert [v for _l, v in prom.query('loglake_writer_lease_held{dataset="job_views"}')] == [0.0]
        versions = _by_labels(prom.query('loglake_table_version{dataset="job_views"}'), "layer")
        assert versions == {(tb["layer"],): tb["version"] for tb in d["tables"] if tb["version"] is not None}
        up = _by_labels(prom.query("loglake_process_up"), "process")
        assert up == {(p["name"],): float(p["running"]) for p in status["processes"]}
        assert prom.query('loglake_alert_threshold{alert="speed_lag_seconds"}')[0][1] == 4.0

        # The shipped rules, as shipped: caught up, the speed layer is not behind. Then records
        # come while no stream runs (it stopped): its lag grows past the threshold and the alert fires.
        assert {r["name"] for r in prom.rules()} >= {"LoglakeSpeedLayerBehind", "LoglakeWatermarkStale",
                                                     "LoglakeQuarantineRateHigh", "LoglakeDataLossRecorded",
                                                     "LoglakeAuditFailed"}

        def behind():
            return [a for a in prom.alerts() if a["labels"]["alertname"] == "LoglakeSpeedLayerBehind"]

        assert behind() == []
        produce(config, ds, 50, seed=272)
        stopped = time.monotonic()
        # Pending is the rule's expression true on what was scraped; when it fires after its
        # `for:` is promtool's test (docker/prometheus/loglake-alerts.test.yml).
        active = wait_for(lambda: [a for a in behind() if a["state"] in ("pending", "firing")], 90,
                          "LoglakeSpeedLayerBehind to be pending")
        print(f"LoglakeSpeedLayerBehind {active[0]['state']} {time.monotonic() - stopped:.1f}s after the records came")
        assert [a["labels"]["dataset"] for a in active] == ["job_views"]
        assert float(active[0]["value"]) > 4
    finally:
        if prom is not None:
            prom.stop()
        exporter_process(config).stop()
    assert pid


def lineage(config, ds, plan, wrote, events_file) -> None:
    """The batch run's OpenLineage events: the input topic and the offset ranges per partition,
    the output tables and the versions they were left at, the quality gate's result."""
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("loglake.batch.job_views", "START"), ("loglake.batch.job_views", "COMPLETE"),
        ("loglake.quality.job_views", "START"), ("loglake.quality.job_views", "COMPLETE")]
    assert {e["job"]["namespace"] for e in events} == {"loglake-test"}
    start, done = events[0], events[1]
    assert start["run"]["runId"] == done["run"]["runId"] != events[2]["run"]["runId"]
    assert done["run"]["facets"]["loglake_run"]["runId"] == "metrics-1"
    assert done["run"]["facets"]["loglake_run"]["summary"]["records"] == wrote.records

    # The input: the topic, and exactly the plan's offset ranges per partition.
    [topic] = done["inputs"]
    assert (topic["namespace"], topic["name"]) == (f"kafka://{config.kafka.bootstrap_servers}", ds.topic)
    ranges = topic["inputFacets"]["loglake_offsetRanges"]["ranges"]
    assert ranges == [{"partition": r.partition, "start": r.start, "end": r.end} for r in plan.ranges if r.size]
    assert sum(r["end"] - r["start"] for r in ranges) == wrote.records + wrote.quarantined

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


def test_text_status_says_at_once_a_topic_is_missing_and_shows_the_counters(make_config, capsys, caplog):
    # The text `loglake status` reads its datasets as --json and the exporter do
    # (snapshot.datasets): a topic that does not exist yet is said, not retried for 15 s as a
    # transient Kafka error; and it prints the series' counters.
    import logging

    from loglake.local.stack import status
    from loglake.observe import series

    config = make_config()
    produce(config, config.dataset("job_views"), 30, seed=5, progress=False)  # company_ceos: no topic
    series.record(config, "job_views", "micro_batch", records=27, quarantined={"bad_json": 3}, seconds=0.5)
    series.record(config, "job_views", "job", job="batch", run_id="r1", ok=True, seconds=4.0, records=27,
                  quarantined={"bad_json": 3})
    series.record(config, "job_views", "job", job="quality", run_id="r1", ok=True, seconds=2.0, published=True,
                  published_records=27)
    with caplog.at_level(logging.INFO, logger="loglake.retry"):
        status(config)
    out = capsys.readouterr().out
    ceos = config.dataset("company_ceos")
    assert f"company_ceos ({ceos.topic}): topic {ceos.topic} does not exist yet" in out
    assert not [r for r in caplog.records if "company_ceos" in r.getMessage()]  # not retried
    assert ("  counted: speed 27 records + 3 quarantined (bad_json 3); batch 27 records + 3 quarantined "
            "(bad_json 3); 1 micro-batches; job runs: batch 1, quality 1; last publish ") in out
