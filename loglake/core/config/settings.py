"""A profile's other sections (lake, object store, spark, local cluster, speed, metrics,
lineage, registry, deployment) and the profile itself."""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from loglake.core import objectstore
from loglake.core.errors import ConfigError, KeyedValueError
from loglake.core.config.base import _INTERVAL, _Strict
from loglake.core.config.kafka import KafkaSettings


class ObjectStoreSettings(_Strict):
    """The S3-compatible object store of an ``s3a://`` lake (docs/configuration.md,
    ``lake.object_store``; docs/deployment/docker.md).

    Every writer commits to it with conditional writes (``If-None-Match: *``): Spark through
    loglake's Delta log store, delta-rs by default, the dataset leases through loglake's own
    compare-and-swap (``loglake.leases``). The store must honour them: the suite checks
    versitygw, and AWS documents them for S3; check any other store (docs/limits.md)."""

    endpoint: str | None = None          # http(s)://host:port; None: AWS S3 in ``region``
    region: str = "us-east-1"
    # An AWS shared-credentials file ([default] aws_access_key_id, aws_secret_access_key) that
    # every process reads (drivers, executors, delta-rs, the leases); None: the AWS default chain.
    credentials_file: str | None = None
    path_style: bool = True              # http://endpoint/bucket/key (most S3-compatible stores)

    @field_validator("credentials_file")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"{v!r} is not an absolute path (every process reads it, executors from other "
                             "working directories)")
        return v

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+/?$", v):
            raise ValueError(f"{v!r} is not an endpoint (expected http://host:port or https://host:port)")
        return v.rstrip("/") if v else v


class LakeSettings(_Strict):
    root: str | None = None         # default: <state>/lake; a directory, or s3a://bucket/prefix
    checkpoints: str | None = None  # default: <state>/checkpoints; a directory, or s3a://…
    object_store: ObjectStoreSettings | None = None  # an s3a:// root's store (default: AWS S3, default chain)
    # Where the dataset leases live (one writer per dataset, ``loglake.leases``). Default:
    # beside the tables (<root>/_loglake_locks), on the object store for an s3a:// root (taken
    # there with conditional writes); a directory here keeps them on that filesystem (flock).
    locks: str | None = None

    @model_validator(mode="after")
    def _locks_and_store(self) -> "LakeSettings":
        if self.locks is not None and "://" in self.locks and not self.locks.startswith("file:") \
                and not objectstore.is_remote(self.locks):
            raise KeyedValueError("locks", f"{self.locks!r} is neither a directory nor an s3a:// location")
        for key in ("root", "checkpoints"):
            value = getattr(self, key)
            if value and value.startswith("s3://"):
                raise KeyedValueError(key, f"{value!r}: write s3a://{value[5:]} (Spark reaches S3 through S3A)")
        return self


class SparkSettings(_Strict):
    master: str = "local[2]"
    driver_memory: str = "2g"
    executor_memory: str | None = None  # a cluster's executors (default: Spark's, 1g)
    conf: dict[str, str] = Field(default_factory=dict)
    # `loglake up` runs one long-lived Spark application that the DAG tasks' and the CLI's
    # batch-side jobs share (loglake.jobs.shared_app); false: each job is a spark-submit of its own.
    shared_application: bool = True


_MEMORY = re.compile(r"^\d+[kmgt]$")


class LocalClusterSettings(_Strict):
    """What ``loglake cluster up`` runs on this machine: one KRaft node per bootstrap server
    of ``kafka.bootstrap_servers`` and a Spark standalone master at ``spark.master`` with
    ``spark_workers`` workers."""

    spark_workers: int = Field(default=2, ge=1)
    worker_cores: int = Field(default=1, ge=1)
    worker_memory: str = "1g"
    kafka_heap: str = "512m"

    @field_validator("worker_memory", "kafka_heap")
    @classmethod
    def _memory(cls, v: str) -> str:
        if not _MEMORY.match(v):
            raise ValueError(f"{v!r} is not a memory size such as '512m' or '2g'")
        return v


_SCALE = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def memory_bytes(size: str) -> int:
    """Bytes of a size in the form of ``_MEMORY`` ('64m': 67,108,864)."""
    return int(size[:-1]) * _SCALE[size[-1]]


