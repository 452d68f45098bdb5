"""The schema of every table loglake writes, defined once for every writer and reader.

Spark writers build their DataFrames from ``Contract.ddl`` (a Spark DDL string), delta-rs
writers from ``Contract.arrow_schema()``, readers select ``Contract.names``. The
dataset tables (speed, batch, latest) hold what the dataset's transform makes of
``valid_rows(ds)``: the schema's typed fields, then the provenance columns; the
quarantine table is ``QUARANTINE`` for every dataset. loglake's own tables — the offsets
ledger, ``_quality_results``, ``_audit_results``, ``_maintenance_log`` — are
``SystemTable``s: a contract and a place under the lake root.

No Spark and no pyarrow at import: the CLI, Airflow's DAG parsing and the jobs share it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Column type names, as Spark DDL spells them; each maps to one Arrow type.
_ARROW = {"string": "string", "int": "int32", "bigint": "int64", "double": "float64", "boolean": "bool_",
          "timestamp": "timestamp", "binary": "binary"}
# A dataset field's declared type → its column type.
FIELD_TYPES = {"string": "string", "long": "bigint", "double": "double", "boolean": "boolean",
               "timestamp": "timestamp"}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # a key of _ARROW
    doc: str = ""


@dataclass(frozen=True)
class Contract:
    """An ordered list of typed columns."""

    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def ddl(self) -> str:
        """Spark DDL: ``dataset string, `partition` int, ...``."""
        return ", ".join(f"`{c.name}` {c.type}" for c in self.columns)

    def arrow_schema(self):
        """The same columns as a pyarrow schema (timestamps in microseconds, UTC)."""
        import pyarrow as pa

        def arrow(t: str):
            return pa.timestamp("us", tz="UTC") if t == "timestamp" else getattr(pa, _ARROW[t])()

        return pa.schema([(c.name, arrow(c.type)) for c in self.columns])

    def select_sql(self) -> str:
        """The column list for a SQL SELECT over a table of this contract (quoted)."""
        return ", ".join(f'"{c}"' for c in self.names)

    def __add__(self, other: "Contract") -> "Contract":
        return Contract(self.columns + other.columns)


def contract(*columns: tuple[str, str] | tuple[str, str, str]) -> Contract:
    return Contract(tuple(Column(*c) for c in columns))


# --- the dataset tables -----------------------------------------------------------------

# Where every row of every table came from: Kafka's own coordinates of its record.
PROVENANCE = contract(
    ("_topic", "string", "the record's topic"),
    ("_partition", "int", "its partition"),
    ("_offset", "bigint", "its offset"),
    ("_kafka_timestamp", "timestamp", "its Kafka timestamp"),
)
# A changelog's change rows carry the tombstone flag; its latest-state table drops it.
DELETED = contract(("_deleted", "boolean", "the record is a tombstone (null value): the key is deleted"))

# A Debezium change event's own provenance (``envelope: debezium``): what the database did and
# where in its log.
CDC = contract(
    ("_op", "string", "c (insert), u (update), d (delete; a tombstone reads d too), r (a snapshot read)"),
    ("_source_time", "timestamp", "when the database made the change (source.ts_ms, else the event's ts_ms)"),
    ("_source_position", "string", "the event's source block as JSON: connector, database, table and its "
                                   "log position (lsn, binlog file and pos, ...)"),
)

# One table per dataset shared by both layers, told apart by ``_layer``.
QUARANTINE = PROVENANCE + contract(
    ("_layer", "string", "speed | batch: the layer that quarantined the record"),
    ("key", "binary", "the record's key bytes"),
    ("value", "binary", "the record's value bytes"),
    ("reason_code", "string", "bad_json, missing_field, wrong_type, ... (docs/configuration.md: Quarantine reasons)"),
    ("reason", "string", "what was wrong, in words"),
)
LAYERS = ("speed", "batch")  # values of QUARANTINE's _layer


def valid_rows(ds) -> Contract:
    """What a dataset's transform receives, in both layers: its typed fields (in schema
    order), ``_deleted`` for a changelog, then the provenance columns (a Debezium topic's
    ``CDC`` columns after Kafka's)."""
    fields = contract(*((name, FIELD_TYPES.get(spec.type, spec.type)) for name, spec in ds.fields.items()))
    return (fields + (DELETED if ds.kind == "changelog" else contract()) + PROVENANCE
            + (CDC if getattr(ds, "envelope", "plain") == "debezium" else contract()))


# --- loglake's own tables ---------------------------------------------------------------


@dataclass(frozen=True)
class SystemTable:
    """One of loglake's own Delta tables: where it lives under the lake root, and its columns."""

    name: str
    relative_path: str
    contract: Contract

    def path(self, lake_root: str) -> str:
        return f"{lake_root.rstrip('/')}/{self.relative_path}"


# One row per range and state. The batch job appends a range as ``written`` after its rows
# are committed; the quality gate appends it again as ``published``: only published ranges
# move the batch watermark W_p.
LEDGER = SystemTable("offsets ledger", "_ledger/offsets", contract(
    ("dataset", "string"), ("topic", "string"), ("partition", "int"), ("start", "bigint"), ("end", "bigint"),
    ("records", "bigint"), ("quarantined", "bigint"), ("run_id", "string"),
    ("state", "string", "written | published | compacted | lost | erased"), ("committed_at", "timestamp"),
    ("batch_version", "bigint", "published/compacted/erased: the batch table's version that readers serve"),
    ("quarantine_version", "bigint", "published/compacted/erased: the quarantine table's version of the batch layer"),
    ("reason", "string", "lost: why the operator accepted the loss"),
    ("recorded_by", "string", "lost: who accepted it (user@host)"),
    ("schema_version", "bigint", "written/published: the dataset's schema version the range was validated under"),
    ("fresh_from", "bigint", "written/published: from here to the range's end no range was published when the "
                             "run planned (null: a gap below a published span)"),
    ("fresh_records", "bigint", "written/published: the valid records of [fresh_from, end)"),
))

# One row per form of a dataset's schema that loglake ran with (``loglake.schema_versions``).
SCHEMAS = SystemTable("_schemas", "_ledger/schemas", contract(
    ("dataset", "string"), ("version", "bigint"), ("fingerprint", "string"),
    ("fields", "string", "JSON: kind, key and each field's type, required and rules"),
    ("change", "string", "what changed from the version before"), ("recorded_at", "timestamp"),
    ("recorded_by", "string", "user@host of the writer that recorded it"),
))

# One row per expectation per validation run (spark_jobs/quality.py).
QUALITY_RESULTS = SystemTable("_quality_results", "_quality_results", contract(
    ("dataset", "string"), ("topic", "string"),
    ("ranges", "string", "JSON list of {partition, start, end}"), ("run_id", "string"),
    ("expectation", "string"), ("column", "string"), ("severity", "string", "warn | fail"),
    ("success", "boolean"), ("element_count", "bigint"), ("unexpected_count", "bigint"),
    ("observed", "string", "JSON of Great Expectations' result"),
    ("sample_offsets", "string", "P:OFFSET, ..."),
    ("published", "boolean", "the run's verdict: no fail expectation failed"), ("validated_at", "timestamp"),
))

# One row per partition, layer and point (served, newest) per audit (loglake/ops/audit.py, delta-rs).
AUDIT_RESULTS = SystemTable("_audit_results", "_audit_results", contract(
    ("dataset", "string"), ("topic", "string"), ("partition", "int"), ("layer", "string", "batch | speed"),
    ("checked_from", "bigint"), ("checked_to", "bigint", "the offsets [from, to) checked"),
    ("offsets_checked", "bigint", "offsets the log holds there"), ("missing", "bigint"),
    ("duplicated", "bigint"), ("unexpected", "bigint", "table offsets the log does not hold"),
    ("sample_missing", "string"), ("sample_duplicated", "string"), ("sample_unexpected", "string"),
    ("ok", "boolean"), ("run_id", "string"), ("audited_at", "timestamp"),
    ("point", "string", "served | newest: the versions readers are served, or the tables' newest"),
    ("table_version", "bigint", "the version of the layer's table checked"),
    ("quarantine_version", "bigint", "the version of the quarantine table checked with it"),
    ("erased", "bigint", "offsets an erasure erased (loglake erase): accounted for, in no table"),
))

# One row per table and operation (spark_jobs/maintenance.py).
MAINTENANCE_LOG = SystemTable("_maintenance_log", "_maintenance_log", contract(
    ("dataset", "string"), ("table", "string"), ("path", "string"),
    ("operation", "string", "expire | optimize | vacuum"),
    ("files_before", "bigint"), ("bytes_before", "bigint"), ("files_after", "bigint"), ("bytes_after", "bigint"),
    ("version_before", "bigint"), ("version_after", "bigint"), ("rows_deleted", "bigint"),
    ("attempts", "int"), ("seconds", "double"), ("run_id", "string"), ("started_at", "timestamp"),
))

# The erasure ledger (loglake.ledger.erasures): one row per request and event, and the erased positions.
ERASURES = SystemTable("_erasures", "_ledger/erasures", contract(
    ("erasure_id", "string"), ("dataset", "string"), ("topic", "string"),
    ("event", "string", "recorded | applied | purged"),
    ("field", "string", "the column whose value names the data subject"),
    ("subject", "string", "SHA-256 of dataset, field and key (the key itself is not kept)"),
    ("block", "boolean", "always false: an erasure does not block the key's later records (docs/erasure.md)"),
    ("reason", "string"), ("requested_by", "string"),
    ("positions", "string", "JSON {partition: offset}: the log's end when the request was recorded"),
    ("offsets", "bigint", "recorded: the erased records' count"),
    ("detail", "string", "JSON: applied, the commits per table; purged, the files deleted per table"),
    ("at", "timestamp"),
))

ERASED_OFFSETS = SystemTable("_erased_offsets", "_ledger/erased_offsets", contract(
    ("erasure_id", "string"), ("dataset", "string"), ("topic", "string"), ("partition", "int"),
    ("offset", "bigint"),
))

SYSTEM_TABLES = (LEDGER, SCHEMAS, QUALITY_RESULTS, AUDIT_RESULTS, MAINTENANCE_LOG, ERASURES, ERASED_OFFSETS)
