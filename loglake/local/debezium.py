"""Debezium change streams for ``loglake produce --format debezium-json|debezium-avro``: what a
Debezium connector (PostgreSQL's, 2.7) writes for one table, so a dataset with ``envelope:
debezium`` can be demonstrated and tested without a database.

A simulated table keeps its current rows by key; each step is one change as the database's log
gives it: an insert (``op c``), an update of a row (``u``: ``before`` the old row, ``after`` the
new one with the same key), a delete (``d``), always followed by a tombstone (the key, a null
value) so a compacted topic forgets the key, and once in a long enough stream a re-snapshot
(every current row as ``r``, as a connector started again with ``snapshot.mode=always`` reads the
table). Changes come in the database's transactions: consecutive ones share ``source.txId`` and
``source.ts_ms``, which never goes back; ``source.lsn`` grows with every event.

Records are written as Kafka Connect's JSON converter writes them (``JsonEncoding``: with its
``{"schema", "payload"}`` wrapper, the converter's default, or bare: ``schemas.enable=false``) or
as Avro in the Schema Registry's wire format by confluent-kafka's own ``AvroSerializer``
(``AvroEncoding``). Malformed records are broken in the ways a reader must quarantine, one kind
after the other.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from loglake.core.config import Config, Dataset, FieldSpec
from loglake.core.errors import ConfigError
from loglake.kafka import log
from loglake.local.produce import _field_value

# ``loglake produce --format`` values and the dataset format each needs.
FORMATS = {"debezium-json": "json", "debezium-avro": "avro"}
# The connector the events say wrote them: server (``topic.prefix``), database and schema.
VERSION, CONNECTOR, SERVER, DATABASE, DB_SCHEMA = "2.7.0.Final", "postgresql", "loglake", "shop", "public"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"  # Debezium's timestamp with time zone: ISO-8601 text
# Malformed kinds, each encoding's in the order they are made.
JSON_MALFORMED = ("bad_json", "no_op", "unknown_op", "missing_after", "key_mismatch", "wrong_type")
AVRO_MALFORMED = ("no_magic_byte", "unknown_schema_id", "key_mismatch")
# A stream of at least this many good records re-snapshots the table once, halfway.
SNAPSHOT_FROM = 50

# The PostgreSQL connector's source block: (field, Connect type, optional).
_SOURCE = (("version", "string", False), ("connector", "string", False), ("name", "string", False),
           ("ts_ms", "int64", False), ("snapshot", "string", True), ("db", "string", False),
           ("sequence", "string", True), ("schema", "string", False), ("table", "string", False),
           ("txId", "int64", True), ("lsn", "int64", True), ("xmin", "int64", True))
_TRANSACTION = (("id", "string", False), ("total_order", "int64", False), ("data_collection_order", "int64", False))
_CONNECT_TYPES = {"string": "string", "long": "int64", "double": "double", "boolean": "boolean", "timestamp": "string"}
_AVRO_TYPES = {"string": "string", "int64": "long"}


@dataclass(frozen=True)
class Change:
    """One record of a change stream: its key (the key fields' values) and its envelope (None:
    the tombstone after a delete); ``bad``: the malformed kind it is (None: a good record)."""

    key: dict
    value: dict | None
    bad: str | None = None

    @property
    def op(self) -> str | None:
        return None if self.value is None else self.value.get("op")


def key_text(key: dict) -> str:
    """A key's identity as ``loglake.kafka.log.record_change`` reads it (``log.key_text``)."""
    return log.key_text(key.values())


