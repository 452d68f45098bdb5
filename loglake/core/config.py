"""One typed configuration, loaded from ``conf/`` and validated at load.

Layout::

    conf/loglake.yaml          profiles (local, cluster): kafka, lake, spark, speed
    conf/datasets/<name>.yaml  one dataset per file

Every error names the file and the key, says what was expected, and is raised at load:
nothing downstream re-checks. ``${ENV_VAR}`` in a value is replaced from the
environment, ``${file:/path}`` by the file's content (secrets: a file the process reads, as
Docker and Kubernetes mount them); an unset variable or an unreadable file is an error, never
an empty string.
Only the selected profile is expanded, so the cluster profile's variables need not be
set to run locally.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from loglake.core import objectstore, paths
from loglake.core.contracts import PROVENANCE, SystemTable
from loglake.core.errors import ConfigError, KeyedValueError, refusal_recorder
from loglake.core.regex import java_incompatibility

FieldType = Literal["string", "long", "double", "boolean", "timestamp"]
# How a topic's values are written: JSON checked against the dataset's ``schema:`` block, or
# a Schema Registry wire format (a magic byte, a 4-byte schema id, the payload) whose schema
# the registry holds (``loglake.schemaregistry``).
Format = Literal["json", "avro", "protobuf", "json-schema"]
REGISTRY_FORMATS = ("avro", "protobuf", "json-schema")
LAYERS = ("speed", "batch", "quarantine", "latest")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# ``${file:/run/secrets/kafka_password}``: the file's content (a secret the process reads where it
# runs, as Kafka's and Docker's secrets are given, rather than an environment variable every child inherits).
_FILE_REF = re.compile(r"\$\{file:([^}]+)\}")
_TRANSFORM_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function
_TRANSFORM_FILE = re.compile(r"^(?P<file>.+\.py):(?P<func>[A-Za-z_]\w*)$")  # /path/to/file.py:function
_TABLE_NAME = re.compile(r"^(speed|batch|quarantine)\.[A-Za-z_]\w*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENT_DOT = re.compile(r"^[A-Za-z0-9_.-]+$")
_EXPECTATION = re.compile(r"^expect_[a-z0-9_]+$")
MIN_VACUUM_RETENTION_HOURS = 168.0  # Delta's own default guard: 7 days
_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|s|minutes?|min)\s*$")
_SCRAM_USER = re.compile(r"^[A-Za-z0-9._@-]+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- datasets -------------------------------------------------------------------------


class FieldSpec(_Strict):
    """One field of a dataset's JSON value: its type and the domain of its values."""

    type: FieldType
    required: bool = True
    enum: list[str | int | float | bool] | None = None
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    description: str = ""

    @model_validator(mode="after")
    def _domain_fits_type(self) -> "FieldSpec":
        if (self.min is not None or self.max is not None) and self.type not in ("long", "double"):
            raise KeyedValueError("min", f"min/max apply to long and double fields, not {self.type}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise KeyedValueError("min", f"min ({self.min}) is greater than max ({self.max})")
        if self.pattern is not None:
            if self.type != "string":
                raise KeyedValueError("pattern", f"pattern applies to string fields, not {self.type}")
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise KeyedValueError("pattern", f"pattern {self.pattern!r} is not a valid regular expression: {e}") from e
            problem = java_incompatibility(self.pattern)
            if problem:
                raise KeyedValueError("pattern", f"pattern {self.pattern!r} would fail in Spark, which applies it "
                                                 f"with Java's regex engine: {problem}")
        if self.enum is not None:
            if not self.enum:
                raise KeyedValueError("enum", "enum must list at least one value")
            expected = {"string": str, "long": int, "double": (int, float), "boolean": bool, "timestamp": str}
            bad = [v for v in self.enum if not isinstance(v, expected[self.type]) or (
                self.type in ("long", "double") and isinstance(v, bool))]
            if bad:
                raise KeyedValueError("enum", f"enum values {bad!r} are not of the field's type {self.type}")
        return self


class Tables(_Strict):
    """Table names of a dataset, ``<layer>.<name>``; the layer picks the directory."""

    speed: str
    batch: str
    quarantine: str
    latest: str | None = None  # changelog datasets: latest state by key

    @field_validator("speed", "batch", "quarantine", "latest")
    @classmethod
    def _named(cls, v: str | None) -> str | None:
        if v is not None and not _TABLE_NAME.match(v):
            raise ValueError(f"{v!r} is not of the form <speed|batch|quarantine>.<name>")
        return v


def expectation_label(expectation: str, column: str | None) -> str:
    """``expect_x(column)``, or the bare name for a table-level expectation."""
    return f"{expectation}({column})" if column else expectation


class Expectation(_Strict):
    """One quality expectation: a Great Expectations 1.x expectation and how much it matters.

    ``expectation`` is the snake_case name (``expect_column_values_to_not_be_null``);
    ``kwargs`` are its arguments besides ``column``; ``severity: fail`` stops a batch range
    from being published, ``warn`` is recorded and shown.
    """

    expectation: str
    column: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    severity: Literal["warn", "fail"] = "fail"

    @field_validator("expectation")
    @classmethod
    def _gx_name(cls, v: str) -> str:
        if not _EXPECTATION.match(v):
            raise ValueError(f"{v!r} is not a Great Expectations expectation name "
                             "(snake_case, starting with expect_, e.g. expect_column_values_to_not_be_null)")
        return v

    @model_validator(mode="after")
    def _column_once(self) -> "Expectation":
        if "column" in self.kwargs:
            raise KeyedValueError("kwargs.column", "give the column as the expectation's column key, not in kwargs")
        return self

    @property
    def label(self) -> str:
        return expectation_label(self.expectation, self.column)


def check_vacuum_retention(hours: float, allow_short: bool) -> None:
    """VACUUM must keep at least a week of history unless a shorter one is asked for explicitly.

    Time travel, concurrent readers and the streaming checkpoint's view of old versions
    need the files VACUUM would delete; Delta guards 168 hours by default and so does loglake.
    """
    if hours < MIN_VACUUM_RETENTION_HOURS and not allow_short:
        raise KeyedValueError(
            "vacuum_retention_hours",
            f"a VACUUM retention of {hours:g} hours is below the {MIN_VACUUM_RETENTION_HOURS:g}-hour guard; "
            "time travel and readers of older versions would lose their files. Set "
            "allow_short_vacuum_retention: true beside it to lower it on purpose")


class Maintenance(_Strict):
    """How ``loglake_maintenance`` keeps a dataset's tables compact."""

    zorder_by: list[str] = Field(default_factory=list)
    expire_speed: bool = True           # delete speed rows below the batch watermark
    vacuum_retention_hours: float = Field(default=MIN_VACUUM_RETENTION_HOURS, ge=0)
    allow_short_vacuum_retention: bool = False

    @model_validator(mode="after")
    def _retention_guard(self) -> "Maintenance":
        check_vacuum_retention(self.vacuum_retention_hours, self.allow_short_vacuum_retention)
        return self


class RegistryField(FieldSpec):
    """A field of a registry-format dataset, read from the registry's schema: its ``type`` is
    the Spark SQL type of its column (``bigint``, ``decimal(10,2)``, ``array<string>``,
    ``struct<...>``), ``required`` false when it may be null or has a default."""

    type: str  # type: ignore[assignment]


class WriterSchema(_Strict):
    """One schema records of a registry-format topic may be written with."""

    id: int                 # the registry's id (what each record carries after the magic byte)
    version: int            # its version under the dataset's subject
    schema_str: str         # the schema itself (Avro JSON, .proto text, JSON Schema)
    # Why the table cannot hold records written with it (a field it drops or retypes); None: it can.
    refused: str | None = None


class RegistrySchemas(_Strict):
    """What the registry said of a dataset's subject when a writer resolved it
    (``loglake.schemaregistry.resolve``): the version the tables hold (the reader's schema)
    and every version records may carry, each decoded with its own schema and resolved to
    the reader's."""

    subject: str
    version: int            # the subject's version the tables' schema is
    id: int
    reader: str             # that version's schema
    writers: tuple[WriterSchema, ...]
    # The newest version when it was refused as the tables' schema (else None), and why.
    refused_version: int | None = None
    refused: str | None = None
    # A key in a registry format: its subject's versions (``refused``: a key loglake cannot read
    # as one value) and, for a record key, the name of its one field.
    key_writers: tuple[WriterSchema, ...] = ()
    key_field: str | None = None


class Dataset(_Strict):
    """A dataset: a topic, its key, the schema of its values, a transform and tables."""

    name: str
    kind: Literal["events", "changelog"] = "events"
    topic: str
    partitions: int = Field(ge=1, le=10_000)
    key: str
    # json: the schema below; a registry format: the schema comes from the registry's subject.
    format: Format = "json"
    subject: str | None = None  # default <topic>-value
    # The record key: text (as today), or a registry format whose subject (default <topic>-key)
    # holds a primitive or a record of one field; it is read as text for the key checks.
    key_format: Literal["string", "avro", "json-schema"] = "string"
    key_subject: str | None = None
    schema_: dict[str, FieldSpec] = Field(alias="schema", default_factory=dict)
    # Set by ``loglake.schemaregistry.resolve`` (never in a file): the subject's versions.
    registry: RegistrySchemas | None = None
    # The dataset's own Python code: a file whose ``transform`` (and ``sample``, the event
    # generator of ``loglake produce``) loglake uses; default ``<name>.py`` beside the dataset's file.
    code: str | None = None
    transform: str | None = None  # package.module:function or file.py:function; default: code's transform
    tables: Tables
    description: str = ""
    quality: list[Expectation] = Field(default_factory=list)
    maintenance: Maintenance = Field(default_factory=Maintenance)
    # A value longer than this is quarantined as ``oversized`` before it is parsed (Kafka's
    # own default limit for a message is about 1 MiB).
    max_value_bytes: int = Field(default=1_048_576, ge=1, le=2**31 - 1)

    @field_validator("transform")
    @classmethod
    def _transform_ref(cls, v: str | None) -> str | None:
        if v is None or _TRANSFORM_REF.match(v):
            return v
        found = _TRANSFORM_FILE.match(v)
        if not found:
            raise ValueError(f"{v!r} is not of the form package.module:function or file.py:function")
        if not Path(found["file"]).is_file():
            raise ValueError(f"{found['file']} does not exist")
        return v

    @field_validator("code")
    @classmethod
    def _code_file(cls, v: str | None) -> str | None:
        if v is not None and not (v.endswith(".py") and Path(v).is_file()):
            raise ValueError(f"{v} is not a Python file")
        return v

    @field_validator("schema_")
    @classmethod
    def _field_names(cls, v: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        for name in v:
            if not _IDENT.match(name) or name.startswith("_"):
                raise ValueError(f"field name {name!r} must be an identifier not starting with '_' "
                                 "(names starting with '_' are loglake's provenance columns)")
        return v

    @field_validator("name", "topic")
    @classmethod
    def _names(cls, v: str) -> str:
        if not _IDENT_DOT.match(v):
            raise ValueError(f"{v!r} must contain only letters, digits, '_', '-' and '.'")
        return v

    @model_validator(mode="after")
    def _key_and_tables(self) -> "Dataset":
        if self.format == "json" and not self.schema_:
            raise KeyedValueError("schema", "a json dataset needs a schema: block (field name -> type and rules); "
                                  "a topic in a Schema Registry format sets format: avro, protobuf or json-schema")
        if self.format != "json" and self.registry is None:
            if self.schema_:
                raise KeyedValueError("schema", f"a {self.format} dataset takes its schema from the registry (subject "
                                      f"{self.subject_name}): remove the schema: block")
            return self._tables_fit_kind()  # the fields are checked once the registry is read
        if self.format == "json" and self.subject is not None:
            raise KeyedValueError("subject", "subject: is for datasets in a registry format (format: avro, "
                                  "protobuf or json-schema)")
        if self.format == "json" and self.key_format != "string":
            raise KeyedValueError("key_format", "key_format: is for datasets in a registry format (format: avro, "
                                  "protobuf or json-schema)")
        if self.key not in self.schema_:
            raise KeyedValueError("key", f"key {self.key!r} is not a field of the schema ({', '.join(self.schema_)})")
        self._tables_fit_kind()
        columns = set(self.schema_) | set(PROVENANCE.names)
        for i, e in enumerate(self.quality):
            if e.column is not None and e.column not in columns:
                raise KeyedValueError(f"quality.{i}.column", f"column {e.column!r} is not a field of the schema "
                                                             f"or a provenance column ({', '.join(sorted(columns))})")
        for i, c in enumerate(self.maintenance.zorder_by):
            if c not in columns:
                raise KeyedValueError(f"maintenance.zorder_by.{i}", f"column {c!r} is not a field of the schema "
                                                                    f"or a provenance column")
        return self

    def _tables_fit_kind(self) -> "Dataset":
        if self.kind == "changelog" and self.tables.latest is None:
            raise KeyedValueError("tables.latest", "a changelog dataset needs tables.latest (the latest state by key)")
        if self.kind == "events" and self.tables.latest is not None:
            raise KeyedValueError("tables.latest", "tables.latest is for changelog datasets only")
        return self

    @property
    def subject_name(self) -> str:
        """The registry subject of the topic's values (registry formats)."""
        return self.subject or f"{self.topic}-value"

    @property
    def key_subject_name(self) -> str:
        """The registry subject of the topic's keys (a key in a registry format)."""
        return self.key_subject or f"{self.topic}-key"

    @property
    def in_registry(self) -> bool:
        """The topic's values are in a Schema Registry format (their schema is the registry's)."""
        return self.format != "json"

    @property
    def resolved(self) -> bool:
        """Its fields are known: a json dataset's always, a registry format's once read."""
        return not self.in_registry or self.registry is not None

    @property
    def fields(self) -> dict[str, FieldSpec]:
        if not self.resolved:
            raise ConfigError(f"dataset {self.name}: its fields come from the registry (subject "
                              f"{self.subject_name}); they are read when a job starts (loglake.schemaregistry.resolve)",
                              key=f"datasets.{self.name}.format")
        return self.schema_

    @property
    def stats_columns(self) -> list[str]:
        """The columns Delta keeps per-file statistics of in the dataset's tables (each table
        those of them it has, set when a job creates it: ``spark_jobs.delta_io.to_delta``): the
        provenance columns every range predicate, the serving view and maintenance filter on,
        the quarantine's layer, the key, and the Z-order columns (OPTIMIZE needs their
        statistics). Statistics of every column would make every write slower for columns no
        reader filters on."""
        cols = ["_topic", "_partition", "_offset", "_layer", self.key, *self.maintenance.zorder_by]
        return list(dict.fromkeys(cols))

    @property
    def consumer_group(self) -> str:
        """The Kafka consumer group the speed layer commits its position to."""
        return f"loglake-speed-{self.name}"

    def code_function(self, name: str) -> Callable | None:
        """The function ``name`` of the dataset's code file, if it has one."""
        if self.code is None:
            return None
        try:
            return getattr(_file_module(Path(self.code)), name, None)
        except (ImportError, OSError, SyntaxError) as e:
            raise ConfigError(f"cannot load {self.code}: {e}", key=f"datasets.{self.name}.code") from e

    def load_transform(self) -> Callable:
        """The transform function ``transform`` names (a module's or a file's), else the code
        file's ``transform``; without either, the rows pass as validated."""
        if self.transform is None:
            return self.code_function("transform") or _unchanged
        found = _TRANSFORM_FILE.match(self.transform)
        try:
            if found:
                return getattr(_file_module(Path(found["file"])), found["func"])
            module, _, func = self.transform.partition(":")
            return getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError, OSError, SyntaxError) as e:
            raise ConfigError(f"cannot load transform {self.transform!r}: {e}",
                              key=f"datasets.{self.name}.transform") from e


def _unchanged(df):
    return df


@functools.lru_cache(maxsize=None)
def _file_module_at(path: Path, mtime_ns: int):
    spec = importlib.util.spec_from_file_location(f"loglake_dataset_code.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _file_module(path: Path):
    """A dataset's code file as a module, loaded again only when the file changed."""
    return _file_module_at(path, path.stat().st_mtime_ns)


# --- profiles -------------------------------------------------------------------------


BROKER_USER = "loglake-broker"  # the embedded broker's own SCRAM user (loglake.kafka.security)
# What ``kafka.security`` sets in each client's settings: ``client`` and ``spark`` may not set them too.
_SECURITY_KEYS = {"client": ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                             "sasl.password", "ssl.ca.location"),
                  "spark": ("security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.type",
                            "ssl.truststore.location", "ssl.truststore.certificates")}


def jaas_quote(value: str) -> str:
    """``value`` as a quoted JAAS option value (Kafka's parser reads backslash escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def embedded_ca_file(home: Path) -> Path:
    """The CA certificate loglake generates for the embedded broker of state directory ``home``."""
    return Path(home) / "kafka" / "security" / "ca.pem"


class KafkaSecurity(_Strict):
    """SASL/SCRAM over TLS (listener SASL_SSL): who loglake's Kafka clients log in as, and
    the CA that signed the brokers' certificates.

    Both kinds of client take their settings from here — ``librdkafka`` for confluent-kafka,
    ``java`` for Spark's Kafka source — so the two cannot disagree. ``password`` is a
    ``SecretStr``: it shows as ``**********`` in any repr or log line.
    """

    protocol: Literal["SASL_SSL"] = "SASL_SSL"
    mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = "SCRAM-SHA-512"
    username: str
    password: SecretStr
    # null: the CA loglake generates for its embedded broker (<state>/kafka/security/ca.pem).
    ca_file: str | None = None

    @field_validator("username")
    @classmethod
    def _user(cls, v: str) -> str:
        if not _SCRAM_USER.match(v):
            raise ValueError(f"{v!r} is not a SCRAM user name (letters, digits, '.', '_', '@' and '-')")
        return v

    @field_validator("password")
    @classmethod
    def _not_empty(cls, v: SecretStr) -> SecretStr:
        if not v.get_secret_value():
            raise ValueError("the password is empty (no silent empty secrets: set the environment variable "
                             "this key references to the password)")
        return v

    def librdkafka(self, ca_file: str | None = None) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings; ``ca_file`` replaces a null ``ca_file``.

        librdkafka checks the broker's host name against its certificate by default
        (``ssl.endpoint.identification.algorithm=https``), as the Java client does."""
        return {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism,
                "sasl.username": self.username, "sasl.password": self.password.get_secret_value(),
                "ssl.ca.location": str(self.ca_file or ca_file)}

    def java(self, ca_file: str | None = None) -> dict[str, str]:
        """Java client settings (Spark's Kafka source takes them as ``kafka.<key>``)."""
        jaas = (f"org.apache.kafka.common.security.scram.ScramLoginModule required "
                f"username={jaas_quote(self.username)} password={jaas_quote(self.password.get_secret_value())};")
        return {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism, "sasl.jaas.config": jaas,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file or ca_file)}


