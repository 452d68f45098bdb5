"""The whole platform on one machine: Kafka, every dataset's speed stream, Airflow.

``up`` starts what is not running (each part is idempotent), ``down`` stops everything
by process group, ``status`` shows every process and, per dataset and partition, the log
end offset, the speed layer's position and the batch watermark. Used by
``loglake up|down|status``.
"""

from __future__ import annotations

import argparse
import time

from loglake.config import Config
from loglake.errors import LoglakeError


def _airflow(config: Config, port: int | None = None, *, dags_paused: bool = True):
    from loglake.airflow_embedded import EmbeddedAirflow

    return EmbeddedAirflow(config, port, dags_paused=dags_paused)


def up(config: Config, airflow_port: int | None = None, timeout: float = 180.0) -> int:
    """Start Kafka (if embedded), create missing topics, start the speed streams and Airflow."""
    from loglake.airflow_embedded import ADMIN_USER, password_file
    from loglake.cli import cmd_speed, embedded_kafka
    from loglake.kafka_admin import ensure_topic, list_topics

    t0 = time.monotonic()
    if config.kafka.embedded:
        kafka = embedded_kafka(config)
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
    cmd_speed(config, argparse.Namespace(action="start", dataset=None, wait=0))

    # Unpaused: the scheduled batch DAG runs without anyone switching it on.
    airflow = _airflow(config, airflow_port, dags_paused=False)
    seconds = airflow.start(timeout)
    print(f"airflow: healthy after {seconds:.1f}s at {airflow.url} (logs {config.home / 'logs'}/airflow-*.log)")
    print(f"  log in as {ADMIN_USER} with password {airflow.password()} (kept in {password_file(airflow.home)})")
    print(f"loglake is up ({time.monotonic() - t0:.1f}s): `loglake status` shows it, `loglake down` stops it")
    return 0


def down(config: Config) -> int:
    """Stop Airflow (first, so no job starts), the speed streams, then the embedded broker."""
    from loglake.cli import cmd_speed, embedded_kafka

    stopped = _airflow(config).stop()
    print(f"airflow: stopped {', '.join(stopped)}" if stopped else "airflow: not running")
    cmd_speed(config, argparse.Namespace(action="stop", dataset=None))
    if config.kafka.embedded:
        kafka = embedded_kafka(config)
        running = kafka.is_running()
        kafka.stop()
        print("kafka: stopped" if running else "kafka: not running")
    return 0


def status(config: Config) -> int:
    """Every process, then per dataset and partition: end offset, speed position, batch watermark.

    Returns 0 when every process is running (and Airflow is healthy), 1 otherwise.
    """
    from confluent_kafka import KafkaException

    from loglake.cli import _speed_process, embedded_kafka

    ok = True
    print("processes:")
    kafka_up = True
    if config.kafka.embedded:
        kafka = embedded_kafka(config)
        pid = kafka.pid
        kafka_up = pid is not None
        ok &= kafka_up
        print(f"  kafka                  {_state(pid)}  {kafka.bootstrap}")
    else:
        print(f"  kafka                  external            {config.kafka.bootstrap_servers}")
    for ds in config.datasets.values():
        pid = _speed_process(config, ds).pid()
        ok &= pid is not None
        print(f"  {'speed-' + ds.name:<22} {_state(pid)}")
    airflow = _airflow(config)
    st = airflow.status()
    for c, info in st["components"].items():
        ok &= info["alive"]
        health = f"  {info['health']}" if info["health"] else ""
        print(f"  {'airflow-' + c:<22} {_state(info['pid'])}{health}")
    ok &= st["healthy"]
    print(f"  airflow UI             {st['url']} ({'healthy' if st['healthy'] else 'not answering or unhealthy'})")

    print("datasets (per partition: log end, speed position and lag, batch watermark):")
    for ds in config.datasets.values():
        if not kafka_up:
            print(f"{ds.name} ({ds.topic}): kafka is not running")
            continue
        try:
            print("\n".join(_dataset_lines(config, ds)))
        except (LoglakeError, KafkaException) as e:
            print(f"{ds.name} ({ds.topic}): {e}")
    return 0 if ok else 1


def _dataset_lines(config: Config, ds, timeout: float = 15.0) -> list[str]:
    """``format_status`` lines of ``ds``, retrying while the group coordinator is not ready.

    Right after a broker starts, reading committed offsets answers NOT_COORDINATOR (or
    "loading") for a few seconds: retriable, so retried, like commits are.
    """
    from confluent_kafka import KafkaException

    from loglake.kafka_admin import _RETRIABLE
    from loglake.status import dataset_status, format_status

    deadline = time.monotonic() + timeout
    while True:
        try:
            return format_status(ds, dataset_status(config, ds))
        except KafkaException as e:
            err = e.args[0]
            if getattr(err, "code", lambda: None)() not in _RETRIABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _state(pid: int | None) -> str:
    return f"running (pid {pid})".ljust(20) if pid else "stopped".ljust(20)

