"""The whole platform on one machine: Kafka, every dataset's speed stream, the shared Spark
application of the batch-side jobs, Airflow.

``up`` starts what is not running (each part is idempotent), ``down`` stops everything
by process group, ``status`` shows every process and, per dataset and partition, the log
end offset, the speed layer's position and the batch watermark. Used by
``loglake up|down|status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

from loglake.core.config import Config
from loglake.core.errors import ConfigError, ProcessError, SetupError
from loglake.core.processes import Managed, state_label
from loglake.jobs import shared_app
from loglake.jobs.launch import job_env, start_shared_application
from loglake.kafka.admin import ensure_topic, list_topics
from loglake.kafka.security import BrokerSecurity
from loglake.schema_versions import SchemaChangeError, check
from loglake.local import statsd_exporter
from loglake.local.airflow_env import ADMIN_USER, password_file
from loglake.local.airflow_standalone import EmbeddedAirflow
from loglake.local.broker import EmbeddedKafka
from loglake.local.cluster import LocalCluster
from loglake.local.apicurio import EmbeddedRegistry
from loglake.observe import exporter
from loglake.ops import snapshot
from loglake.ops.status import counted_text, format_status
from loglake.schemaregistry import status_line
from loglake.speed.control import forget, orphans, streams

EXPORTER = "metrics"  # the platform's Prometheus exporter (loglake.local.metrics)


def exporter_process(config: Config) -> Managed:
    return Managed(config.home, EXPORTER)


def start_exporter(config: Config) -> tuple[int, bool]:
    """Start the platform's exporter unless it runs: (pid, started now)."""
    proc = exporter_process(config)
    pid = proc.pid()
    if pid:
        return pid, False
    return proc.start([sys.executable, "-m", "loglake.local.metrics"], env=job_env(config, spark_submitted=False)), True


def statsd_wanted(config: Config) -> bool:
    """``up`` runs statsd_exporter for Airflow's metrics unless ``metrics.statsd_port`` is null."""
    return config.profile.metrics.statsd_port is not None


def broker(config: Config):
    """The embedded Kafka broker of ``config`` (its state directory and port; SASL/SCRAM over
    TLS when the profile has ``kafka.security``)."""

    security = None
    if config.kafka.security is not None:

        security = BrokerSecurity(config.home, config.kafka.security)
    return EmbeddedKafka(config.home, port=config.kafka.port, security=security)


def schema_registry(config: Config) -> EmbeddedRegistry | None:
    """The embedded schema registry of ``config`` (its state directory, ``registry.url``'s port),
    None when the profile names none or an external one."""
    settings = config.profile.registry
    if settings is None or not settings.embedded:
        return None
    return EmbeddedRegistry(config.home, port=settings.port)


def registry_wanted(config: Config) -> bool:
    """``up`` starts the embedded registry when a dataset reads a registry format, or when it runs
    already (started by ``loglake registry start``); not for JSON datasets alone, so a machine
    that never needs Apicurio never fetches it (``loglake.local.fetch``). An external or no
    registry: ``start_registry`` says which."""
    registry = schema_registry(config)
    return registry is None or registry.is_running() or any(ds.in_registry for ds in config.datasets.values())


def registry_state(config: Config, timeout: float = 5.0) -> str:
    """Whether the profile's registry answers its Confluent API with the profile's login and
    CA: ``answers``, ``not answering`` or ``refused: why``."""
    from loglake.schemaregistry import call, client

    try:
        call(config, "list of subjects", client(config).get_subjects, seconds=timeout)
        return "answers"
    except ConfigError as e:
        return f"refused: {e}"
    except Exception:
        return "not answering"


def registry_line(config: Config) -> str | None:
    """``registry: URL (state)`` for ``loglake status`` and ``loglake registry status``; None
    without a registry."""
    if config.profile.registry is None:
        return None
    embedded = schema_registry(config)
    if embedded is not None and not embedded.is_running():
        return f"{status_line(config)} (not running)"
    return f"{status_line(config)} ({registry_state(config)})"


def start_registry(config: Config) -> None:
    registry = schema_registry(config)
    if registry is None:
        if config.profile.registry is not None:
            print(f"registry: external {config.registry.url}")
        return
    was = registry.is_running()
    t0 = time.monotonic()
    registry.start()
    print(f"registry: {'already running' if was else f'started in {time.monotonic() - t0:.1f}s'} at "
          f"{config.registry.url} (state {registry.data_dir}, log {registry.log_path})")