class KafkaSettings(_Strict):
    bootstrap_servers: str = "localhost:9092"
    embedded: bool = True
    # How loglake's clients authenticate (SASL/SCRAM over TLS); null: plaintext, no login.
    security: KafkaSecurity | None = None
    # Extra librdkafka settings for confluent-kafka clients.
    client: dict[str, str] = Field(default_factory=dict)
    # Extra Java client settings for Spark's Kafka source (passed as kafka.<key>).
    spark: dict[str, str] = Field(default_factory=dict)
    # How loglake creates topics: replicas per partition, and how many must hold a record
    # before the (acks=all) producer sees it acknowledged.
    replication_factor: int = Field(default=1, ge=1)
    min_insync_replicas: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _security_in_one_place(self) -> "KafkaSettings":
        if self.security is None:
            return self
        for section, keys in _SECURITY_KEYS.items():
            for key in keys:
                if key in getattr(self, section):
                    raise KeyedValueError(f"{section}.{key}", f"{key} is set by kafka.security (for both kinds of "
                                                              f"client): remove it from kafka.{section}")
        if not self.embedded and self.security.ca_file is None:
            raise KeyedValueError("security.ca_file", "an external cluster needs the file of the CA that signed its "
                                                      "brokers' certificates (loglake generates a CA only for its "
                                                      "embedded broker)")
        if self.embedded and self.security.ca_file is not None:
            raise KeyedValueError("security.ca_file", "the embedded broker's certificate is signed by the CA loglake "
                                                      "generates under the state directory: leave ca_file null")
        if self.embedded and self.security.username == BROKER_USER:
            raise KeyedValueError("security.username", f"{BROKER_USER!r} is the embedded broker's own user: "
                                                       "choose another name")
        return self

    @model_validator(mode="after")
    def _isr_fits(self) -> "KafkaSettings":
        if self.min_insync_replicas is not None and self.min_insync_replicas > self.replication_factor:
            raise KeyedValueError("min_insync_replicas", f"min_insync_replicas ({self.min_insync_replicas}) "
                                  f"exceeds replication_factor ({self.replication_factor}): no write could succeed")
        return self

    @field_validator("bootstrap_servers")
    @classmethod
    def _hostports(cls, v: str) -> str:
        for hp in v.split(","):
            host, sep, port = hp.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"{hp!r} is not host:port (expected a comma-separated list of host:port)")
        return v

    @property
    def port(self) -> int:
        """Port of the first bootstrap server (the embedded broker listens there)."""
        return self.ports[0]

    @property
    def ports(self) -> list[int]:
        """The port of every bootstrap server (one per node of a local cluster)."""
        return [int(hp.rpartition(":")[2]) for hp in self.bootstrap_servers.split(",")]


