"""The platform's Prometheus exporter: ``loglake up`` runs it (``python -m loglake.local.metrics``).

It serves on ``metrics.host``:``metrics.port`` (``$LOGLAKE_METRICS_PORT``). Every
``metrics.sample_interval`` seconds it reads every process (``loglake.local.stack.processes``;
not with ``metrics.local_processes: false``, as in the compose stack's ``metrics`` service)
and every dataset's ``loglake.ops.snapshot.dataset`` — the same dictionaries ``loglake
status --json`` prints — keeps them for the scrapes (``loglake.observe.exporter`` turns them
into metrics: a scrape costs no Kafka or Delta read, however many datasets), and appends each
dataset's lag to its time series (``loglake.observe.series``: the loglake page's charts, the
serving freshness histogram). Events older than ``metrics.keep_hours`` are folded into the
counters every ten minutes. It takes nothing from outside: Airflow's StatsD goes to
statsd_exporter, a process and a registry of its own (``loglake.local.statsd_exporter``).
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from loglake.core.config import Config, load_config
from loglake.local.stack import EXPORTER, processes
from loglake.observe import series
from loglake.ops import snapshot
from loglake.observe.exporter import dataset_families, process_families, serve, threshold_families, unregister


class Sampler(Collector):
    """The latest sample of the platform, served to every scrape until the next one."""

    def __init__(self, config: Config):
        self.config = config
        self.latest: dict | None = None

    def sample(self) -> None:
        """Read every process and dataset; keep them; append each dataset's lag to its series."""
        t0 = time.monotonic()
        rows, kafka_up = [], True
        if self.config.profile.metrics.local_processes:
            rows, _cluster, kafka_up = processes(self.config)
        found, errors = snapshot.datasets(self.config, kafka_up)
        for name, d in found.items():
            parts = d["partitions"]
            lags = [p["lag_seconds"] for p in parts if p["lag_seconds"] is not None]
            speed = [p["speed_lag"] for p in parts if p["speed_lag"] is not None]
            sampled = series.record(self.config, name, "sample", speed_lag_records=sum(speed) if speed else None,
                                    speed_lag_seconds=max(lags) if lags else None,
                                    batch_lag_records=sum(p["batch_lag"] for p in parts))
            series.fold(d["totals"], sampled)  # the sample just appended belongs to the totals served
        self.latest = {"at": time.time(), "seconds": time.monotonic() - t0, "rows": rows, "found": found,
                       "errors": errors}

    def collect(self):
        latest = self.latest
        if latest is None:
            return
        yield from process_families(latest["rows"])
        readable = GaugeMetricFamily("loglake_dataset_readable", "1 when the dataset's state could be read at the "
                                     "last sample (its topic exists; Kafka and its tables answered).",
                                     labels=["dataset"])
        for name in self.config.datasets:
            readable.add_metric([name], 0.0 if name in latest["errors"] else 1.0)
        yield readable
        merged: dict[str, Metric] = {}
        for name, d in latest["found"].items():
            for fam in dataset_families(name, d):
                if fam.name in merged:
                    merged[fam.name].samples.extend(fam.samples)
                else:
                    merged[fam.name] = fam
        yield from merged.values()
        yield from threshold_families(self.config)
        yield GaugeMetricFamily("loglake_sample_timestamp_seconds", "When the state these metrics say was read.",
                                value=latest["at"])
        yield GaugeMetricFamily("loglake_sample_duration_seconds", "How long reading it took.",
                                value=latest["seconds"])


def main() -> int:
    config = load_config()
    m = config.profile.metrics
    sampler = Sampler(config)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(sampler)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    port = None
    last_compact = time.time()
    try:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                sampler.sample()
                if time.time() - last_compact > 600:
                    for name in config.datasets:
                        series.compact(config, name, m.keep_hours * 3600)
                    last_compact = time.time()
            except Exception as e:  # a sample lost is said; the exporter goes on
                print(f"loglake: metrics sample failed: {type(e).__name__}: {e}", flush=True)
            if port is None:  # served from the first sample on: a scrape never finds nothing
                port = serve(config, EXPORTER, registry, m.host, m.platform_port)
                print(f"loglake: metrics at http://{m.host}:{port}/metrics; sampling every {m.sample_interval:g}s",
                      flush=True)
            stop.wait(max(0.0, m.sample_interval - (time.monotonic() - t0)))
    finally:
        unregister(config, EXPORTER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