def changes(ds: Dataset, count: int, *, seed: int | None = None, bad_fraction: float = 0.0,
            malformed: tuple[str, ...] = JSON_MALFORMED, fields: dict[str, FieldSpec] | None = None,
            now: datetime | None = None) -> Iterator[Change]:
    """``count`` records of a change stream of ``ds``'s table, exactly ``round(count *
    bad_fraction)`` of them malformed (the kinds of ``malformed`` in turn; none between a delete
    and its tombstone). ``fields``: the table's columns (default the dataset's); ``now``: the
    stream ends about then. The same ``seed`` and ``now`` give the same stream."""
    if not 0.0 <= bad_fraction <= 1.0:
        raise ValueError(f"bad_fraction must be within [0, 1], found {bad_fraction}")
    rng = random.Random(seed)
    n_bad = round(count * bad_fraction)
    table = _Table(ds, ds.fields if fields is None else fields, rng, now or datetime.now(timezone.utc),
                   count - n_bad)
    kinds = [k for k in malformed if k != "wrong_type" or table.non_keys]  # a table of key columns only
    bad_at = set(rng.sample(range(count), n_bad)) if n_bad else set()
    good = table.changes(count - n_bad)
    due = made = 0
    after_delete = False
    for i in range(count):
        due += i in bad_at
        # A delete's tombstone comes right after it; once the good records are out, only bad ones are due.
        if due and not after_delete:
            yield table.malformed(kinds[made % len(kinds)])
            due -= 1
            made += 1
        else:
            change = next(good)
            after_delete = change.op == "d"
            yield change


class _Table:
    """The simulated table, and the connector's position in its database's log."""

    def __init__(self, ds: Dataset, fields: dict[str, FieldSpec], rng: random.Random, now: datetime, count: int):
        self.ds, self.fields, self.rng = ds, fields, rng
        self.non_keys = [name for name in fields if name not in ds.keys]
        self._row = _rows(ds, fields, rng, now)
        self.rows: dict[str, dict] = {}  # key text -> current row
        self._order: list[str] = []  # the same keys, to draw one in O(1)
        self._at: dict[str, int] = {}
        # A transaction advances the clock 500 ms on average (about 250 ms a record): the stream ends about now.
        self.ms = int(now.timestamp() * 1000) - 250 * count
        self.tx_id = rng.randint(500, 1000)
        self.lsn = rng.randint(20_000_000, 40_000_000)
        self.tx_left = 0

    def key(self, row: dict) -> dict:
        return {k: row[k] for k in self.ds.keys}

    def changes(self, count: int) -> Iterator[Change]:
        """``count`` good records: inserts, updates, deletes each with its tombstone (never the
        last record alone), and a re-snapshot halfway through a long enough stream."""
        made, snapshot_due = 0, count >= SNAPSHOT_FROM
        while made < count:
            left = count - made
            # Halfway, at most half the stream's records were inserts: the snapshot fits in what is left.
            if snapshot_due and made >= count // 2 and 0 < len(self.rows) <= left:
                snapshot_due = False
                for change in self._snapshot():
                    made += 1
                    yield change
                continue
            draw = self.rng.random()
            if not self.rows or draw < 0.45:
                out = [self._insert()]
            elif draw < 0.85 or left < 2:
                out = [self._update(self.rng.choice(self._order))]
            else:
                out = self._delete(self.rng.choice(self._order))
            for change in out:
                made += 1
                yield change

    def envelope(self, op: str, before: dict | None, after: dict | None, snapshot: bool = False) -> dict:
        """The event as Debezium writes it, at the log's next position."""
        if self.tx_left == 0:
            self._begin(self.rng.randint(1, 3))
        self.tx_left -= 1
        self.lsn += self.rng.randint(40, 400)
        source = {"version": VERSION, "connector": CONNECTOR, "name": SERVER, "ts_ms": self.ms,
                  "snapshot": "true" if snapshot else "false", "db": DATABASE, "sequence": None,
                  "schema": DB_SCHEMA, "table": self.ds.name, "txId": self.tx_id, "lsn": self.lsn, "xmin": None}
        # The event's own ts_ms: when the connector processed it, after the database committed it.
        return {"before": before, "after": after, "source": source, "op": op,
                "ts_ms": self.ms + self.rng.randint(1, 250), "transaction": None}

    def _begin(self, size: int) -> None:
        self.tx_id += self.rng.randint(1, 3)
        self.ms += self.rng.randint(1, 1000)
        self.tx_left = size

    def _insert(self) -> Change:
        for _ in range(20):
            row = self._row()
            k = key_text(self.key(row))
            if k not in self.rows:
                self._put(k, row)
                return Change(self.key(row), self.envelope("c", None, row))
        return self._update(k)  # the key space is about full: the row drawn changes instead

    def _update(self, k: str) -> Change:
        old, fresh = self.rows[k], self._row()
        new = {name: old[name] if name in self.ds.keys else fresh[name] for name in fresh}
        self._put(k, new)
        return Change(self.key(old), self.envelope("u", old, new))

    def _delete(self, k: str) -> list[Change]:
        old = self.rows.pop(k)
        i, last = self._at.pop(k), self._order.pop()
        if last != k:
            self._order[i], self._at[last] = last, i
        return [Change(self.key(old), self.envelope("d", old, None)), Change(self.key(old), None)]

    def _snapshot(self) -> Iterator[Change]:
        self._begin(len(self.rows))  # the snapshot reads the table in one transaction
        for k in list(self._order):
            row = self.rows[k]
            yield Change(self.key(row), self.envelope("r", None, row, snapshot=True))

    def _put(self, k: str, row: dict) -> None:
        if k not in self.rows:
            self._at[k] = len(self._order)
            self._order.append(k)
        self.rows[k] = row

    def malformed(self, kind: str) -> Change:
        """A record of ``kind`` made from a fresh row (the table does not change): the envelope's
        kinds broken here, the others (``bad_json``, ``no_magic_byte``, ...) by the encoding."""
        row = self._row()
        key, env = self.key(row), self.envelope("c", None, row)
        if kind == "no_op":
            del env["op"]
        elif kind == "unknown_op":
            env["op"] = "x"
        elif kind == "missing_after":
            env.update(op="u", before=row, after=None)
        elif kind == "key_mismatch":
            first = self.ds.keys[0]
            key = {**key, first: _other(key[first])}
        elif kind == "wrong_type":
            name = self.rng.choice(self.non_keys)
            # A number where text belongs, text where a number or a boolean does.
            wrong = 12345 if self.fields[name].type in ("string", "timestamp") else f"not a {self.fields[name].type}"
            env["after"] = {**row, name: wrong}
        return Change(key, env, kind)


