"""loglake's state as Prometheus metrics (docs/observability.md has the list), and where
Prometheus finds the processes that serve them.

``dataset_families`` turns one ``loglake.ops.snapshot.dataset`` dictionary (what
``loglake status --json`` prints) into metric families; the platform's exporter
(``loglake.local.metrics``, run by ``loglake up``) serves them with the processes' and the
alert thresholds' families at each scrape.

Every process that serves metrics lists itself in ``<state>/metrics/targets/`` and in
``<state>/metrics/targets.json``, a file Prometheus's ``file_sd_configs`` reads.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from loglake.core.config import Config
from loglake.observe import series


def serves(config: Config) -> bool:
    """Whether the platform runs an exporter (``metrics.port`` not null)."""
    return config.profile.metrics.platform_port is not None


def url(config: Config, name: str = "metrics") -> str:
    """Where process ``name`` serves its metrics: the address it listed (``register``), else
    the configured one."""
    entry = registered(config).get(name)
    if entry is not None:
        return f"http://{entry}/metrics"
    m = config.profile.metrics
    return f"http://{m.host}:{m.platform_port}/metrics"


# --- the metrics ------------------------------------------------------------------------


def _epoch(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels, unit="")


def _add_histogram(family: HistogramMetricFamily, values: list[str], h: dict) -> None:
    cumulative, running = [], 0
    for bound, n in zip(series.BUCKETS, h["buckets"]):
        running += n
        cumulative.append((repr(float(bound)), running))
    cumulative.append(("+Inf", h["count"]))
    family.add_metric(values, cumulative, h["sum"])


# Per dataset and partition: (metric, the field of PartitionStatus.to_dict(), help).
PARTITION_GAUGES = (
    ("loglake_log_start_offset", "earliest", "The partition's earliest retained offset."),
    ("loglake_log_end_offset", "end", "The partition's log end offset (the next offset Kafka writes)."),
    ("loglake_speed_position_offset", "speed_position", "The next offset the speed layer reads."),
    ("loglake_speed_lag_records", "speed_lag", "Offsets in the log the speed layer has not read."),
    ("loglake_speed_lag_seconds", "lag_seconds", "Age of the oldest record the speed layer has not read "
     "(0: caught up)."),
    ("loglake_batch_watermark_offset", "watermark", "The offset below which the batch layer is published."),
    ("loglake_batch_lag_records", "batch_lag", "Offsets in the log above the batch watermark."),
    ("loglake_batch_lag_seconds", "batch_lag_seconds", "Age of the oldest record the batch layer has not "
     "published (0: published to the log end)."),
    ("loglake_retention_remaining_seconds", "retention_seconds", "Seconds until retention may delete the oldest "
     "offset a layer has not processed (negative: overdue)."),
)


def dataset_families(name: str, d: dict) -> list[Metric]:
    """The metric families of one dataset's ``snapshot.dataset`` dictionary."""
    g = {}

    def gauge(metric: str, doc: str, labels: tuple[str, ...] = ("dataset", "partition")) -> GaugeMetricFamily:
        if metric not in g:
            g[metric] = GaugeMetricFamily(metric, doc, labels=list(labels))
        return g[metric]

    for p in d["partitions"]:
        at = [name, str(p["partition"])]
        for metric, key, doc in PARTITION_GAUGES:
            if p[key] is not None:  # absent: no speed position, no watermark, nothing deleted by age
                gauge(metric, doc).add_metric(at, p[key])
    lost: dict[int, int] = {}
    for r in d["lost"]:
        lost[r["partition"]] = lost.get(r["partition"], 0) + r["end"] - r["start"]
    lost_family = CounterMetricFamily("loglake_lost_offsets", "Offsets recorded as lost (loglake accept-loss).",
                                      labels=["dataset", "partition"])
    for p in d["partitions"]:
        lost_family.add_metric([name, str(p["partition"])], lost.get(p["partition"], 0))

    t = d["totals"]
    records = CounterMetricFamily("loglake_records", "Valid records a layer took in, each offset once: the speed "
                                  "layer's micro-batches, the batch layer's publishes (a range recomputed again "
                                  "adds none).", labels=["dataset", "layer"])
    quarantined = CounterMetricFamily("loglake_quarantined_records", "Records a layer's runs quarantined, by reason "
                                      "(the batch layer counts each run: a range recomputed twice counts twice).",
                                      labels=["dataset", "layer", "reason"])
    for layer in series.LAYERS:
        records.add_metric([name, layer], t["records"][layer])
        for reason, n in sorted(t["quarantined"][layer].items()):
            quarantined.add_metric([name, layer, reason], n)
    micro = _histogram("loglake_micro_batch_duration_seconds", "How long the speed layer's micro-batches took.",
                       ["dataset"])
    _add_histogram(micro, [name], t["micro_batch_seconds"])
    fresh = _histogram("loglake_serving_freshness_seconds", "The serving view's staleness at each sample: the age "
                       "of the oldest record it does not hold yet.", ["dataset"])
    _add_histogram(fresh, [name], t["freshness_seconds"])
    jobs = _histogram("loglake_job_duration_seconds", "How long the dataset's Spark jobs took.", ["dataset", "kind"])
    runs = CounterMetricFamily("loglake_job_runs", "Spark jobs run.", labels=["dataset", "kind"])
    failures = CounterMetricFamily("loglake_job_failures", "Spark jobs that failed.", labels=["dataset", "kind"])
    phases = GaugeMetricFamily("loglake_job_phase_seconds", "The last run's seconds per phase.",
                               labels=["dataset", "kind", "phase"])
    for job, j in sorted(t["jobs"].items()):
        _add_histogram(jobs, [name, job], j["seconds"])
        runs.add_metric([name, job], j["runs"])
        failures.add_metric([name, job], j["failed"])
        for phase, secs in sorted(((t["last_job"].get(job) or {}).get("phases") or {}).items()):
            phases.add_metric([name, job, phase], secs)
    others: list[Metric] = [lost_family, records, quarantined, micro, fresh, jobs, runs, failures, phases]

    one = ("dataset",)
    if t["last_publish"] is not None:
        gauge("loglake_batch_last_publish_timestamp_seconds", "When a batch run last published.", one).add_metric(
            [name], t["last_publish"])
    q, a = d["quality"], d["audit"]
    if q is not None:
        gauge("loglake_quality_passed", "1 when the last quality gate passed (no failed expectation).",
              one).add_metric([name], 0.0 if q["failed"] else 1.0)
        gauge("loglake_quality_timestamp_seconds", "When the last quality gate ran.", one).add_metric(
            [name], _epoch(q["validated_at"]))
    if a is not None:
        gauge("loglake_audit_passed", "1 when the last audit found every offset exactly once.", one).add_metric(
            [name], 1.0 if a["ok"] else 0.0)
        gauge("loglake_audit_timestamp_seconds", "When the last audit ran.", one).add_metric(
            [name], _epoch(a["audited_at"]))
        for what in ("missing", "duplicated", "unexpected"):
            gauge(f"loglake_audit_{what}_offsets", f"Offsets the last audit found {what}.", one).add_metric(
                [name], a[what])
    holder = d["writer"]
    gauge("loglake_writer_lease_held", "1 while a batch-side job holds the dataset's writer lease.", one).add_metric(
        [name], 0.0 if holder is None else 1.0)
    if holder is not None:
        # kind: what the lease was taken for (loglake.leases records it as ``operation``:
        # batch, quality, maintenance, accept-loss, …).
        gauge("loglake_writer_lease_holder", "The holder of the writer lease (value 1).",
              ("dataset", "kind", "run_id", "host")).add_metric(
            [name, str(holder.get("operation") or ""), str(holder.get("run_id") or ""), str(holder.get("host") or "")],
            1.0)
    for tbl in d["tables"]:
        if tbl["version"] is not None:
            gauge("loglake_table_version", "The Delta table's latest version.", ("dataset", "layer")).add_metric(
                [name, tbl["layer"]], tbl["version"])
    return [*g.values(), *others]