class ObjectStoreSettings(_Strict):
    """The S3-compatible object store of an ``s3a://`` lake (docs/configuration.md,
    ``lake.object_store``; docs/deployment/docker.md).

    Every writer commits to it with conditional writes (``If-None-Match: *``): Spark through
    loglake's Delta log store, delta-rs by default, the dataset leases through loglake's own
    compare-and-swap (``loglake.ledger.leases``). The store must honour them: the suite checks
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
    # Where the dataset leases live (one writer per dataset, ``loglake.ledger.leases``). Default:
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
    ``url``'s port, its state under the state directory (``loglake.local.schema_registry``).
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


# --- the whole configuration ----------------------------------------------------------


class Config:
    """The loaded configuration: one profile and every dataset, plus derived paths."""

    def __init__(self, profile_name: str, profile: Profile, datasets: dict[str, Dataset],
                 home: Path, conf_dir: Path, env_refs: dict[str, str] | None = None):
        self.profile_name = profile_name
        self.profile = profile
        self.datasets = datasets
        self.home = home
        self.conf_dir = conf_dir
        # Profile key (``kafka.security.password``) → the environment variable its value came from.
        self.env_refs = env_refs or {}
        # delta-rs and the leases find an s3a:// lake's store by its bucket (loglake.core.objectstore).
        objectstore.register(self)

    @property
    def kafka(self) -> KafkaSettings:
        return self.profile.kafka

    @property
    def registry(self) -> RegistrySettings:
        """The profile's schema registry; an error naming the key when it has none."""
        if self.profile.registry is None:
            raise ConfigError(f"profile {self.profile_name!r} has no schema registry: set registry.url (or "
                              "registry.embedded: true), which datasets in avro, protobuf or json-schema need",
                              key=f"profiles.{self.profile_name}.registry")
        return self.profile.registry

    @property
    def lake_root(self) -> str:
        return self.profile.lake.root or str(self.home / "lake")

    @property
    def lock_root(self) -> str:
        """Where the dataset leases live (``lake.locks``, else beside the tables): a directory,
        or an ``s3a://`` location on the lake's object store."""
        return (self.profile.lake.locks or f"{self.lake_root.rstrip('/')}/_loglake_locks").removeprefix("file:")

    @property
    def object_store(self) -> ObjectStoreSettings | None:
        """The object store the lake, its checkpoints or its leases are on (None: all on filesystems)."""
        lake = self.profile.lake
        if lake.object_store is not None:
            return lake.object_store
        if any(objectstore.is_remote(u) for u in (lake.root, lake.checkpoints, lake.locks)):
            return ObjectStoreSettings()
        return None

    @property
    def checkpoint_root(self) -> str:
        return self.profile.lake.checkpoints or str(self.home / "checkpoints")

    def dataset(self, name: str) -> Dataset:
        try:
            return self.datasets[name]
        except KeyError:
            known = ", ".join(sorted(self.datasets)) or "none"
            raise ConfigError(f"unknown dataset {name!r}; known datasets: {known}", key="dataset") from None

    def table_path(self, dataset: Dataset | str, layer: str) -> str:
        """Location of a dataset's table for ``layer`` (speed, batch, quarantine, latest)."""
        ds = self.dataset(dataset) if isinstance(dataset, str) else dataset
        if layer not in LAYERS:
            raise ValueError(f"layer must be one of {LAYERS}, not {layer!r}")
        name = getattr(ds.tables, layer)
        if name is None:
            raise ConfigError(f"dataset {ds.name} has no {layer} table", key=f"datasets.{ds.name}.tables.{layer}")
        schema, _, table = name.partition(".")
        return f"{self.lake_root.rstrip('/')}/{schema}/{table}"

    def system_table_path(self, table: SystemTable) -> str:
        """Location of one of loglake's own tables (``loglake.core.contracts.LEDGER``, ...)."""
        return table.path(self.lake_root)

    def checkpoint_path(self, dataset: Dataset | str, job: str = "speed") -> str:
        ds = self.dataset(dataset) if isinstance(dataset, str) else dataset
        return f"{self.checkpoint_root.rstrip('/')}/{job}/{ds.name}"

    @property
    def kafka_ca_file(self) -> str | None:
        """The CA file loglake's Kafka clients trust: ``kafka.security.ca_file``, else (embedded
        broker) the one loglake generated under the state directory (``<state>/cluster/`` for the
        nodes of a local cluster, which share it); None without security."""
        sec = self.kafka.security
        if sec is None:
            return None
        return sec.ca_file or str(embedded_ca_file(self.broker_home))

    @property
    def broker_home(self) -> Path:
        """Where the embedded broker's security files live under (``<home>/kafka/security``):
        the state directory, or ``<state>/cluster`` for the local cluster's nodes."""
        return self.home / "cluster" if self.profile.local_cluster is not None else self.home

    def kafka_client_conf(self, **extra: Any) -> dict[str, Any]:
        """Settings for a confluent-kafka client: bootstrap, security, then ``extra``.

        librdkafka's log lines (retries, "Coordinator load in progress", ...) go to the
        ``loglake.kafka`` Python logger instead of stderr: the CLI keeps them in its log file.
        """
        sec = self.kafka.security
        security: dict[str, Any] = {}
        if sec is not None:
            # A refused login shows only as an error event: kept, so a failed call can name it.
            security = {**sec.librdkafka(self.kafka_ca_file),
                        "error_cb": refusal_recorder(self.kafka.bootstrap_servers)}
        return {"bootstrap.servers": self.kafka.bootstrap_servers, "logger": logging.getLogger("loglake.kafka"),
                **security, **self.kafka.client, **extra}

    def kafka_java_conf(self) -> dict[str, str]:
        """Java client settings for Spark's Kafka source (it takes each as ``kafka.<key>``):
        security, then ``kafka.spark``. Built in the job's driver from its own environment,
        so a password never travels on a command line."""
        sec = self.kafka.security
        return {**(sec.java(self.kafka_ca_file) if sec else {}), **self.kafka.spark}

    def kafka_credentials_hint(self) -> str:
        """Where the Kafka user and password of this profile come from (for error messages)."""
        sec = self.kafka.security
        if sec is None:
            return f"profile {self.profile_name!r} has no kafka.security"
        refs = [f"{k} from {v}" for k, v in ((k, self.env_refs.get(f"kafka.security.{k}")) for k in
                                              ("username", "password")) if v]
        return f"user {sec.username!r}, {sec.mechanism}, {', '.join([*refs, f'profile {self.profile_name}'])}"

    def replace(self, *, profile: Profile | None = None, datasets: dict[str, Dataset] | None = None,
                home: Path | None = None) -> "Config":
        return Config(self.profile_name, profile or self.profile, datasets or self.datasets,
                      home or self.home, self.conf_dir, self.env_refs)