def _rows(ds: Dataset, fields: dict[str, FieldSpec], rng: random.Random,
          now: datetime) -> Callable[[], dict]:
    """A fresh row of the table: the dataset's own ``sample`` (``loglake.local.produce``), drawn
    again when it gives a tombstone, the fields it lacks generated from their types; or every
    field generated. Exactly the table's fields, in their order."""
    sample = ds.code_function("sample")

    def row() -> dict:
        value: dict | None = {}
        if sample is not None:
            for _ in range(100):
                _key, value = sample(rng, now)
                if value is not None:
                    break
            else:
                raise ConfigError(f"dataset {ds.name}: its sample gave 100 tombstones in a row; a change stream "
                                  "needs rows", key=f"datasets.{ds.name}.code")
        return {name: value[name] if name in value else _field_value(spec, rng, now) for name, spec in fields.items()}
    return row


def _other(v):
    """A key value other than ``v``, of its type: what a key-mismatch record's key holds."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    return f"{v}-other"


class Encoding:
    """How a change stream's records are written: ``key`` and ``value`` bytes of a ``Change``,
    ``fields`` the table's columns, ``malformed`` the kinds of broken records it makes."""

    ds: Dataset
    fields: dict[str, FieldSpec]
    malformed: tuple[str, ...]

    def key(self, key: dict) -> bytes:
        raise NotImplementedError

    def value(self, change: Change) -> bytes | None:
        raise NotImplementedError

    def records(self, count: int, bad_fraction: float = 0.0, seed: int | None = None,
                now: datetime | None = None) -> Iterator[tuple[bytes, bytes | None, bool, tuple[str, dict | None]]]:
        """``count`` records (``changes``) as ``loglake.local.produce.produce`` writes them: key, value,
        whether it is good, and (the key's text, the row it leaves: ``after``, None after a delete)."""
        for change in changes(self.ds, count, seed=seed, bad_fraction=bad_fraction, malformed=self.malformed,
                              fields=self.fields, now=now):
            row = change.value["after"] if change.value is not None and change.bad is None else None
            yield self.key(change.key), self.value(change), change.bad is None, (key_text(change.key), row)