class SpeedSettings(_Strict):
    """The speed stream's micro-batches: their interval, and the two bounds on a micro-batch
    when the stream is behind. Spark's Kafka source caps a micro-batch by offsets only
    (``maxOffsetsPerTrigger``); loglake sizes that cap at each stream start from
    ``max_bytes_per_trigger`` and the mean size of the topic's newest records
    (``loglake.speed.sizing``), never above ``max_offsets_per_trigger``."""

    trigger_interval: str = "5 seconds"
    max_offsets_per_trigger: int = Field(default=1_000_000, ge=1)
    max_bytes_per_trigger: str | None = "256m"

    @field_validator("max_bytes_per_trigger")
    @classmethod
    def _bytes(cls, v: str | None) -> str | None:
        if v is not None and not _MEMORY.match(v):
            raise ValueError(f"{v!r} is not a size such as '64m' or '1g' (or null: records only)")
        return v

    @property
    def max_bytes(self) -> int | None:
        return None if self.max_bytes_per_trigger is None else memory_bytes(self.max_bytes_per_trigger)

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if not _INTERVAL.match(v):
            raise ValueError(f"{v!r} is not an interval such as '5 seconds' or '500 milliseconds'")
        return v

    @property
    def trigger_seconds(self) -> float:
        n, unit = _INTERVAL.match(self.trigger_interval).groups()
        scale = 0.001 if unit.startswith("m") and unit not in ("min", "minute", "minutes") else (
            60 if unit.startswith("min") else 1)
        return float(n) * scale


class AlertSettings(_Strict):
    """The thresholds of the alerting rules shipped in docker/prometheus/ (docs/observability.md):
    exported as metrics (``loglake_alert_threshold``), so the rules read them, not a copy."""

    speed_lag_seconds: float = Field(default=600.0, gt=0)    # the oldest record the speed layer has not read
    watermark_stale_minutes: float = Field(default=180.0, gt=0)  # the oldest record batch has not published
    quarantine_ratio: float = Field(default=0.05, gt=0, le=1)   # quarantined ÷ all, over the last 15 minutes
    retention_margin_minutes: float = Field(default=60.0, gt=0)  # until retention may delete an unprocessed offset


class MetricsSettings(_Strict):
    """Prometheus metrics (docs/observability.md). ``port``: the platform's exporter's
    (``loglake up``; ``$LOGLAKE_METRICS_PORT`` overrides); ``speed_port`` and ``jobs_port``: the
    speed application's and the shared Spark application's own. Each: a port, 0 for a free one
    at each start, or null for none. Every process that serves lists its address in
    ``<state>/metrics/targets.json``, for Prometheus's ``file_sd_configs``. ``statsd_port``:
    the UDP port where statsd_exporter takes Airflow's StatsD metrics (``loglake up`` runs it,
    ``loglake.local.statsd_exporter``; it serves them on a port of its own, listed as ``statsd``
    in targets.json; 0: a free port; null: Airflow's metrics off).
    ``sample_interval``: seconds between the exporter's samples of every dataset's lag (the
    loglake page's charts); ``keep_hours``: how long the samples and events are kept apart (older
    ones are folded into the counters). ``local_processes``: the exporter reports the processes
    ``loglake up`` runs on its host (``loglake_process_up``); false where each process is a
    container of its own, which Prometheus scrapes or finds down (its ``up``)."""

    host: str = "127.0.0.1"
    port: int | None = Field(default=9464, ge=0, le=65535)
    speed_port: int | None = Field(default=0, ge=0, le=65535)
    jobs_port: int | None = Field(default=0, ge=0, le=65535)
    statsd_port: int | None = Field(default=9125, ge=0, le=65535)
    sample_interval: float = Field(default=30.0, ge=1)
    keep_hours: float = Field(default=24.0, gt=0)
    local_processes: bool = True
    alerts: AlertSettings = Field(default_factory=AlertSettings)

    @property
    def platform_port(self) -> int | None:
        env = os.environ.get("LOGLAKE_METRICS_PORT")
        if env is None:
            return self.port
        if not env.isdigit() or int(env) > 65535:
            raise ConfigError(f"LOGLAKE_METRICS_PORT must be a port number (0: a free one), found {env!r}",
                              key="LOGLAKE_METRICS_PORT")
        return int(env)


class LineageSettings(_Strict):
    """OpenLineage events of the batch-side jobs (docs/observability.md#lineage): ``transport``
    is the OpenLineage client's (``{type: file, log_file_path: PATH}``, ``{type: http, url:
    URL}``, ``{type: console}``), used by loglake's jobs and by Airflow's OpenLineage provider
    alike; ``namespace`` the jobs' namespace."""

    transport: dict[str, Any]
    namespace: str = "loglake"

    @field_validator("transport")
    @classmethod
    def _transport(cls, v: dict[str, Any]) -> dict[str, Any]:
        kind = v.get("type")
        need = {"file": "log_file_path", "http": "url", "console": None}
        if kind not in need:
            raise ValueError(f"transport.type must be one of file, http, console; found {kind!r}")
        if need[kind] and not v.get(need[kind]):
            raise ValueError(f"a {kind} transport needs {need[kind]}")
        return v