def stop_registry(config: Config) -> None:
    registry = schema_registry(config)
    if registry is not None:
        print("registry: stopped" if registry.stop() else "registry: not running")


def start_streams(config: Config, name: str | None = None, wait: float = 0) -> None:
    """Start the speed stream of ``name`` (every dataset by default) unless it runs; print each.
    They all run in the speed application (one Spark application, ``loglake.speed.control``)."""
    started = streams(config, name)
    for s in started:
        pid, new = s.start()
        print(f"speed {s.ds.name}: {'started' if new else 'already running'} (the speed application, pid {pid}"
              f"{f', log {s.process.log_file}' if new else ''})")
    if wait:
        for s in started:
            s.wait_first_batch(wait)


def stop_streams(config: Config, name: str | None = None) -> None:
    """Stop the stream of ``name``, or every stream (also those of datasets since removed from
    conf/) and the speed application with them; print each."""
    if name is not None:
        for s in streams(config, name):
            print(f"speed {s.ds.name}: {'stopped' if s.stop() else 'not running'}")
        return
    ran = {s.ds.name: s.pid() is not None for s in streams(config)}
    gone = orphans(config)
    forget(config, [*ran, *gone])  # the application stops with its last stream
    for n, was in ran.items():
        print(f"speed {n}: {'stopped' if was else 'not running'}")
    for n in gone:
        print(f"speed {n}: stopped (its dataset is no longer in conf/)")


def _airflow(config: Config, port: int | None = None, *, dags_paused: bool = True):
    return EmbeddedAirflow(config, port, dags_paused=dags_paused)


def up(config: Config, airflow_port: int | None = None, timeout: float = 180.0) -> int:
    """Start Kafka (if embedded), create missing topics, start the speed streams, the shared
    Spark application and Airflow."""

    _here(config, "up")
    t0 = time.monotonic()
    if config.profile.local_cluster is not None:

        LocalCluster(config).up(timeout=timeout)
        for ds in config.datasets.values():
            ensure_topic(config, ds)
    elif config.kafka.embedded:
        kafka = broker(config)
        was = kafka.is_running()
        kafka.start()
        print(f"kafka: {'already running' if was else 'started'} at {kafka.bootstrap} "
              f"(log {config.home / 'logs' / 'kafka.log'})")
        for ds in config.datasets.values():
            ensure_topic(config, ds)
    else:
        print(f"kafka: external cluster {config.kafka.bootstrap_servers}")
        missing = [ds.topic for ds in config.datasets.values() if ds.topic not in list_topics(config)]
        if missing:
            print(f"  topics not created yet: {', '.join(missing)} (their speed streams wait for them)")
    # Before the streams: a registry-format dataset's stream reads it first. Without such a dataset
    # the embedded registry is not started (nor fetched): `loglake registry start` starts it.
    if registry_wanted(config):
        start_registry(config)
    else:
        print("registry: not started (no dataset reads a registry format; `loglake registry start` starts it)")
    start_streams(config)
    if config.profile.spark.shared_application:
        # Before Airflow: its scheduler runs a due run's first tasks even before Airflow reports
        # healthy, and a task that comes while the application starts waits for it
        # (loglake.jobs.shared_app.submit), whereas one that comes before it was started at all runs
        # under spark-submit: a second JVM starting beside it on the same cores.

        pid, new = start_shared_application(config)
        print(f"spark-jobs: {'started' if new else 'already running'} (pid {pid}; the shared Spark application "
              f"of the batch-side jobs, log {shared_app.process(config).log_file})")

    if exporter.serves(config):
        pid, new = start_exporter(config)
        print(f"metrics: {'started' if new else 'already running'} at {exporter.url(config)} (pid {pid}, log "
              f"{exporter_process(config).log_file}; Prometheus's file_sd_configs: "
              f"{config.home / 'metrics' / 'targets.json'})")

    building = statsd_exporter.build_then_start(config) if statsd_wanted(config) else None
    if building is not None:
        print(f"statsd: statsd_exporter is built from the Go module proxy once, in the background (log {building}); "
              "it takes Airflow's StatsD from when it starts")
    elif statsd_wanted(config):  # before Airflow: its processes are told where it listens
        try:
            pid, new = statsd_exporter.start(config)
        except (SetupError, ProcessError) as e:  # Airflow's metrics only: the platform comes up without them
            print(f"statsd: not started: {e}\n  Airflow's metrics are not served (`metrics.statsd_port: null` "
                  "turns them off)")
        else:
            host, port = statsd_exporter.address(config) or ("?", "?")
            print(f"statsd: {'started' if new else 'already running'}: Airflow's StatsD taken on udp://{host}:{port}, "
                  f"served at {statsd_exporter.url(config)} (pid {pid}, log "
                  f"{statsd_exporter.process(config).log_file})")

    # Unpaused: the scheduled batch DAG runs without anyone switching it on.
    airflow = _airflow(config, airflow_port, dags_paused=False)
    if airflow.status(timeout=2)["components"]["scheduler"]["alive"] and airflow.datasets_changed():
        print("airflow: restarting: the datasets in conf/ changed (the DAGs' forms list them)")
    seconds = airflow.start(timeout)
    print(f"airflow: healthy after {seconds:.1f}s at {airflow.url} (logs {config.home / 'logs'}/airflow-*.log)")
    print(f"  log in as {ADMIN_USER} with password {airflow.password()} (kept in {password_file(airflow.home)})")
    print(f"loglake is up ({time.monotonic() - t0:.1f}s): `loglake status` shows it, `loglake down` stops it")
    return 0


