"""Registry-format datasets without services: the conf's keys, Avro types as columns, which
writer schemas a JSON Schema or Protobuf table can hold. Decoding itself is checked against
spark-avro in tests/integration/test_registry_topics.py (the column types here are the ones it
gives), and so is which Avro writer a schema reads: Avro's own rules, asked in a JVM."""

from __future__ import annotations

import json

import pytest

from loglake.core.config import Dataset, RegistrySettings
from loglake.core.errors import ConfigError
from loglake.schemaregistry import avro


def dataset(**over) -> Dataset:
    data = {"name": "orders", "topic": "orders", "partitions": 3, "key": "order_id", "format": "avro",
            "tables": {"speed": "speed.orders", "batch": "batch.orders", "quarantine": "quarantine.orders"}}
    return Dataset.model_validate({**data, **over})


RICH = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local_at", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": "int", "default": 0},
        {"name": "ratio", "type": "float"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "raw", "type": {"type": "fixed", "name": "Md5", "size": 16}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"},
                                                         {"name": "qty", "type": "int"}]}}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "first_line", "type": ["null", "Line"], "default": None},
        {"name": "either", "type": ["int", "long"]},
        {"name": "mixed", "type": ["null", "string", "long"], "default": None},
    ],
}


def test_avro_types_become_spark_columns_with_logical_types_nested_records_and_unions():
    fields = avro.fields(json.dumps(RICH))
    assert {n: f.type for n, f in fields.items()} == {
        "order_id": "bigint", "placed_at": "timestamp", "local_at": "timestamp_ntz", "day": "date",
        "amount": "decimal(10,2)", "note": "string", "count": "int", "ratio": "float", "status": "string",
        "raw": "binary", "lines": "array<struct<sku:string,qty:int>>", "tags": "map<string,string>",
        "first_line": "struct<sku:string,qty:int>", "either": "bigint", "mixed": "struct<member0:string,member1:bigint>",
    }
    # Required unless it may be null or has a default (a record written before it existed reads that).
    assert [n for n, f in fields.items() if not f.required] == ["note", "count", "first_line", "mixed"]


def test_a_value_schema_must_be_a_record():
    with pytest.raises(ValueError, match="must be an Avro record"):
        avro.fields('"string"')


def test_a_registry_dataset_takes_no_schema_block_and_its_fields_wait_for_the_registry():
    ds = dataset()
    assert ds.subject_name == "orders-value" and ds.in_registry and not ds.resolved
    with pytest.raises(ConfigError, match="fields come from the registry"):
        ds.fields
    with pytest.raises(ValueError, match="takes its schema from the registry"):
        dataset(schema={"order_id": {"type": "long"}})
    with pytest.raises(ValueError, match="subject: is for datasets in a registry format"):
        dataset(format="json", subject="x", schema={"order_id": {"type": "long"}})
    with pytest.raises(ValueError, match="needs a schema: block"):
        dataset(format="json")
    assert dataset(subject="shop.Order").subject_name == "shop.Order"


def test_a_key_in_a_registry_format_is_one_value_a_primitive_or_a_record_of_one_field():
    from loglake.schemaregistry.resolve import KEYS

    assert dataset(key_format="avro").key_subject_name == "orders-key"
    with pytest.raises(ValueError, match="key_format: is for datasets in a registry format"):
        dataset(format="json", key_format="avro", schema={"order_id": {"type": "long"}})
    with pytest.raises(ValueError, match="key_format"):
        dataset(key_format="protobuf")
    assert KEYS["avro"]('{"type": "long"}') == (None, "bigint")
    assert KEYS["avro"]('"string"') == (None, "string")
    one = {"type": "record", "name": "K", "fields": [{"name": "order_id", "type": "long"}]}
    assert KEYS["avro"](json.dumps(one)) == ("order_id", "bigint")
    with pytest.raises(ValueError, match="several fields"):
        KEYS["avro"](json.dumps({**one, "fields": [*one["fields"], {"name": "b", "type": "int"}]}))
    assert KEYS["json-schema"]('{"type": "integer"}') == (None, "bigint")
    assert KEYS["json-schema"]('{"type": "object", "properties": {"id": {"type": "string"}}}') == ("id", "string")