def _names(ds: Dataset) -> str:
    """``<server>.<schema>.<table>``, the prefix of Debezium's schema names (Avro's name rules)."""
    return f"{SERVER}.{DB_SCHEMA}.{re.sub(r'[^A-Za-z0-9_]', '_', ds.name)}"


def _dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()  # compact, as the converter writes


class JsonEncoding(Encoding):
    """Records as Kafka Connect's ``JsonConverter`` writes Debezium's events: with ``schemas`` its
    ``{"schema": ..., "payload": ...}`` wrapper (``schemas.enable=true``, the converter's
    default), else the bare key and envelope (``schemas.enable=false``)."""

    malformed = JSON_MALFORMED

    def __init__(self, ds: Dataset, schemas: bool = True):
        self.ds, self.fields, self.schemas = ds, ds.fields, schemas
        names = _names(ds)
        self.key_schema = {"type": "struct", "fields": [_connect(k, ds.fields[k], False) for k in ds.keys],
                           "optional": False, "name": f"{names}.Key"}
        row = {"type": "struct", "optional": True, "name": f"{names}.Value", "fields": [
            _connect(name, spec, name not in ds.keys and not spec.required) for name, spec in ds.fields.items()]}
        envelope = [{**row, "field": "before"}, {**row, "field": "after"},
                    _struct("source", _SOURCE, False, "io.debezium.connector.postgresql.Source"),
                    {"type": "string", "optional": False, "field": "op"},
                    {"type": "int64", "optional": True, "field": "ts_ms"},
                    _struct("transaction", _TRANSACTION, True, "event.block")]
        self.value_schema = {"type": "struct", "fields": envelope, "optional": False, "name": f"{names}.Envelope",
                             "version": 1}

    def key(self, key: dict) -> bytes:
        return _dumps({"schema": self.key_schema, "payload": key} if self.schemas else key)

    def value(self, change: Change) -> bytes | None:
        if change.value is None:
            return None
        text = _dumps({"schema": self.value_schema, "payload": change.value} if self.schemas else change.value)
        return text[:-3] if change.bad == "bad_json" else text


def _connect(name: str, spec: FieldSpec, optional: bool) -> dict:
    """A row field's Connect schema (a timestamp: Debezium's ``ZonedTimestamp``, ISO-8601 text)."""
    out: dict = {"type": _CONNECT_TYPES[spec.type], "optional": optional}
    if spec.type == "timestamp":
        out.update(name=ZONED_TIMESTAMP, version=1)
    return {**out, "field": name}


def _struct(field: str, fields: tuple, optional: bool, name: str) -> dict:
    return {"type": "struct", "fields": [{"type": t, "optional": o, "field": f} for f, t, o in fields],
            "optional": optional, "name": name, "field": field}


class AvroEncoding(Encoding):
    """Records in the Schema Registry's Avro wire format, as Debezium's ``AvroConverter`` writes
    them: the key a ``<server>.<schema>.<table>.Key`` record under the key subject, the value an
    ``...Envelope`` record (``before`` and ``after`` the ``Value`` record) under the value subject,
    both registered, serialized by confluent-kafka's own ``AvroSerializer``."""

    malformed = AVRO_MALFORMED

    def __init__(self, config: Config, ds: Dataset, value_record: dict, where: str):
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        from loglake.schemaregistry import client, register

        self.ds = ds
        self.fields = avro_fields(ds, value_record, where)
        self.key_schema, self.value_schema = avro_schemas(ds, value_record)
        serializers = []
        for subject, schema in ((ds.key_subject_name, self.key_schema), (ds.subject_name, self.value_schema)):
            try:
                register(config, subject, json.dumps(schema), "AVRO")  # retried while the registry does not answer
            except SchemaRegistryError as e:
                if e.http_status_code not in (409, 422):  # not a refusal of this schema (incompatible, invalid)
                    raise
                raise ConfigError(f"the registry refused the {schema['name']} schema made from this Value record "
                                  f"under subject {subject}: {e.error_message}", key=where) from None
            # The dataset's subjects, whatever the topic is named.
            serializers.append(AvroSerializer(client(config), json.dumps(schema), conf={
                "auto.register.schemas": False, "subject.name.strategy": lambda _ctx, _name, s=subject: s}))
        self._key, self._value = serializers
        self._key_context = SerializationContext(ds.topic, MessageField.KEY)
        self._value_context = SerializationContext(ds.topic, MessageField.VALUE)

    def key(self, key: dict) -> bytes:
        return self._key(key, self._key_context)

    def value(self, change: Change) -> bytes | None:
        if change.value is None:
            return None
        if change.bad == "no_magic_byte":
            return _dumps(change.value)
        good = self._value(change.value, self._value_context)
        if change.bad == "unknown_schema_id":
            from loglake.schemaregistry.serializers import UNKNOWN_ID

            return bytes([0]) + UNKNOWN_ID.to_bytes(4, "big") + good[5:]
        return good