def down(config: Config) -> int:
    """Stop Airflow (first, so no job starts), the speed streams, then the embedded broker."""

    _here(config, "down")
    stopped = _airflow(config).stop()
    print(f"airflow: stopped {', '.join(stopped)}" if stopped else "airflow: not running")
    print(f"spark-jobs: {'stopped' if shared_app.stop(config) else 'not running'}")
    if exporter_process(config).stop():
        print("metrics: stopped")
    if statsd_exporter.stop(config):
        print("statsd: stopped")
    stop_streams(config)
    stop_registry(config)
    if config.profile.local_cluster is not None:

        LocalCluster(config).down()
    elif config.kafka.embedded:
        kafka = broker(config)
        running = kafka.is_running()
        kafka.stop()
        print("kafka: stopped" if running else "kafka: not running")
    return 0


@dataclass(frozen=True)
class ProcessState:
    """One process of the platform as ``loglake status`` shows it (and ``--json``, and the
    exporter's ``loglake_process_up``)."""

    name: str
    pid: int | None
    running: bool
    detail: str = ""          # printed after the state
    label: str | None = None  # printed instead of ``running (pid N)``/``stopped``
    cluster: bool = False     # the local cluster's: its own status lines say it in the text

    def line(self) -> str:
        return f"  {self.name:<24} {self.label or state_label(self.pid)}{'  ' + self.detail if self.detail else ''}"


def processes(config: Config) -> tuple[list[ProcessState], tuple[bool, list[str]] | None, bool]:
    """Every process of the platform, the local cluster's own status (ok, lines; None without
    one), and whether Kafka runs."""
    if config.profile.deployment.elsewhere:
        return deployment_services(config), None, True
    rows: list[ProcessState] = []
    cluster_lines = None
    kafka_up = True
    if config.profile.local_cluster is not None:
        cluster = LocalCluster(config)
        cluster_lines = cluster.status_lines()
        nodes = [(f"kafka-node-{n.node_id}", n.pid) for n in cluster.kafka_nodes()]
        kafka_up = any(pid for _name, pid in nodes)
        spark = [("spark-master", cluster.master().pid())] + [(f"spark-{w.name}", w.pid()) for w in cluster.workers()]
        rows += [ProcessState(name, pid, pid is not None, cluster=True) for name, pid in nodes + spark]
    elif config.kafka.embedded:
        pid = broker(config).pid
        kafka_up = pid is not None
        rows.append(ProcessState("kafka", pid, kafka_up, broker(config).bootstrap))
    else:
        rows.append(ProcessState("kafka", None, True, config.kafka.bootstrap_servers, label="external".ljust(18)))
    registry = schema_registry(config)
    if registry is not None and registry_wanted(config):  # JSON datasets alone: up does not start it
        pid = registry.pid()
        rows.append(ProcessState("registry", pid, pid is not None, config.registry.url))
    for stream in streams(config):
        pid = stream.pid()
        failed = None if pid else stream.failure()
        rows.append(ProcessState(f"speed-{stream.ds.name}", pid, pid is not None,
                                 f"by a permanent error (not restarted): {failed.error_type}: "
                                 f"{failed.error.splitlines()[0]}" if failed else ""))
    if config.profile.spark.shared_application:
        state = shared_app.state(config)
        rows.append(ProcessState("spark-jobs", shared_app.process(config).pid(), state.startswith("running"),
                                 label=state))
    if exporter.serves(config):
        pid = exporter_process(config).pid()
        rows.append(ProcessState("metrics", pid, pid is not None, exporter.url(config)))
    if statsd_wanted(config):
        pid = statsd_exporter.process(config).pid()
        rows.append(ProcessState(statsd_exporter.NAME, pid, pid is not None, statsd_exporter.url(config) or ""))
    st = _airflow(config).status()
    for c, info in st["components"].items():
        rows.append(ProcessState(f"airflow-{c}", info["pid"], info["alive"], info["health"] or ""))
    rows.append(ProcessState("airflow UI", None, st["healthy"], label=f"{st['url']} "
                             f"({'healthy' if st['healthy'] else 'not answering or unhealthy'})"))
    return rows, cluster_lines, kafka_up


