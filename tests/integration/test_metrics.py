"""loglake's metrics as a monitoring system reads them (issue 27): a real Prometheus (Debian's
package) scraping the platform's exporter through the targets file loglake writes, its values
checked against ``loglake status --json``; the speed layer's and the batch jobs' counters from
what they wrote, per reason."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest

from loglake.core import paths
from loglake.core.processes import wait_for
from loglake.jobs.protocol import JobRequest
from loglake.ledger.planning import plan_batch
from loglake.local.produce import produce
from loglake.local.stack import exporter_process, start_exporter
from loglake.testing import config_environment, run_loglake
from loglake.testing.prometheus import start_prometheus
from spark_jobs import batch, entry, quality
from spark_jobs.streaming import run_speed

pytestmark = pytest.mark.integration


def _by_labels(result, *keys):
    return {tuple(labels.get(k) for k in keys): value for labels, value in result}


ALERTS = paths.REPO_ROOT / "docker" / "prometheus" / "loglake-alerts.yml"


def test_a_prometheus_scrape_says_what_loglake_status_json_says_and_an_alert_fires_when_the_stream_stops(
        spark, make_config, tmp_path):
    config = make_config(metrics={"sample_interval": 1, "alerts": {"speed_lag_seconds": 4}})
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
        wrote = entry.execute("batch", JobRequest("batch", ds.name, plan, "metrics-1").argv(), batch.run_job, session)
        gate = entry.execute("quality", JobRequest("quality", ds.name, plan, "metrics-1").argv(), quality.run_job,
                             session)
    assert gate.published and wrote.quarantined == produced.bad
    assert sum(wrote.quarantined_by_reason.values()) == wrote.quarantined

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
        firing = wait_for(lambda: [a for a in behind() if a["state"] == "firing"], 90,
                          "LoglakeSpeedLayerBehind to fire")
        print(f"LoglakeSpeedLayerBehind firing {time.monotonic() - stopped:.1f}s after the records came")
        assert [a["labels"]["dataset"] for a in firing] == ["job_views"]
        assert float(firing[0]["value"]) > 4
    finally:
        if prom is not None:
            prom.stop()
        exporter_process(config).stop()
    assert pid