def value_record(given: dict) -> dict:
    """The ``Value`` record of an Avro schema: the schema itself, or an Envelope's ``after`` (which
    Debezium defines in ``before`` and names in ``after``)."""
    fields = {f.get("name"): f for f in given.get("fields", []) if isinstance(f, dict)}
    if given.get("type") == "record" and {"before", "after", "op"} <= set(fields):
        for name in ("after", "before"):
            t = fields[name]["type"]
            found = [b for b in (t if isinstance(t, list) else [t])
                     if isinstance(b, dict) and b.get("type") == "record"]
            if found:
                return found[0]
    return given


def _avro_type(t) -> tuple[object, bool]:
    """A field's Avro type without ``null``, and whether it held one."""
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        return (rest[0] if len(rest) == 1 else rest), len(rest) < len(t)
    return t, False


def avro_fields(ds: Dataset, record: dict, where: str) -> dict[str, FieldSpec]:
    """The table's columns from an Avro ``Value`` record (``where``: the key naming its source),
    to generate rows of: string, int, long, float, double, boolean, Debezium's ZonedTimestamp."""
    record = value_record(record)
    if record.get("type") != "record" or not isinstance(record.get("fields"), list):
        raise ConfigError("not an Avro record (type: record, fields: [...]): give the Value record of the table's "
                          "rows, or a Debezium Envelope whose after field holds it", key=where)
    out: dict[str, FieldSpec] = {}
    for f in record["fields"]:
        t, optional = _avro_type(f.get("type"))
        base = t.get("type") if isinstance(t, dict) and "logicalType" not in t else t
        if base == "string" and isinstance(t, dict) and t.get("connect.name") == ZONED_TIMESTAMP:
            kind = "timestamp"
        else:
            kind = {"string": "string", "int": "long", "long": "long", "float": "double", "double": "double",
                    "boolean": "boolean"}.get(base) if isinstance(base, str) else None
        if kind is None:
            raise ConfigError(f"field {f.get('name')!r} of the Value record is {json.dumps(f.get('type'))}: loglake "
                              "produce generates string, int, long, float, double, boolean fields and timestamps as "
                              f"Debezium writes them (a string with connect.name {ZONED_TIMESTAMP})", key=where)
        out[f["name"]] = FieldSpec(type=kind, required=not optional)
    missing = [k for k in ds.keys if k not in out]
    if missing:
        raise ConfigError(f"dataset {ds.name}'s key field {missing[0]!r} is not a field of the Value record "
                          f"({', '.join(out)})", key=where)
    return out


def avro_schemas(ds: Dataset, record: dict) -> tuple[dict, dict]:
    """The Key and Envelope records Debezium's Avro converter registers for ``ds``'s table, the
    Envelope's ``before`` and ``after`` the given Value record's fields (renamed as Debezium names it)."""
    names = _names(ds)
    given = {f["name"]: f for f in value_record(record)["fields"]}
    value = {"type": "record", "name": "Value", "namespace": names, "fields": list(given.values()),
             "connect.name": f"{names}.Value"}
    key = {"type": "record", "name": "Key", "namespace": names, "connect.name": f"{names}.Key",
           "fields": [{"name": k, "type": _avro_type(given[k]["type"])[0]} for k in ds.keys]}

    def record_of(name: str, namespace: str, fields: tuple) -> dict:
        return {"type": "record", "name": name, "namespace": namespace, "fields": [
            {"name": f, "type": ["null", _AVRO_TYPES[t]], "default": None} if optional
            else {"name": f, "type": _AVRO_TYPES[t]} for f, t, optional in fields]}

    source = {**record_of("Source", "io.debezium.connector.postgresql", _SOURCE),
              "connect.name": "io.debezium.connector.postgresql.Source"}
    envelope = {"type": "record", "name": "Envelope", "namespace": names, "connect.name": f"{names}.Envelope",
                "connect.version": 1, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", f"{names}.Value"], "default": None},
        {"name": "source", "type": source},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", record_of("block", "event", _TRANSACTION)], "default": None},
    ]}
    return key, envelope