def _expand_env(value: Any, file: str, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _expand_env(v, file, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise ConfigError(f"environment variable {name} is not set (referenced as ${{{name}}})",
                                  file=file, key=key)
            return os.environ[name]

        def read(m: re.Match) -> str:
            try:
                return Path(m.group(1)).read_text().rstrip("\r\n")
            except OSError as e:
                raise ConfigError(f"cannot read {m.group(1)} (referenced as ${{file:{m.group(1)}}}): "
                                  f"{e.strerror or e}", file=file, key=key) from None
        return _FILE_REF.sub(read, _ENV_REF.sub(sub, value))
    return value


# Profile keys that hold a secret: conf/ may only name the environment variable it comes from.
_SECRET_KEYS = ("kafka.security.password", "kafka.client.sasl.password", "kafka.spark.sasl.jaas.config",
                "registry.password")


def _env_refs(value: Any, key: str = "") -> dict[str, str]:
    """Dotted key → variable name, for each value that is exactly one ``${VAR}``."""
    if isinstance(value, dict):
        return {k2: v2 for k, v in value.items() for k2, v2 in _env_refs(v, f"{key}.{k}" if key else str(k)).items()}
    if isinstance(value, str):
        m = _ENV_REF.fullmatch(value.strip())
        return {key: m.group(1)} if m else {}
    return {}


def _check_secrets_referenced(raw: dict, file: str, prefix: str) -> None:
    """A secret written into conf/ is refused: it must come from the environment (``${VAR}``)."""
    for dotted in _SECRET_KEYS:
        value: Any = raw
        for part in dotted.split(".", 2):  # kafka, section, key (client keys have dots of their own)
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            continue
        if not isinstance(value, str) or not (_ENV_REF.search(value) or _FILE_REF.search(value)):
            example = "LOGLAKE_" + "_".join(p for p in dotted.split(".") if p != "security").upper()
            raise ConfigError(f"a secret is written into conf/: reference an environment variable or a file "
                              f"instead (e.g. ${{{example}}} or ${{file:/run/secrets/…}}); conf/ is committed, "
                              f"the environment and the secret files are not",
                              file=file, key=f"{prefix}.{dotted}")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", file=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping at the top level, found {type(data).__name__}", file=str(path))
    return data


def _raise_validation(e: ValidationError, file: str, prefix: str = "") -> None:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after",))
    loc = loc.replace("schema_", "schema")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, KeyedValueError):
        loc = ".".join(p for p in (loc, cause.key) if p)
    key = ".".join(p for p in (prefix, loc) if p)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check the spelling against docs/configuration.md)"
    elif err["type"] == "missing":
        msg = "required key is missing"
    elif err["type"] == "literal_error":
        msg = f"{msg}, found {err.get('input')!r}"
    elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
        msg = f"{msg}, found {err['input']!r}"
    more = f" (and {len(e.errors()) - 1} more problem(s) in this file)" if len(e.errors()) > 1 else ""
    raise ConfigError(msg + more, file=file, key=key) from None


