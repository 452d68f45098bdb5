"""``loglake produce --format debezium-json|debezium-avro``'s change stream (``loglake.local.debezium``),
without a broker: the shape of the stream as Debezium writes it (each delete followed by its
tombstone, updates keeping their key, a re-snapshot of every current row, a clock that never goes
back), the producer's own account of each key's last row against a fold of what it encoded, the
JSON converter's two forms and the Avro schemas, and each kind of malformed record."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import datetime, timezone

import fastavro
import pytest

from loglake import cli
from loglake.core.config import load_dataset
from loglake.core.errors import ConfigError
from loglake.kafka.log import record_change
from loglake.local import debezium
from loglake.testing import NO_BROKER, write_conf

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CUSTOMERS = {
    "kind": "changelog", "envelope": "debezium", "partitions": 2, "key": ["tenant", "id"],
    "schema": {"tenant": {"type": "string", "enum": ["t1", "t2", "t3"]}, "id": {"type": "long", "min": 1, "max": 5000},
               "name": {"type": "string"}, "balance": {"type": "double", "required": False},
               "active": {"type": "boolean"}, "updated_at": {"type": "timestamp"}},
}
# A dataset's own generator (``sample``): few keys, some tombstones (a plain changelog's way), a field left out.
SAMPLE = '''
def sample(rng, now):
    n = rng.randint(1, 30)
    if rng.random() < 0.2:
        return str(n), None
    return str(n), {"tenant": "t1", "id": n, "name": f"customer {n}", "active": n % 2 == 0,
                    "updated_at": "2026-11-30T08:00:00.000Z"}
'''


@pytest.fixture
def customers(tmp_path):
    import yaml

    path = tmp_path / "customers.yaml"
    path.write_text(yaml.safe_dump(CUSTOMERS))
    return load_dataset(path)


@pytest.fixture
def sampled(tmp_path):
    import yaml

    path = tmp_path / "sampled.yaml"
    path.write_text(yaml.safe_dump(CUSTOMERS))
    path.with_suffix(".py").write_text(SAMPLE)
    return load_dataset(path)


def key_of(ds, row: dict) -> dict:
    return {k: row[k] for k in ds.keys}


def test_the_stream_is_a_tables_change_log(customers):
    stream = list(debezium.changes(customers, 400, seed=7, now=NOW))
    assert len(stream) == 400 and all(c.bad is None for c in stream)
    live: dict[tuple, dict] = {}  # the table as the stream leaves it
    snapshots, in_snapshot = 0, False
    for i, change in enumerate(stream):
        k = tuple(change.key.values())
        env = change.value
        if env is None:  # a tombstone: right after its delete, same key
            assert stream[i - 1].op == "d" and stream[i - 1].key == change.key
            continue
        if change.op == "d":
            assert stream[i + 1].value is None and stream[i + 1].key == change.key
        if change.op == "r":
            if not in_snapshot:  # a re-snapshot: every current row once, as it is, in one run of records
                rows = [c.value["after"] for c in stream[i:i + len(live)]]
                assert all(c.op == "r" for c in stream[i:i + len(live)])
                assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, live.values()))
                snapshots += 1
            in_snapshot = True
            assert env["before"] is None and env["source"]["snapshot"] == "true"
            continue
        in_snapshot = False
        assert env["source"]["snapshot"] == "false"
        if change.op == "c":
            assert env["before"] is None and k not in live and key_of(customers, env["after"]) == change.key
            live[k] = env["after"]
        elif change.op == "u":
            assert env["before"] == live[k] and key_of(customers, env["after"]) == change.key
            assert env["after"] != env["before"]
            live[k] = env["after"]
        else:
            assert change.op == "d" and env["before"] == live.pop(k) and env["after"] is None
    assert snapshots == 1
    ops = Counter(c.op for c in stream)
    assert ops["c"] and ops["u"] and ops["d"] == ops[None] > 0

    envs = [c.value for c in stream if c.value is not None]
    ts = [e["source"]["ts_ms"] for e in envs]
    lsn = [e["source"]["lsn"] for e in envs]
    assert ts == sorted(ts) and all(a < b for a, b in zip(lsn, lsn[1:]))
    assert all(e["ts_ms"] >= e["source"]["ts_ms"] for e in envs)
    by_tx: dict[int, set[int]] = {}
    for e in envs:
        by_tx.setdefault(e["source"]["txId"], set()).add(e["source"]["ts_ms"])
    assert all(len(times) == 1 for times in by_tx.values())  # a transaction commits at one time
    assert len(by_tx) < len(envs)  # some transactions hold several changes
    assert envs[0]["source"] | {"ts_ms": 0, "txId": 0, "lsn": 0} == {
        "version": "2.7.0.Final", "connector": "postgresql", "name": "loglake", "ts_ms": 0, "snapshot": "false",
        "db": "shop", "sequence": None, "schema": "public", "table": "customers", "txId": 0, "lsn": 0, "xmin": None}
    assert set(envs[0]) == {"before", "after", "source", "op", "ts_ms", "transaction"}


def test_a_seed_gives_the_same_stream(customers):
    def run(seed):
        return list(debezium.changes(customers, 120, seed=seed, bad_fraction=0.1, now=NOW))

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_a_short_stream_takes_no_snapshot_and_never_ends_on_a_delete(customers):
    for seed in range(50):
        stream = list(debezium.changes(customers, 49, seed=seed, now=NOW))
        assert "r" not in {c.op for c in stream}
        assert stream[-1].op != "d"


@pytest.mark.parametrize("schemas", [True, False])
def test_the_producers_account_is_the_fold_of_what_it_encoded(customers, schemas):
    enc = debezium.JsonEncoding(customers, schemas=schemas)
    records = list(enc.records(300, bad_fraction=0.05, seed=11, now=NOW))
    account = {text: row for _k, _v, ok, (text, row) in records if ok}
    tombstones = sum(1 for _k, v, ok, _obj in records if ok and v is None)

    fold: dict[str, dict | None] = {}
    change = record_change(customers)  # the reader's account of a record (the audit's)
    for key, value, ok, _obj in records:
        if not ok:
            continue
        doc = json.loads(key)
        fields = doc["payload"] if schemas else doc
        text = "\x1f".join(v if isinstance(v, str) else json.dumps(v) for v in (fields["tenant"], fields["id"]))
        env = None if value is None else json.loads(value)
        env = env["payload"] if schemas and env is not None else env
        assert change(key, value) == (text, env is None or env["op"] == "d")
        fold[text] = None if env is None else env["after"]  # a delete's after is null
    assert account == fold
    deletes = sum(1 for _k, v, ok, _obj in records if ok and v is not None and '"op":"d"' in v.decode())
    assert tombstones == deletes > 0
    assert None in fold.values() and any(fold.values())


def test_the_json_converters_wrapper_holds_the_same_key_and_envelope(customers):
    wrapped = list(debezium.JsonEncoding(customers).records(80, seed=5, now=NOW))
    bare = list(debezium.JsonEncoding(customers, schemas=False).records(80, seed=5, now=NOW))
    assert len(wrapped) == len(bare) == 80
    for (wk, wv, _, _), (bk, bv, _, _) in zip(wrapped, bare):
        assert json.loads(wk)["payload"] == json.loads(bk)
        assert (wv is None) == (bv is None)
        if wv is not None:
            assert json.loads(wv)["payload"] == json.loads(bv)
    key, value = json.loads(wrapped[0][0]), json.loads(wrapped[0][1])
    assert key["schema"] == {"type": "struct", "optional": False, "name": "loglake.public.customers.Key", "fields": [
        {"type": "string", "optional": False, "field": "tenant"}, {"type": "int64", "optional": False, "field": "id"}]}
    schema = value["schema"]
    assert schema["type"] == "struct" and schema["name"] == "loglake.public.customers.Envelope"
    fields = {f["field"]: f for f in schema["fields"]}
    assert list(fields) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert fields["after"]["optional"] and fields["after"]["name"] == "loglake.public.customers.Value"
    row = {f["field"]: f for f in fields["after"]["fields"]}
    assert {n: f["type"] for n, f in row.items()} == {"tenant": "string", "id": "int64", "name": "string",
                                                      "balance": "double", "active": "boolean",
                                                      "updated_at": "string"}
    assert row["updated_at"]["name"] == "io.debezium.time.ZonedTimestamp" and row["balance"]["optional"]
    assert fields["source"]["name"] == "io.debezium.connector.postgresql.Source"
    assert fields["op"] == {"type": "string", "optional": False, "field": "op"}
    assert fields["ts_ms"]["type"] == "int64" and fields["transaction"]["optional"]
    # One key, one record key: its records go to one partition, in order.
    by_key: dict[str, set[bytes]] = {}
    for k, _v, _ok, (text, _row) in wrapped:
        by_key.setdefault(text, set()).add(k)
    assert all(len(keys) == 1 for keys in by_key.values())


def test_each_malformed_kind_is_made_and_broken_its_way(customers):
    stream = list(debezium.changes(customers, 120, seed=2, bad_fraction=0.1, now=NOW))
    bad = [c for c in stream if c.bad is not None]
    assert len(bad) == 12 and Counter(c.bad for c in bad) == {k: 2 for k in debezium.JSON_MALFORMED}
    enc = debezium.JsonEncoding(customers, schemas=False)
    types = {"string": str, "timestamp": str, "long": int, "double": (int, float), "boolean": bool}
    for c in bad:
        raw = enc.value(c)
        if c.bad == "bad_json":
            with pytest.raises(ValueError):
                json.loads(raw)
            continue
        env = json.loads(raw)
        if c.bad == "no_op":
            assert "op" not in env and env["after"] is not None
        elif c.bad == "unknown_op":
            assert env["op"] == "x"
        elif c.bad == "missing_after":
            assert env["op"] == "u" and env["after"] is None and env["before"] is not None
        elif c.bad == "key_mismatch":
            assert c.key != key_of(customers, env["after"]) and set(c.key) == {"tenant", "id"}
        else:
            wrong = [n for n, spec in customers.fields.items() if env["after"][n] is not None
                     and not isinstance(env["after"][n], types[spec.type])]
            assert len(wrong) == 1 and wrong[0] not in customers.keys
    for count, fraction in ((7, 0.5), (10, 1.0), (33, 0.3), (1, 0.0)):
        got = list(debezium.changes(customers, count, seed=1, bad_fraction=fraction, now=NOW))
        assert len(got) == count and sum(c.bad is not None for c in got) == round(count * fraction)
    with pytest.raises(ValueError, match="bad_fraction"):
        list(debezium.changes(customers, 5, bad_fraction=1.5))


def test_rows_come_from_the_datasets_own_sample(sampled):
    stream = list(debezium.changes(sampled, 300, seed=9, now=NOW))
    rows = [c.value["after"] for c in stream if c.value is not None and c.value["after"] is not None]
    assert {r["tenant"] for r in rows} == {"t1"} and all(r["name"].startswith("customer ") for r in rows)
    # An insert is a sample's row as it is; an update keeps the key and takes the rest from a fresh one.
    assert all(c.value["after"]["name"] == f"customer {c.key['id']}" for c in stream if c.op == "c")
    assert all(isinstance(r["balance"], float) for r in rows)  # the field its sample leaves out: generated
    assert list(rows[0]) == list(sampled.fields)
    # Thirty keys: once they are all taken, an insert's draw updates the row instead.
    assert len({r["id"] for r in rows}) <= 30 and Counter(c.op for c in stream)["u"] > 100


VALUE = {"type": "record", "name": "Value", "namespace": "shop.orders", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "qty", "type": "int"},
    {"name": "price", "type": ["null", "double"], "default": None},
    {"name": "paid", "type": "boolean"},
    {"name": "placed_at", "type": {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}},
]}


def test_the_avro_schemas_are_debeziums_and_hold_the_stream(tmp_path):
    import yaml

    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({"kind": "changelog", "envelope": "debezium", "partitions": 1, "key": "id",
                                    "format": "avro"}))
    ds = load_dataset(path)
    fields = debezium.avro_fields(ds, VALUE, "--schema")
    assert {n: (f.type, f.required) for n, f in fields.items()} == {
        "id": ("long", True), "customer": ("string", True), "qty": ("long", True), "price": ("double", False),
        "paid": ("boolean", True), "placed_at": ("timestamp", True)}
    key, envelope = debezium.avro_schemas(ds, VALUE)
    # A whole Envelope given: its after's record is the Value record.
    assert debezium.avro_fields(ds, envelope, "--schema") == fields
    assert debezium.avro_schemas(ds, envelope) == (key, envelope)
    assert key["name"] == "Key" and key["namespace"] == "loglake.public.orders"
    assert envelope["connect.name"] == "loglake.public.orders.Envelope"
    assert [f["name"] for f in envelope["fields"]] == ["before", "after", "source", "op", "ts_ms", "transaction"]
    parsed_key, parsed_env = fastavro.parse_schema(key), fastavro.parse_schema(envelope)
    for change in debezium.changes(ds, 100, seed=4, fields=fields, malformed=debezium.AVRO_MALFORMED, now=NOW):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed_key, change.key)
        assert fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), parsed_key) == change.key
        if change.value is not None:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed_env, change.value)
            assert fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), parsed_env) == change.value

    with pytest.raises(ConfigError, match="field 'day' of the Value record") as e:
        debezium.avro_fields(ds, {**VALUE, "fields": [*VALUE["fields"], {"name": "day", "type": {
            "type": "int", "logicalType": "date"}}]}, "datasets.orders.code")
    assert e.value.key == "datasets.orders.code"
    with pytest.raises(ConfigError, match="key field 'id' is not a field of the Value record"):
        debezium.avro_fields(ds, {**VALUE, "fields": VALUE["fields"][1:]}, "--schema")


@pytest.mark.parametrize("argv, said", [
    (["produce", "job_views", "--count", "5", "--format", "debezium-json"],
     "--format: --format debezium-json writes Debezium change events: dataset job_views is kind: events"),
    (["produce", "customers", "--count", "5", "--format", "debezium-avro"],
     "--format: dataset customers holds Debezium change events in format json: debezium-avro does not fit; "
     "expected --format debezium-json"),
    (["produce", "customers", "--count", "5", "--format", "json"], "expected --format debezium-json"),
    (["produce", "customers", "--count", "5", "--schema", "x.avsc"], "--schema: --schema is the Avro Value record"),
    (["produce", "job_views", "--count", "5", "--no-json-schemas"],
     "--no-json-schemas: --no-json-schemas chooses the JSON converter's schema wrapper of --format debezium-json"),
    (["produce", "customers", "--count", "5", "--format", "debezium-avro", "--json-schemas"],
     "--json-schemas: --json-schemas chooses"),
])
def test_a_format_that_does_not_fit_the_dataset_is_refused_naming_the_flag(tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.setenv("LOGLAKE_HOME", str(tmp_path / "state"))
    conf = write_conf(tmp_path, NO_BROKER, extra_datasets={"customers": CUSTOMERS})
    assert cli.main(["--conf-dir", str(conf), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err, err