def test_registry_settings_refuse_a_bad_url_and_half_a_login():
    with pytest.raises(ValueError, match="is not an http"):
        RegistrySettings(url="registry:8081")
    with pytest.raises(ValueError, match="needs both username and password"):
        RegistrySettings(url="https://r:8081", username="u")
    s = RegistrySettings(url="https://r.example:8443/apis/ccompat/v7/", username="u", password="s3cret", ca_file="/ca.pem")
    assert s.port == 8443 and s.url.endswith("/v7")
    assert s.client_conf() == {"url": "https://r.example:8443/apis/ccompat/v7", "basic.auth.user.info": "u:s3cret",
                               "ssl.ca.location": "/ca.pem"}
    assert "s3cret" not in repr(s)


def test_status_says_the_format_the_subject_version_and_what_was_refused():
    from loglake.schema_versions import format_text, schema_text, status_shape

    assert format_text(status_shape(format="json", version=1)) == "json (the schema is the dataset's conf)"
    st = status_shape(format="avro", subject="orders-value", subject_version=2, schema_id=7, version=3,
                      change="channel: new optional field")
    assert format_text(st) == "avro, subject orders-value version 2 (schema id 7)"
    assert format_text({**st, "registry_refused": "version 3 is refused"}).endswith("; REFUSED: version 3 is refused")
    away = status_shape(format="avro", subject="orders-value", registry_error="the schema registry at U did not answer")
    assert format_text(away) == "avro, subject orders-value: the schema registry at U did not answer"
    assert schema_text(away) == "unknown until the registry answers"
    with pytest.raises(KeyError, match="not schema status keys: subjekt"):
        status_shape(subjekt="x")


def test_json_schema_properties_become_spark_columns():
    from loglake.schemaregistry import jsonschema

    schema = {"type": "object", "required": ["id", "at", "note"], "properties": {
        "id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"}, "score": {"type": "number"}, "ok": {"type": "boolean"},
        "note": {"type": ["null", "string"]}, "kind": {"enum": ["a", "b"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "integer"}]}}}
    fields = jsonschema.fields(json.dumps(schema))
    assert {n: f.type for n, f in fields.items()} == {
        "id": "bigint", "at": "timestamp", "day": "date", "score": "double", "ok": "boolean", "note": "string",
        "kind": "string", "items": "array<struct<sku:string>>", "attrs": "map<string,bigint>", "maybe": "bigint"}
    assert [n for n, f in fields.items() if f.required] == ["id", "at"]  # note may be null
    with pytest.raises(ValueError, match=r"ref: \$ref is not followed"):
        jsonschema.fields(json.dumps({"type": "object", "properties": {"ref": {"$ref": "#/defs/x"}}}))
    table = jsonschema.fields(json.dumps(schema))
    retyped = {**schema, "properties": {**schema["properties"], "id": {"type": "string"}}}
    assert jsonschema.refusal(table, json.dumps(retyped)) == "its field 'id' is string where the table holds bigint"


PROTO = """syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
message Event {
  int64 id = 1;
  uint64 big = 2;
  uint32 small = 3;
  google.protobuf.Timestamp at = 4;
  enum Kind { A = 0; B = 1; }
  Kind kind = 5;
  message Part { string name = 1; }
  repeated Part parts = 6;
  map<string, int32> counts = 7;
  bytes raw = 8;
}
message Other { string x = 1; }
"""