def load_dataset(path: Path) -> Dataset:
    """Load and validate one dataset file; its name defaults to the file's stem."""
    data = _read_yaml(path)
    data.setdefault("name", path.stem)
    if data["name"] != path.stem:
        raise ConfigError(f"name {data['name']!r} differs from the file name {path.stem!r}",
                          file=str(path), key="name")
    data.setdefault("topic", data["name"])
    name = data["name"]
    if "registry" in data:
        raise ConfigError("registry is set by loglake from the schema registry, not in a file: remove it (the "
                          "registry itself is the profile's registry:, the subject the dataset's subject:)",
                          file=str(path), key="registry")
    if isinstance(data.get("code"), str):
        data["code"] = str((path.parent / data["code"]).resolve())
    elif "code" not in data and path.with_suffix(".py").is_file():  # the dataset's code beside its file
        data["code"] = str(path.with_suffix(".py").resolve())
    if isinstance(data.get("transform"), str) and _TRANSFORM_FILE.match(data["transform"]):
        file, _, func = data["transform"].rpartition(":")  # a file named relative to the dataset's
        data["transform"] = f"{(path.parent / file).resolve()}:{func}"
    tables = data.setdefault("tables", {})
    if isinstance(tables, dict):
        for layer in ("speed", "batch", "quarantine"):
            tables.setdefault(layer, f"{layer}.{name}")
        if data.get("kind") == "changelog":
            tables.setdefault("latest", f"speed.{name}_latest")
    try:
        return Dataset.model_validate(data)
    except ValidationError as e:
        _raise_validation(e, str(path))
        raise  # unreachable