def _here(config: Config, action: str) -> None:
    """``up`` and ``down`` act on this host's processes: refused where the profile's run elsewhere."""
    if config.profile.deployment.elsewhere:
        raise ConfigError(f"this profile's processes run in a deployment (deployment.services_command: "
                          f"{' '.join(config.profile.deployment.services_command)}): `loglake {action}` starts and "
                          "stops this host's own; use the deployment's (for the compose stack: python docker/stack.py "
                          f"{action})", key="deployment.services_command")


def deployment_services(config: Config) -> list[ProcessState]:
    """The deployment's services as its own command reports them (``deployment.services_command``:
    a JSON list of ``{"name", "running", "detail"}``, and ``state`` to say instead of running),
    each a ``ProcessState`` without a pid."""
    command = config.profile.deployment.services_command
    where = f"deployment.services_command ({' '.join(command)})"
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"{where} could not be run: {e}", key="deployment.services_command") from None
    if out.returncode != 0:
        said = (out.stderr.strip() or out.stdout.strip()).splitlines()
        raise ProcessError(f"{where} exited {out.returncode}" + (f": {said[-1]}" if said else ""))
    try:
        found = json.loads(out.stdout)
        rows = [ProcessState(str(s["name"]), None, bool(s["running"]), str(s.get("detail", "")),
                             label=str(s.get("state") or ("running" if s["running"] else "not running")).ljust(20))
                for s in found]
    except (ValueError, TypeError, KeyError) as e:
        raise ProcessError(f"{where} printed no JSON list of {{name, running, detail}} ({type(e).__name__}: {e}): "
                           f"{out.stdout[:200]!r}") from None
    return rows


def status(config: Config, as_json: bool = False) -> int:
    """Every process, then per dataset and partition: end offset, speed position, batch watermark
    (``as_json``: all of it as one JSON object, ``loglake.ops.snapshot``).

    Returns 0 when every process is running (and Airflow is healthy), 1 otherwise.
    """
    rows, cluster_lines, kafka_up = processes(config)
    ok = all(r.running for r in rows) and (cluster_lines is None or cluster_lines[0])
    if as_json:
        snap = snapshot.platform(config, rows, kafka_up)
        print(json.dumps(snap, indent=1, default=str))
        return 0 if ok and not snap["errors"] else 1
    print("processes:")
    if cluster_lines is not None:
        print("\n".join("  " + line.strip() for line in cluster_lines[1]))
    for r in rows:
        if not r.cluster:
            print(r.line())
    line = registry_line(config)
    if line is not None:
        print(line)
    if exporter.serves(config) and not config.profile.deployment.elsewhere:  # else: one of its services
        print(f"metrics: {exporter.url(config)}")

    print("datasets (per partition: log end, speed position and lag, batch watermark):")
    found, errors = snapshot.datasets(config, kafka_up, read=_dataset_lines)
    for ds in config.datasets.values():
        print("\n".join(found[ds.name]) if ds.name in found else f"{ds.name} ({ds.topic}): {errors[ds.name]}")
    # Loaded without the schema check (status must show everything): a refused change is said here.

    for ds in config.datasets.values():
        try:
            check(config, ds)
        except SchemaChangeError as e:
            print(f"loglake: error: {e}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


def _dataset_lines(config: Config, ds) -> list[str]:
    """``format_status`` lines of ``ds`` (read as ``--json`` reads it, ``snapshot.read``) and its
    counters."""
    st, totals = snapshot.read(config, ds)
    return format_status(ds, st) + [f"  counted: {counted_text(totals)}"]