def test_protobuf_fields_as_text_or_descriptor_and_a_record_decoded():
    import base64

    from google.protobuf import json_format, message_factory

    from loglake.schemaregistry import protobuf

    want = {"id": "bigint", "big": "decimal(20,0)", "small": "bigint", "at": "timestamp", "kind": "string",
            "parts": "array<struct<name:string>>", "counts": "map<string,int>", "raw": "binary"}
    fields = protobuf.fields(PROTO)
    assert {n: f.type for n, f in fields.items()} == want and not any(f.required for f in fields.values())
    descriptor = protobuf.parse(PROTO)
    as_registered = base64.b64encode(descriptor.file.serialized_pb).decode()  # confluent-kafka's form
    assert {n: f.type for n, f in protobuf.fields(as_registered).items()} == want

    cls = message_factory.GetMessageClass(descriptor)
    msg = json_format.ParseDict({"id": 7, "big": "18446744073709551615", "at": "2026-11-26T10:00:00Z",
                                 "kind": "B", "parts": [{"name": "p"}], "counts": {"a": 2}}, cls())
    decode = protobuf.decoder({9: PROTO}, list(want))
    row = decode(b"\x00" + msg.SerializeToString(), 9)  # message indexes [0]: a single 0 byte
    assert row[0] == 7 and str(row[1]) == "18446744073709551615" and row[2] == 0 and row[4] == "B"
    assert row[3].isoformat() == "2026-11-26T10:00:00+00:00" and row[5] == [{"name": "p"}] and row[6] == {"a": 2}
    assert row[-1] is True
    assert decode(b"\x00\xff\xff\xff", 9) is None  # does not decode
    assert decode(b"\x02\x02" + msg.SerializeToString(), 9) is None  # indexes [1]: the file's other message
    assert decode(b"\x00" + msg.SerializeToString(), 10) is None  # not a writer the tables hold
    with pytest.raises(ValueError, match="references are not followed"):
        protobuf.fields(PROTO.replace('import "google/protobuf/timestamp.proto";', 'import "other.proto";'))


def test_the_registry_url_comes_from_the_environment_in_a_profile_without_one(tmp_path, monkeypatch):
    from loglake.core.config import load_config
    from loglake.testing.conf import write_conf

    conf = write_conf(tmp_path, "localhost:9")
    assert load_config(conf, home=tmp_path).profile.registry is None
    monkeypatch.setenv("LOGLAKE_REGISTRY_URL", "https://registry.example:8443/apis/ccompat/v7")
    assert load_config(conf, home=tmp_path).registry.url == "https://registry.example:8443/apis/ccompat/v7"


def test_the_registry_login_comes_from_the_environment_with_its_url(tmp_path, monkeypatch):
    """The compose stack names its registry and the login to it in the environment: the user,
    the secret file with the password, the CA (docker/compose.yaml)."""
    from loglake.core.config import load_config
    from loglake.core.errors import ConfigError
    from loglake.testing.conf import write_conf

    conf = write_conf(tmp_path, "localhost:9")
    secret = tmp_path / "registry_loglake_password"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("LOGLAKE_REGISTRY_URL", "https://schema-registry:8443/apis/ccompat/v7")
    monkeypatch.setenv("LOGLAKE_REGISTRY_USERNAME", "loglake")
    monkeypatch.setenv("LOGLAKE_REGISTRY_PASSWORD_FILE", str(secret))
    monkeypatch.setenv("LOGLAKE_REGISTRY_CA_FILE", "/run/secrets/kafka_ca")
    registry = load_config(conf, home=tmp_path).registry
    assert (registry.username, registry.password.get_secret_value(), registry.ca_file) == (
        "loglake", "s3cret", "/run/secrets/kafka_ca")
    monkeypatch.setenv("LOGLAKE_REGISTRY_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError) as e:
        load_config(conf, home=tmp_path)
    assert e.value.key == "registry.password" and "LOGLAKE_REGISTRY_PASSWORD_FILE" in str(e.value)
    monkeypatch.delenv("LOGLAKE_REGISTRY_PASSWORD_FILE")
    with pytest.raises(ConfigError) as e:  # a user without a password: refused, as in a profile
        load_config(conf, home=tmp_path)
    assert "password" in str(e.value)
    monkeypatch.delenv("LOGLAKE_REGISTRY_URL")
    with pytest.raises(ConfigError) as e:  # a login for no registry: said, not ignored
        load_config(conf, home=tmp_path)
    assert e.value.key == "registry" and "LOGLAKE_REGISTRY_USERNAME is set but LOGLAKE_REGISTRY_URL is not" in str(
        e.value)