def threshold_families(config: Config) -> list[Metric]:
    a = config.profile.metrics.alerts
    f = GaugeMetricFamily("loglake_alert_threshold", "The alerting rules' thresholds (metrics.alerts in the "
                          "profile): the rules in docker/prometheus/ compare against these.", labels=["alert"])
    for alert, value in (("speed_lag_seconds", a.speed_lag_seconds),
                         ("watermark_stale_seconds", a.watermark_stale_minutes * 60),
                         ("quarantine_ratio", a.quarantine_ratio),
                         ("retention_margin_seconds", a.retention_margin_minutes * 60)):
        f.add_metric([alert], value)
    return [f]


def process_families(rows) -> list[Metric]:
    f = GaugeMetricFamily("loglake_process_up", "1 while the platform's process runs (loglake status).",
                          labels=["process"])
    for r in rows:
        f.add_metric([r.name], 1.0 if r.running else 0.0)
    return [f]


# --- targets: where Prometheus finds each process ---------------------------------------


def targets_dir(config: Config) -> Path:
    return config.home / "metrics" / "targets"


def register(config: Config, name: str, host: str, port: int, pid: int | None = None) -> None:
    """List ``name`` at ``host:port`` in ``targets.json`` (Prometheus's ``file_sd_configs``),
    while process ``pid`` (this one by default) runs."""
    d = targets_dir(config)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.json").write_text(json.dumps({"targets": [f"{host}:{port}"], "labels": {"loglake_process": name},
                                                "pid": pid or os.getpid()}))
    _write_targets(config)


