"""Airflow's own metrics: Prometheus's statsd_exporter, run by ``loglake up`` beside loglake's exporter.

Airflow sends StatsD over UDP (``[metrics] statsd_on``); statsd_exporter takes it on
``metrics.host``:``metrics.statsd_port`` and serves it on its own ``/metrics`` (its own
registry: nothing sent to it reaches loglake's exporter), on a free port of ``metrics.host``
listed as ``statsd`` in ``<state>/metrics/targets.json``, so one Prometheus sees both.
What it serves is decided by the mapping ``conf/statsd-mapping.yml``: Airflow's names, sent
with their variables as InfluxDB-style tags (``airflow_env`` sets
``statsd_influxdb_enabled`` and turns the legacy names off), become a few metric names with
labels (dag_id, task_id, state, ...); every other line is dropped.

statsd_exporter ``VERSION`` is built from the Go module proxy into the cache on first use
(``python -m loglake.local.statsd_exporter``; ``make setup-test`` builds it beforehand).
The compose stack runs the same binary with the same flags (docker/Dockerfile.statsd-exporter).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from loglake.core import paths
from loglake.core.config import Config
from loglake.core.errors import PortInUseError, ProcessError, SetupError
from loglake.core.processes import Managed, free_port
from loglake.local.gobuild import GoBinary
from loglake.observe import exporter

VERSION = "0.31.0"
# Its Makefile (promu) sets the version of github.com/prometheus/common/version, which
# `--version` and statsd_exporter_build_info say; its go.mod: go 1.25.
STATSD_EXPORTER = GoBinary("statsd_exporter", "github.com/prometheus/statsd_exporter", VERSION,
                           ldflags=(f"-X=github.com/prometheus/common/version.Version={VERSION}",),
                           purpose="turns Airflow's StatsD into Prometheus metrics")
NAME = "statsd"  # its process, log, and target (loglake_process) name
MAPPING = "statsd-mapping.yml"
# Airflow's lines carry InfluxDB-style tags only; no other tag syntax is read, and no TCP.
FLAGS = ("--statsd.listen-tcp=", "--statsd.parse-influxdb-tags", "--no-statsd.parse-dogstatsd-tags",
         "--no-statsd.parse-librato-tags", "--no-statsd.parse-signalfx-tags", "--log.level=warn")


def mapping_file(config: Config) -> Path:
    """The mapping of ``config``'s conf directory, else the repo's ``conf/statsd-mapping.yml``."""
    own = Path(config.conf_dir) / MAPPING
    return own if own.is_file() else paths.REPO_ROOT / "conf" / MAPPING


def command(binary: Path | str, mapping: Path | str, host: str, udp_port: int, web_port: int) -> list[str]:
    """statsd_exporter taking StatsD on ``host:udp_port`` (UDP), serving on ``host:web_port``."""
    return [str(binary), f"--statsd.mapping-config={mapping}", f"--statsd.listen-udp={host}:{udp_port}",
            f"--web.listen-address={host}:{web_port}", *FLAGS]


def process(config: Config) -> Managed:
    return Managed(config.home, NAME)


def address_file(config: Config) -> Path:
    return config.home / "metrics" / "statsd.json"


def address(config: Config) -> tuple[str, int] | None:
    """Where the running statsd_exporter takes StatsD (None: it is not running)."""
    try:
        entry = json.loads(address_file(config).read_text())
    except (OSError, ValueError):
        return None
    return (entry["host"], int(entry["port"])) if exporter.pid_alive(entry.get("pid")) else None


def statsd_address(config: Config) -> tuple[str, int] | None:
    """Where Airflow sends its StatsD: the running statsd_exporter, else the configured port
    (None: ``metrics.statsd_port`` is null, or 0 with none running)."""
    m = config.profile.metrics
    if m.statsd_port is None:
        return None
    running = address(config)
    if running is not None:
        return running
    return (m.host, m.statsd_port) if m.statsd_port else None


def url(config: Config) -> str | None:
    """Where the running statsd_exporter serves its metrics."""
    where = exporter.registered(config).get(NAME)
    return f"http://{where}/metrics" if where else None


def free_udp_port(host: str) -> int:
    """A UDP port free on ``host`` right now (racy, as ``free_port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _answers(web: str) -> bool:
    try:
        with urllib.request.urlopen(f"{web}/metrics", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _log_since(log: Path, offset: int, lines: int = 15) -> str:
    try:
        with log.open("rb") as f:
            f.seek(offset)
            return "\n".join(f.read().decode(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def build_then_start(config: Config) -> Path | None:
    """On first use with a fixed ``metrics.statsd_port`` (Airflow is told that port whether it
    runs yet or not): build statsd_exporter and start it in a process of its own, so ``up``
    does not wait a minute for Go; its log's path. None when it is built (``start`` it) or the
    port is chosen at start (0: built here, first)."""
    if STATSD_EXPORTER.is_current() or not config.profile.metrics.statsd_port:
        return None
    from loglake.jobs.launch import job_env  # the child loads this config, as the exporter does

    log = config.home / "logs" / f"{NAME}-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        subprocess.Popen([sys.executable, "-m", "loglake.local.statsd_exporter", "--start"], stdout=out,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=config.home,
                         env=job_env(config, spark_submitted=False), start_new_session=True)
    return log


def start(config: Config, timeout: float = 30.0, say=print, attempts: int = 3) -> tuple[int, bool]:
    """Start statsd_exporter unless it runs (built first if it never was): (pid, started now).
    A port taken before it bound it: again on a fresh one, unless ``metrics.statsd_port`` fixes
    the UDP port (then PortInUseError naming it)."""
    m = config.profile.metrics
    proc = process(config)
    pid = proc.pid()
    if pid:
        return pid, False
    binary = STATSD_EXPORTER.installed(say)
    mapping = mapping_file(config)
    for attempt in range(1, attempts + 1):
        udp = m.statsd_port or free_udp_port(m.host)
        web = free_port()
        offset = proc.log_file.stat().st_size if proc.log_file.exists() else 0
        pid = proc.start(command(binary, mapping, m.host, udp, web), cwd=config.home)
        local = "127.0.0.1" if m.host in ("0.0.0.0", "::", "") else m.host
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.pid() and not _answers(f"http://{local}:{web}"):
            time.sleep(0.1)
        if proc.pid():
            if _answers(f"http://{local}:{web}"):
                break
            proc.stop()
            raise ProcessError(f"statsd_exporter did not answer on http://{local}:{web}/metrics within "
                               f"{timeout:.0f}s; last lines of {proc.log_file}:\n{_log_since(proc.log_file, offset)}")
        said = _log_since(proc.log_file, offset)
        if "address already in use" in said:
            if "UDP" in said and m.statsd_port:
                raise PortInUseError(f"statsd_exporter: UDP port {m.host}:{udp} (metrics.statsd_port) is taken by "
                                     "another process; stop it or set another port (0: a free one)", udp)
            if attempt < attempts:
                continue
        raise ProcessError(f"statsd_exporter exited at start; last lines of {proc.log_file}:\n{said}")
    address_file(config).parent.mkdir(parents=True, exist_ok=True)
    address_file(config).write_text(json.dumps({"host": m.host, "port": udp, "pid": pid}))
    # Listening on every address: listed under this host's name (what a scraper reaches it by).
    exporter.register(config, NAME, socket.gethostname() if local != m.host else m.host, web, pid=pid)
    return pid, True


def stop(config: Config) -> bool:
    """Stop it and take it out of the targets; True if it was running."""
    stopped = process(config).stop()
    address_file(config).unlink(missing_ok=True)
    if (exporter.targets_dir(config) / f"{NAME}.json").exists():
        exporter.unregister(config, NAME)
    return stopped


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--start"]:  # build_then_start's process: build, then start for the loaded config
        from loglake.core.config import load_config

        try:
            pid, _new = start(load_config())
        except (SetupError, ProcessError) as e:
            print(f"statsd: not started: {e}", flush=True)
            return 1
        print(f"statsd: started (pid {pid}) at {url(load_config())}", flush=True)
        return 0
    return STATSD_EXPORTER.main(argv, prog="python -m loglake.local.statsd_exporter")


if __name__ == "__main__":
    sys.exit(main())