# The login of the registry LOGLAKE_REGISTRY_URL names (the compose stack's): the user, the file
# holding its password (a secret file, never the password itself in the environment) and the CA
# of its certificate. Each given alone where the profile's own section has none.
_REGISTRY_LOGIN_ENV = {"LOGLAKE_REGISTRY_USERNAME": "username", "LOGLAKE_REGISTRY_PASSWORD_FILE": "password",
                       "LOGLAKE_REGISTRY_CA_FILE": "ca_file"}


def _registry_login_from_env(main: str) -> dict[str, str]:
    found = {}
    for var, key in _REGISTRY_LOGIN_ENV.items():
        value = os.environ.get(var)
        if not value:
            continue
        if key == "password":
            try:
                value = Path(value).read_text().strip()
            except OSError as e:
                raise ConfigError(f"environment variable {var} names {value!r}, which cannot be read ({e.strerror}): "
                                  "expected the file holding the registry password", file=main,
                                  key="registry.password") from None
            if not value:
                raise ConfigError(f"the registry password file {os.environ[var]!r} ({var}) is empty", file=main,
                                  key="registry.password")
        found[f"registry.{key}"] = value
    return found


def load_config(conf_dir: Path | str | None = None, profile: str | None = None,
                overrides: dict[str, Any] | None = None, home: Path | str | None = None) -> Config:
    """Load ``conf/`` and validate it.

    What the conf says is checked against what the lake holds by ``loglake.ledger.schemas.check_all``
    (a schema change the tables cannot take), which every entry point calls after this.

    ``profile`` defaults to ``$LOGLAKE_PROFILE``, then the file's ``default_profile``.
    ``overrides`` maps dotted profile keys to values (``{"kafka.bootstrap_servers": ...}``);
    ``$LOGLAKE_KAFKA_BOOTSTRAP`` overrides ``kafka.bootstrap_servers``.
    """
    conf = Path(conf_dir) if conf_dir else paths.conf_dir()
    main = conf / "loglake.yaml"
    data = _read_yaml(main)
    unknown = set(data) - {"default_profile", "profiles"}
    if unknown:
        raise ConfigError("unknown key (expected default_profile, profiles)", file=str(main),
                          key=sorted(unknown)[0])
    profiles = data.get("profiles") or {}
    if not isinstance(profiles, dict) or not profiles:
        raise ConfigError("expected a mapping of profile name to settings", file=str(main), key="profiles")
    name = profile or os.environ.get("LOGLAKE_PROFILE") or data.get("default_profile") or "local"
    if name not in profiles:
        raise ConfigError(f"unknown profile {name!r}; known profiles: {', '.join(profiles)}",
                          file=str(main), key="default_profile" if not profile else "profile")
    _check_secrets_referenced(profiles[name] or {}, str(main), f"profiles.{name}")
    env_refs = _env_refs(profiles[name] or {})
    for dotted in _SECRET_KEYS:
        var = env_refs.get(dotted)
        if var and os.environ.get(var) == "":
            raise ConfigError(f"environment variable {var} is empty (referenced as ${{{var}}}): set it to the "
                              "secret (an empty one is never assumed)", file=str(main), key=f"profiles.{name}.{dotted}")
    raw = _expand_env(profiles[name] or {}, str(main), f"profiles.{name}")
    merged = dict(overrides or {})
    if os.environ.get("LOGLAKE_KAFKA_BOOTSTRAP"):
        merged.setdefault("kafka.bootstrap_servers", os.environ["LOGLAKE_KAFKA_BOOTSTRAP"])
    if os.environ.get("LOGLAKE_REGISTRY_URL"):  # names the registry, in a profile with none too
        merged.setdefault("registry.url", os.environ["LOGLAKE_REGISTRY_URL"])
        merged.update(_registry_login_from_env(str(main)))
    else:
        stray = [var for var in _REGISTRY_LOGIN_ENV if os.environ.get(var)]
        if stray:  # a login for no registry: said, not ignored
            raise ConfigError(f"environment variable {stray[0]} is set but LOGLAKE_REGISTRY_URL is not: the login "
                              "variables go with the registry it names (set it, or unset them)", file=str(main),
                              key="registry")
    if os.environ.get("LOGLAKE_SERVICES_COMMAND"):
        try:
            words = shlex.split(os.environ["LOGLAKE_SERVICES_COMMAND"])
        except ValueError as e:
            raise ConfigError(f"environment variable LOGLAKE_SERVICES_COMMAND is not a command a shell would "
                              f"split ({e})", file=str(main), key="deployment.services_command") from None
        merged.setdefault("deployment.services_command", words)
    for dotted, value in merged.items():
        section, _, leaf = dotted.partition(".")  # "kafka.bootstrap_servers"
        if leaf:
            raw[section] = {**(raw.get(section) or {}), leaf: value}
        else:
            raw[section] = value
    try:
        prof = Profile.model_validate(raw)
    except ValidationError as e:
        _raise_validation(e, str(main), f"profiles.{name}")
        raise
    datasets: dict[str, Dataset] = {}
    topics: dict[str, str] = {}
    for path in sorted((conf / "datasets").glob("*.yaml")):
        ds = load_dataset(path)
        if ds.topic in topics:
            raise ConfigError(f"topic {ds.topic!r} is already used by dataset {topics[ds.topic]!r}",
                              file=str(path), key="topic")
        topics[ds.topic] = ds.name
        datasets[ds.name] = ds
    home_path = Path(home) if home else paths.state_home()
    return Config(name, prof, datasets, home_path, conf, env_refs)