def _live_entries(config: Config) -> dict[str, dict]:
    """The listed processes (name → entry) whose process still runs."""
    out = {}
    for f in sorted(targets_dir(config).glob("*.json")) if targets_dir(config).is_dir() else []:
        try:
            entry = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if pid_alive(entry.get("pid")):
            out[f.stem] = entry
    return out


def registered(config: Config) -> dict[str, str]:
    """Each listed process's ``host:port`` whose process still runs."""
    return {name: entry["targets"][0] for name, entry in _live_entries(config).items()}


def pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def unregister(config: Config, name: str) -> None:
    (targets_dir(config) / f"{name}.json").unlink(missing_ok=True)
    _write_targets(config)


def _write_targets(config: Config) -> None:
    groups = [{"targets": e["targets"], "labels": e["labels"]} for e in _live_entries(config).values()]
    out = config.home / "metrics" / "targets.json"
    tmp = out.with_name(f"targets.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(groups, indent=1))
    tmp.replace(out)


def serve(config: Config, name: str, registry: CollectorRegistry, host: str, port: int) -> int:
    """Serve ``registry`` on ``host:port`` (0: a free port) from a thread of this process; the
    port, listed as ``name`` in ``targets.json``."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound = server.server_address[1]
    # Listening on every address: listed under this host's name (what a scraper reaches it by).
    register(config, name, socket.gethostname() if host in ("0.0.0.0", "::", "") else host, bound)
    return bound


def serve_process(config: Config, name: str, port: int | None, collector) -> int | None:
    """Serve ``collector``'s metrics and this process's own (CPU, memory, open files) as
    ``name`` on ``port`` (0: a free one; None: not at all); the port bound, or None. Never
    raises: the process's work goes on without metrics (said on stderr)."""
    if port is None:
        return None
    from prometheus_client import ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    registry.register(collector)
    try:
        return serve(config, name, registry, config.profile.metrics.host, port)
    except OSError as e:
        import sys

        print(f"loglake: {name}: metrics not served on {config.profile.metrics.host}:{port}: {e}", file=sys.stderr,
              flush=True)
        return None