def default_format(ds: Dataset) -> str:
    """``--format``'s default for a dataset with ``envelope: debezium``: its format's Debezium form."""
    return f"debezium-{ds.format}"


def encoding(config: Config, ds: Dataset, fmt: str, *, json_schemas: bool = True,
             schema_file: Path | None = None) -> Encoding:
    """The encoding of ``--format fmt`` (``FORMATS``) for ``ds``, a changelog with ``envelope:
    debezium`` of the fitting format. ``json_schemas``: debezium-json with the converter's schema
    wrapper. debezium-avro's Value record (the table's row): ``schema_file`` (a Value record or a
    whole Envelope), else the dataset code's ``AVRO_VALUE`` (a dict), else the Envelope the
    value subject holds (an earlier run's)."""
    if not ds.debezium:
        raise ConfigError(f"--format {fmt} writes Debezium change events: dataset {ds.name} is kind: {ds.kind}, "
                          f"envelope: {ds.envelope}; it takes kind: changelog with envelope: debezium", key="--format")
    if fmt not in FORMATS or FORMATS[fmt] != ds.format:
        fits = [f for f, needs in FORMATS.items() if needs == ds.format]
        expected = (f"--format {fits[0]}" if fits else
                    "a dataset of format json (--format debezium-json) or avro (--format debezium-avro)")
        raise ConfigError(f"dataset {ds.name} holds Debezium change events in format {ds.format}: {fmt} does not "
                          f"fit; expected {expected}", key="--format")
    if fmt == "debezium-json":
        if schema_file is not None:
            raise ConfigError(f"--schema is the Avro Value record of --format debezium-avro: dataset {ds.name} is "
                              "json, its rows' schema is its conf's", key="--schema")
        return JsonEncoding(ds, schemas=json_schemas)
    if ds.key_format != "avro":
        raise ConfigError(f"--format debezium-avro writes the record key as Debezium's Avro converter does (a Key "
                          f"record of {', '.join(ds.keys)} under subject {ds.key_subject_name}): dataset {ds.name} "
                          f"reads its key as {ds.key_format}; set key_format: avro",
                          key=f"datasets.{ds.name}.key_format")
    if schema_file is not None:
        try:
            given, where = json.loads(Path(schema_file).read_text()), "--schema"
        except (OSError, ValueError) as e:
            raise ConfigError(f"{schema_file}: {e}", key="--schema") from None
    elif ds.code_function("AVRO_VALUE") is not None:
        given, where = ds.code_function("AVRO_VALUE"), f"datasets.{ds.name}.code"
    else:
        given, where = _registered_envelope(config, ds), "subject"
    if not isinstance(given, dict):
        raise ConfigError("not an Avro record schema (a JSON object)", key=where)
    return AvroEncoding(config, ds, given, where)


def _registered_envelope(config: Config, ds: Dataset) -> dict:
    """The value subject's newest Envelope: what an earlier run (or the connector) registered."""
    from loglake.schemaregistry import versions

    hint = (f"give the table's Value record: --schema FILE (an Avro schema of the Value record, or a Debezium "
            f"Envelope) or AVRO_VALUE (a dict) in dataset {ds.name}'s code")
    try:
        newest = versions(config, ds.subject_name)[-1]
    except ConfigError as e:
        if e.key != "subject":
            raise
        raise ConfigError(f"subject {ds.subject_name} has no schema yet: {hint}", key="--schema") from None
    given = json.loads(newest.schema_str)
    if value_record(given) is given:
        raise ConfigError(f"subject {ds.subject_name}'s newest version is not a Debezium Envelope: {hint}",
                          key="--schema")
    return given
