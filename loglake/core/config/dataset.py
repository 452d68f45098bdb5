"""A dataset's file (``conf/datasets/<name>.yaml``): its topic, schema, tables, quality and
maintenance, and the transform its code holds."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field, field_validator, model_validator

from loglake.core.contracts import CDC, PROVENANCE
from loglake.core.errors import ConfigError, KeyedValueError
from loglake.core.regex import java_incompatibility
from loglake.core.config.base import (FieldType, Format, MIN_VACUUM_RETENTION_HOURS, _EXPECTATION, _IDENT, _IDENT_DOT,
                                      _Strict, _TABLE_NAME, _TRANSFORM_FILE, _TRANSFORM_REF)


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
    history: str | None = None  # changelog datasets with ``history: scd2``: default batch.<name>_history

    @field_validator("speed", "batch", "quarantine", "latest", "history")
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
    # The field the record key holds; a changelog with ``envelope: debezium`` may name several
    # (a primary key of several columns: the record key is a struct of them).
    key: str | list[str]
    # A changelog's record shape: ``plain`` (the value is the row, a null value deletes the key),
    # or ``debezium`` (Debezium's change event: before/after/op/source, the key a struct).
    envelope: Literal["plain", "debezium"] = "plain"
    # A changelog's history beside its latest state: ``scd2`` keeps every version of each key in
    # ``tables.history`` (SCD type 2: valid_from, valid_to, is_current).
    history: Literal["none", "scd2"] = "none"
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

    @model_validator(mode="before")
    @classmethod
    def _history_table(cls, data: Any) -> Any:
        """``history: scd2`` without ``tables.history``: the table is ``batch.<name>_history``."""
        if isinstance(data, dict) and data.get("history") == "scd2" and isinstance(data.get("tables"), dict) \
                and data["tables"].get("history") is None and isinstance(data.get("name"), str):
            return {**data, "tables": {**data["tables"], "history": f"batch.{_table_part(data['name'])}_history"}}
        return data

    @field_validator("key")
    @classmethod
    def _key_names(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list):
            if not v:
                raise ValueError("key must name at least one field")
            if len(set(v)) != len(v):
                raise ValueError(f"key names a field twice: {v}")
            return v[0] if len(v) == 1 else v
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
        for k in self.keys:
            if k not in self.schema_:
                raise KeyedValueError("key", f"key {k!r} is not a field of the schema ({', '.join(self.schema_)})")
        self._tables_fit_kind()
        if self.history == "scd2":
            taken = [f for f in ("valid_from", "valid_to", "is_current") if f in self.schema_]
            if taken:
                raise KeyedValueError("history", f"history: scd2 adds the columns valid_from, valid_to and is_current; "
                                      f"the schema has a field named {taken[0]!r}")
        columns = set(self.schema_) | set(PROVENANCE.names) | (set(CDC.names) if self.debezium else set())
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
        if self.kind != "changelog":
            for name, value, default in (("envelope", self.envelope, "plain"), ("history", self.history, "none")):
                if value != default:
                    raise KeyedValueError(name, f"{name}: {value} is for changelog datasets only (kind: changelog)")
        if self.debezium and self.format not in ("json", "avro"):
            raise KeyedValueError("envelope", f"envelope: debezium reads Debezium's JSON and Avro converters' "
                                  f"records (format: json or avro), not {self.format}")
        if len(self.keys) > 1 and self.envelope != "debezium":
            raise KeyedValueError("key", f"a key of several fields ({', '.join(self.keys)}) needs a record key that "
                                  "holds them all: envelope: debezium (its key is a struct); a plain changelog's "
                                  "record key is one field's value")
        if self.history == "none" and self.tables.history is not None:
            raise KeyedValueError("tables.history", "tables.history is for datasets with history: scd2")
        if self.kind == "changelog" and self.tables.latest is None:
            raise KeyedValueError("tables.latest", "a changelog dataset needs tables.latest (the latest state by key)")
        if self.kind == "events" and self.tables.latest is not None:
            raise KeyedValueError("tables.latest", "tables.latest is for changelog datasets only")
        return self

    @property
    def keys(self) -> list[str]:
        """The key's fields, in order (one for most datasets)."""
        return [self.key] if isinstance(self.key, str) else list(self.key)

    @property
    def debezium(self) -> bool:
        """The topic's records are Debezium change events (``envelope: debezium``)."""
        return self.envelope == "debezium"

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
        those of them it has, set when a job creates it: ``loglake.lake.delta_io.to_delta``): the
        provenance columns every range predicate, the serving view and maintenance filter on,
        the quarantine's layer, the key, and the Z-order columns (OPTIMIZE needs their
        statistics). Statistics of every column would make every write slower for columns no
        reader filters on."""
        cols = ["_topic", "_partition", "_offset", "_layer", *self.keys, *self.maintenance.zorder_by]
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


def _table_part(name: str) -> str:
    """A dataset's name as the part of a table name (``_TABLE_NAME``: no '-' or '.')."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if re.match(r"[A-Za-z_]", out) else f"_{out}"


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
