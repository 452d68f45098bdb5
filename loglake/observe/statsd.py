"""Airflow's own metrics beside loglake's: a StatsD receiver in the platform's exporter.

Airflow sends StatsD over UDP (``[metrics] statsd_on``, its ``statsd`` client); the exporter
listens on ``metrics.statsd_port`` and serves what arrives as Prometheus metrics, so one
Prometheus scrape sees both (the role ``statsd_exporter`` plays elsewhere; it is not in
Debian, and this is a few dozen lines). A StatsD name becomes a metric name with every
character outside ``[a-zA-Z0-9_]`` made ``_`` (``airflow.dag_processing.total_parse_time`` →
``airflow_dag_processing_total_parse_time``); counters (``|c``) become ``…_total``, gauges
(``|g``, ``+n``/``-n`` relative) gauges, timers (``|ms``) summaries in seconds
(``…_seconds_count``, ``…_seconds_sum``). Sample rates (``|@0.1``) scale counters.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from loglake.core.config import Config
from loglake.observe.exporter import pid_alive

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


def address_file(config: Config) -> Path:
    return config.home / "metrics" / "statsd.json"


def address(config: Config) -> tuple[str, int] | None:
    """Where the running exporter takes StatsD (None: it does not, or it is not running)."""
    try:
        entry = json.loads(address_file(config).read_text())
    except (OSError, ValueError):
        return None
    return (entry["host"], int(entry["port"])) if pid_alive(entry.get("pid")) else None


def statsd_address(config: Config) -> tuple[str, int] | None:
    """Where Airflow sends its StatsD: the running exporter's receiver, else the configured
    port (None: ``metrics.statsd_port`` is null, or 0 with no exporter running)."""
    m = config.profile.metrics
    if m.statsd_port is None:
        return None
    running = address(config)
    if running is not None:
        return running
    return (m.host, m.statsd_port) if m.statsd_port else None


def metric_name(name: str) -> str:
    out = _UNSAFE.sub("_", name)
    return out if not out[:1].isdigit() else f"_{out}"


class StatsdReceiver(Collector):
    """Takes StatsD datagrams on a UDP port (a thread of its own) and serves them as metrics."""

    def __init__(self, host: str, port: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.timers: dict[str, list[float]] = {}  # name → [count, sum in seconds]
        self.received = 0
        self.thread = threading.Thread(target=self._receive, name="loglake-statsd", daemon=True)

    def start(self, config: Config) -> None:
        self.thread.start()
        target = address_file(config)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"host": self.host, "port": self.port, "pid": os.getpid()}))

    def _receive(self) -> None:
        while True:
            try:
                data = self.sock.recv(65535)
            except OSError:
                return
            for line in data.decode("utf-8", "replace").splitlines():
                self.take(line)

    def take(self, line: str) -> None:
        """One StatsD line, ``name:value|type[|@rate][|#tags]``; anything else is ignored."""
        name, sep, rest = line.partition(":")
        fields = rest.split("|")
        if not sep or len(fields) < 2:
            return
        try:
            raw, kind = fields[0], fields[1]
            value = float(raw)
            rate = next((float(f[1:]) for f in fields[2:] if f.startswith("@")), 1.0)
        except ValueError:
            return
        key = metric_name(name)
        with self.lock:
            self.received += 1
            if kind == "c":
                self.counters[key] = self.counters.get(key, 0.0) + value / (rate or 1.0)
            elif kind == "g":
                self.gauges[key] = self.gauges.get(key, 0.0) + value if raw[:1] in "+-" else value
            elif kind in ("ms", "h", "d"):
                t = self.timers.setdefault(key, [0, 0.0])
                t[0] += 1
                t[1] += value / 1000 if kind == "ms" else value

    def collect(self):
        with self.lock:
            counters, gauges = dict(self.counters), dict(self.gauges)
            timers = {k: list(v) for k, v in self.timers.items()}
            received = self.received
        for key, value in sorted(counters.items()):
            yield CounterMetricFamily(key, f"StatsD counter {key}", value=value)
        for key, value in sorted(gauges.items()):
            yield GaugeMetricFamily(key, f"StatsD gauge {key}", value=value)
        for key, (count, total) in sorted(timers.items()):
            yield SummaryMetricFamily(f"{key}_seconds", f"StatsD timer {key}", count_value=count, sum_value=total)
        yield CounterMetricFamily("loglake_statsd_lines_received", "StatsD lines the exporter took (Airflow's "
                                  "metrics).", value=received)
