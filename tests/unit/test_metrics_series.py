"""The metrics' time series (loglake.observe.series): appends from many processes at once,
the fold of old events into the counters, and the exposition the exporter makes of it."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from loglake.core.config import load_config
from loglake.observe import exporter, series
from loglake.testing import write_conf
from loglake.testing.series_writers import micro_batches_from_processes


def _config(tmp_path):
    return load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")


def test_appends_from_many_processes_are_each_kept_whole(tmp_path):
    config = _config(tmp_path)
    micro_batches_from_processes(tmp_path, "job_views", processes=4, each=200, pad=300)
    evts = series.events(config, "job_views")
    assert len(evts) == 800 and len({e["batch"] for e in evts}) == 800
    t = series.totals(evts)
    assert t["records"]["speed"] == 2400 and t["quarantined"]["speed"] == {"bad_json": 800}
    assert t["micro_batches"] == 800 and t["micro_batch_seconds"]["buckets"][1] == 800  # 0.7 s: le 1.0


def test_compaction_folds_old_events_and_no_counter_goes_back(tmp_path):
    config = _config(tmp_path)
    for i, t in enumerate((1000.0, 2000.0, 3000.0, 4000.0)):
        series.record(config, "job_views", "micro_batch", at=t, records=10 + i, quarantined={"null_key": i},
                      seconds=float(i))
    series.record(config, "job_views", "job", at=1500.0, job="batch", run_id="r1", ok=True, seconds=40.0,
                  phases={"prepare": 2.0}, records=7, quarantined={"bad_json": 2}, published=True)
    series.record(config, "job_views", "sample", at=3500.0, speed_lag_seconds=12.5, speed_lag_records=4,
                  batch_lag_records=9)
    before = series.totals(series.events(config, "job_views"))
    assert series.compact(config, "job_views", keep_seconds=1000.0, now=4100.0) == 4  # t < 3100
    lines = series.path(config, "job_views").read_text().splitlines()
    assert len(lines) == 3  # the base, the 4000 micro-batch, the 3500 sample
    after = series.totals(series.events(config, "job_views"))
    assert after == before
    assert after["last_publish"] == 1500.0 and after["last_job"]["batch"]["run_id"] == "r1"
    # A second compaction folds the base again with the next events: still the same totals.
    series.record(config, "job_views", "micro_batch", at=5000.0, records=1, quarantined={}, seconds=0.1)
    series.compact(config, "job_views", keep_seconds=10.0, now=6000.0)
    again = series.totals(series.events(config, "job_views"))
    assert again["records"]["speed"] == before["records"]["speed"] + 1
    assert again["quarantined"] == before["quarantined"] and again["micro_batches"] == 5
    # Since a time: the base line always comes first (the counters), then the events since.
    assert [e["kind"] for e in series.events(config, "job_views", since=5500.0)] == ["base"]


class _Fixed(Collector):
    def __init__(self, families):
        self.families = families

    def collect(self):
        yield from self.families


def test_a_snapshot_becomes_the_metrics_with_its_values(tmp_path):
    import socket

    from loglake.leases import holders, writer

    config = _config(tmp_path)
    # The lease holder as production records it: a real writer lease, read back as status does.
    with writer(config, "job_views", "batch", "r9", export=False):
        held = holders(config, ["job_views"])["job_views"]
    totals = series.empty_totals()
    series.fold(totals, {"t": 10.0, "kind": "micro_batch", "records": 90, "quarantined": {"bad_json": 7, "null_key": 3},
                         "seconds": 1.5})
    series.fold(totals, {"t": 20.0, "kind": "job", "job": "batch", "ok": True, "seconds": 33.0, "records": 95,
                         "quarantined": {"bad_json": 5}, "phases": {"prepare": 3.0, "ledger": 1.0}})
    # The batch layer's records are counted when they publish (each offset once), not when written.
    series.fold(totals, {"t": 21.0, "kind": "job", "job": "quality", "ok": True, "seconds": 3.0, "published": True,
                         "published_records": 95})
    series.fold(totals, {"t": 22.0, "kind": "job", "job": "batch", "ok": True, "seconds": 30.0, "records": 95,
                         "quarantined": {"bad_json": 5}, "phases": {"prepare": 3.0}})  # a re-run of the range
    series.fold(totals, {"t": 23.0, "kind": "job", "job": "quality", "ok": True, "seconds": 3.0, "published": True,
                         "published_records": 0})
    from loglake.ops.status import PartitionStatus

    # The partitions in the shape status makes them (PartitionStatus.to_dict), not by hand.
    snap = {"partitions": [
        PartitionStatus(0, 0, 60, 50, 40, lag_seconds=7.5, oldest_unprocessed=40, batch_lag_seconds=12.5,
                        retention_seconds=3600.0).to_dict(),
        PartitionStatus(1, 5, 45, None, None, oldest_unprocessed=5, batch_lag_seconds=30.0).to_dict()],
        "lost": [{"partition": 1, "start": 0, "end": 5}],
        "quality": {"validated_at": "2026-11-28T10:00:00+00:00", "failed": []},
        "audit": {"audited_at": "2026-11-28T10:01:00+00:00", "ok": False, "missing": 2, "duplicated": 0,
                  "unexpected": 0},
        "writer": held,
        "tables": [{"layer": "speed", "version": 4}, {"layer": "batch", "version": None}],
        "totals": totals}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(exporter.dataset_families("job_views", snap)))
    text = generate_latest(registry).decode()
    got = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith("loglake_"), fam.name
        for s in fam.samples:
            got[(s.name, tuple(sorted(s.labels.items())))] = s.value

    def value(name, **labels):
        return got[(name, tuple(sorted({"dataset": "job_views", **labels}.items())))]

    assert value("loglake_log_end_offset", partition="0") == 60 and value("loglake_log_start_offset", partition="1") == 5
    assert value("loglake_speed_lag_records", partition="0") == 10 and value("loglake_speed_lag_seconds", partition="0") == 7.5
    assert ("loglake_speed_lag_records", (("dataset", "job_views"), ("partition", "1"))) not in got  # no position
    assert value("loglake_batch_watermark_offset", partition="0") == 40
    assert value("loglake_batch_lag_records", partition="1") == 40
    # Served before any publish (partition 1 has no watermark): the watermark alert reads it.
    assert value("loglake_batch_lag_seconds", partition="1") == 30.0
    assert value("loglake_batch_lag_seconds", partition="0") == 12.5
    assert value("loglake_retention_remaining_seconds", partition="0") == 3600
    assert value("loglake_lost_offsets_total", partition="1") == 5 and value("loglake_lost_offsets_total", partition="0") == 0
    assert value("loglake_records_total", layer="speed") == 90 and value("loglake_records_total", layer="batch") == 95
    assert value("loglake_quarantined_records_total", layer="speed", reason="bad_json") == 7
    assert value("loglake_quarantined_records_total", layer="batch", reason="bad_json") == 10  # each run's
    assert value("loglake_micro_batch_duration_seconds_bucket", le="1.0") == 0
    assert value("loglake_micro_batch_duration_seconds_bucket", le="2.0") == 1
    assert value("loglake_micro_batch_duration_seconds_count") == 1 and value("loglake_micro_batch_duration_seconds_sum") == 1.5
    assert value("loglake_job_duration_seconds_bucket", kind="batch", le="+Inf") == 2
    assert value("loglake_job_phase_seconds", kind="batch", phase="prepare") == 3.0
    assert value("loglake_batch_last_publish_timestamp_seconds") == 23.0
    assert value("loglake_quality_passed") == 1 and value("loglake_audit_passed") == 0
    assert value("loglake_audit_missing_offsets") == 2
    assert value("loglake_writer_lease_held") == 1
    assert value("loglake_writer_lease_holder", kind="batch", run_id="r9", host=socket.gethostname()) == 1
    assert value("loglake_table_version", layer="speed") == 4


def test_the_charts_draw_the_series_of_the_last_hours(tmp_path):
    import re

    from loglake.observe.charts import charts_html

    config = _config(tmp_path)
    now = 10_000_000.0
    series.record(config, "job_views", "micro_batch", at=now - 7 * 3600, records=999, seconds=9.0)  # too old
    for i in range(5):
        series.record(config, "job_views", "sample", at=now - 600 + i * 60, speed_lag_seconds=float(i),
                      speed_lag_records=i, batch_lag_records=100 + i)
        series.record(config, "job_views", "micro_batch", at=now - 590 + i * 60, records=10 * i,
                      quarantined={"bad_json": 1}, seconds=0.5 + i)
    html = charts_html(config, "job_views", hours=6, now=now)
    drawn = dict(re.findall(r'data-chart="([a-z_]+)" data-points="(\d+)"', html))
    assert drawn == {"speed_lag_seconds": "5", "batch_lag_records": "5", "records_per_minute": "4",
                     "micro_batch_seconds": "5"}  # the first minute's micro-batch wrote 0 valid records
    assert html.count("<svg") == 4 and "<script" not in html and "http://www.w3.org/2000/svg" in html
    values = re.findall(r'data-chart="micro_batch_seconds".*?</svg>', html)[0]
    assert re.findall(r'data-value="([0-9.]+)"', values) == ["0.5", "1.5", "2.5", "3.5", "4.5"]
    assert "nothing recorded" in charts_html(config, "company_ceos", hours=6, now=now)
