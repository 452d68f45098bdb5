"""Values in a Schema Registry format for ``loglake produce --format``: confluent-kafka's own
serializers, with the registry, so what loglake reads is what any producer of the shop writes.

The writer's schema is the subject's newest version, or a schema file given to register
first (the registry's compatibility rules apply). Malformed records are broken in the
format's own ways: a value without the magic byte (plain JSON), one naming a schema id the
registry never gave, one whose payload does not decode with its schema.
"""

from __future__ import annotations

import json
import random
from datetime import date, datetime
from pathlib import Path

from loglake.core.config import Config, Dataset
from loglake.core.errors import ConfigError
from loglake.schemaregistry import SCHEMA_TYPES, client, protobuf, register, versions
from loglake.schemaregistry.resolve import KINDS, key_schemas, with_fields

SERIALIZERS = ("avro", "json-schema", "protobuf")
# An id no registry gave (ids count up from 1): what an ``unknown_schema_id`` record carries.
UNKNOWN_ID = 2_000_000_000


class Encoder:
    """Serializes a dataset's values (dicts, as its generator makes them) for one topic."""

    def __init__(self, config: Config, ds: Dataset, topic: str):
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext
        from google.protobuf import message_factory

        if ds.format not in SERIALIZERS:
            raise ConfigError(f"loglake produce writes {', '.join(SERIALIZERS)} so far, not {ds.format}",
                              key="format")
        self.ds, self.topic = ds, topic
        self.fields = ds.fields
        if ds.format == "protobuf":
            # The message class of the subject's version; the serializer registers the schema in
            # its own form (a descriptor), which the registry may hold as another version of it.
            self._message = message_factory.GetMessageClass(protobuf.parse(ds.registry.reader))
            self._serialize = ProtobufSerializer(self._message, client(config),
                                                 conf={"use.deprecated.format": False})
        else:
            # The schema the registry gave: the serializer finds its id (it registers nothing new).
            serializer = {"avro": AvroSerializer, "json-schema": JSONSerializer}[ds.format]
            self._serialize = serializer(schema_str=ds.registry.reader, schema_registry_client=client(config),
                                         conf={"auto.register.schemas": False})
        self._context = SerializationContext(topic, MessageField.VALUE)
        self._key = None
        if ds.key_format != "string":  # the key subject's newest version the dataset can read
            keys = [w for w in ds.registry.key_writers if w.refused is None]
            if not keys:
                raise ConfigError(f"dataset {ds.name}: key subject {ds.key_subject_name} has no version loglake "
                                  f"can write a key with ({'; '.join(w.refused for w in ds.registry.key_writers)})",
                                  key=f"datasets.{ds.name}.key_subject")
            serializer = {"avro": AvroSerializer, "json-schema": JSONSerializer}[ds.key_format]
            self._key = serializer(schema_str=keys[-1].schema_str, schema_registry_client=client(config),
                                   conf={"auto.register.schemas": False})
            self._key_context = SerializationContext(topic, MessageField.KEY)

    def encode(self, value: dict) -> bytes:
        return self._serialize(self._convert(value), self._context)

    def encode_key(self, key: str) -> bytes:
        """The record key (the key field's value, as text) in the dataset's key format."""
        if self._key is None:
            return key.encode()
        kind = self.fields[self.ds.key].type
        v: object = int(key) if kind in ("bigint", "int") else key
        return self._key(v if self.ds.registry.key_field is None else {self.ds.registry.key_field: v},
                         self._key_context)

    def _convert(self, value: dict) -> dict:
        """The generator's JSON-style values as the serializer takes them: (Avro) ISO text as a
        datetime for a timestamp field, as a date for a date field; a missing optional field null."""
        if self.ds.format == "protobuf":
            from google.protobuf import json_format

            return json_format.ParseDict({k: v for k, v in value.items() if v is not None}, self._message())
        if self.ds.format != "avro":
            return value
        out = {}
        for name, spec in self.fields.items():
            v = value.get(name)
            if isinstance(v, str) and spec.type in ("timestamp", "timestamp_ntz"):
                v = datetime.fromisoformat(v.replace("Z", "+00:00"))
            elif isinstance(v, str) and spec.type == "date":
                v = date.fromisoformat(v[:10])
            out[name] = v
        return out

    def malformed(self, rng: random.Random, value: dict) -> bytes:
        """A value the speed layer must quarantine, broken in one of the format's ways."""
        good = self.encode(value)
        kind = rng.choice(["no_magic_byte", "unknown_schema_id", "undecodable"])
        if kind == "no_magic_byte":
            return json.dumps(value).encode()
        if kind == "unknown_schema_id":
            return bytes([0]) + UNKNOWN_ID.to_bytes(4, "big") + good[5:]
        return good[:5] + b"\xff\xff\xff"  # a string's length that never ends: EOF while decoding


def encoder(config: Config, ds: Dataset, topic: str | None = None, schema_file: Path | None = None) -> Encoder:
    """An encoder of ``ds``'s values with its subject's newest version (after registering
    ``schema_file`` under the subject, when given)."""
    if not ds.in_registry:
        raise ConfigError(f"dataset {ds.name} is json (its topic holds JSON values): --format writes a Schema "
                          f"Registry format, for a dataset whose conf says format: avro", key="format")
    if schema_file is not None:
        text = Path(schema_file).read_text()
        try:
            KINDS[ds.format].parse(text)
        except (ValueError, KeyError) as e:
            raise ConfigError(f"{schema_file}: {e}", key="--schema") from None
        register(config, ds.subject_name, text, SCHEMA_TYPES[ds.format])
    writing = with_fields(ds, versions(config, ds.subject_name)[-1])
    if ds.key_format != "string":  # the keys too: the key subject's versions
        key_writers, key_field = key_schemas(config, ds)
        writing = writing.model_copy(update={"registry": writing.registry.model_copy(
            update={"key_writers": key_writers, "key_field": key_field})})
    return Encoder(config, writing, topic or ds.topic)


def debezium_change(config: Config, ds: Dataset):
    """What each record of a Debezium topic in Avro changes, for the audit
    (``loglake.kafka.log.Change``): its key's text and whether it deletes it, read with
    confluent-kafka's own deserializer and the registry, not with loglake's Spark decoder."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from loglake.kafka.log import key_text

    registry = client(config)
    keys, values = AvroDeserializer(registry), AvroDeserializer(registry)
    key_context = SerializationContext(ds.topic, MessageField.KEY)
    value_context = SerializationContext(ds.topic, MessageField.VALUE)

    def change(key: bytes | None, value: bytes | None) -> tuple[str | None, bool]:
        try:
            k = keys(key, key_context) if key is not None else None
        except Exception:  # noqa: BLE001 — a key that does not decode identifies no key (quarantined)
            return None, False
        if not isinstance(k, dict) or any(k.get(f) is None for f in ds.keys):
            return None, False
        if value is None:
            return key_text(k[f] for f in ds.keys), True
        try:
            v = values(value, value_context)
        except Exception:  # noqa: BLE001 — a value that does not decode is quarantined; it deletes nothing
            return key_text(k[f] for f in ds.keys), False
        return key_text(k[f] for f in ds.keys), isinstance(v, dict) and v.get("op") == "d"
    return change