class RegistrySettings(_Strict):
    """The schema registry of the topics in a registry format (Confluent REST API).

    ``embedded``: ``loglake registry start`` (and ``loglake up``) runs one on this machine at
    ``url``'s port, its state under the state directory (``loglake.local.apicurio``).
    Otherwise ``url`` names the shop's registry, with basic auth and a CA if it needs them."""

    url: str = "http://localhost:8081/apis/ccompat/v7"
    embedded: bool = False
    username: str | None = None
    password: SecretStr | None = None
    ca_file: str | None = None      # the CA that signed an https registry's certificate
    # How long a call keeps retrying while the registry does not answer (a transient error).
    retry_seconds: float = Field(default=120.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/:]+(:\d+)?(/.*)?$", v):
            raise ValueError(f"{v!r} is not an http(s) URL such as http://registry:8081")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _credentials_in_pairs(self) -> "RegistrySettings":
        if (self.username is None) != (self.password is None):
            raise KeyedValueError("password" if self.password is None else "username",
                                  "basic auth needs both username and password")
        if self.embedded and (self.username or self.ca_file):
            raise KeyedValueError("embedded", "the embedded registry answers plain http without a login: drop "
                                  "username, password and ca_file, or set embedded: false")
        return self

    @property
    def port(self) -> int:
        m = re.match(r"^https?://[^/:]+:(\d+)", self.url)
        return int(m.group(1)) if m else (443 if self.url.startswith("https") else 80)

    def client_conf(self) -> dict[str, Any]:
        """confluent-kafka's ``SchemaRegistryClient`` settings."""
        conf: dict[str, Any] = {"url": self.url}
        if self.username is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password.get_secret_value()}"
        if self.ca_file is not None:
            conf["ssl.ca.location"] = self.ca_file
        return conf


class DeploymentSettings(_Strict):
    """Where the platform's processes run when not on this host (docs/deployment/docker.md).
    ``services_command``: a command (argv) that prints the deployment's services as a JSON list of
    ``{"name", "running", "detail"}``; ``loglake status`` reports them instead of this host's
    processes (``$LOGLAKE_SERVICES_COMMAND``, split as a shell would, sets it: ``python
    docker/stack.py env`` does, for the compose stack). Null: loglake's processes run here."""

    services_command: list[str] | None = None

    @field_validator("services_command")
    @classmethod
    def _not_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not all(isinstance(a, str) and a for a in v)):
            raise ValueError("expected a command as a list of words, e.g. [python, docker/stack.py, services, --json]")
        return v

    @property
    def elsewhere(self) -> bool:
        """Whether the platform's processes run in a deployment, not on this host."""
        return self.services_command is not None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|seconds?|m|min|minutes?|h|hours?|d|days?)?\s*$")
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class ErasureSettings(_Strict):
    """Erasure (``loglake erase``, docs/erasure.md): how long the table versions that still
    hold erased rows stay readable before a targeted purge deletes their files
    (``purge_after``: '24h', '30m', '0' for at once)."""

    purge_after: str = "24h"

    @field_validator("purge_after")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.match(str(v)):
            raise ValueError(f"{v!r} is not a duration such as '24h', '90m', '3600s', '7d' or '0'")
        return str(v)

    @property
    def purge_after_seconds(self) -> float:
        n, unit = _DURATION.match(self.purge_after).groups()
        return float(n) * _DURATION_SECONDS[(unit or "s")[0]]


class Profile(_Strict):
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # The schema registry of datasets in a registry format (null: the profile has none).
    registry: RegistrySettings | None = None
    lake: LakeSettings = Field(default_factory=LakeSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    speed: SpeedSettings = Field(default_factory=SpeedSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    # OpenLineage events of the jobs and of Airflow's tasks (null: none).
    lineage: LineageSettings | None = None
    # Only in a profile whose Kafka and Spark ``loglake cluster up`` runs (local-cluster); with
    # ``kafka.security`` its three nodes are secured as the embedded broker is.
    local_cluster: LocalClusterSettings | None = None
    deployment: DeploymentSettings = Field(default_factory=DeploymentSettings)
    erasure: ErasureSettings = Field(default_factory=ErasureSettings)
