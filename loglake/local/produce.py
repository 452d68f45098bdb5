"""Generate realistic events (and, on request, malformed ones) and produce them to Kafka."""

from __future__ import annotations

import functools
import json
import random
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterator

from confluent_kafka import KafkaException, Producer
from tqdm import tqdm

from loglake.core.config import Config, Dataset
from loglake.kafka.admin import ensure_topic

Record = tuple[bytes | None, bytes | None]  # (key, value)
if TYPE_CHECKING:
    from loglake.schemaregistry.serializers import Encoder

def _iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _field_value(spec, rng: random.Random, now: datetime):
    """A valid value of a field, from its type and rules."""
    if spec.enum:
        return rng.choice(spec.enum)
    if spec.type in ("long", "bigint", "int"):
        lo, hi = int(spec.min if spec.min is not None else 0), int(spec.max if spec.max is not None else 10**6)
        return rng.randint(lo, hi)
    if spec.type in ("double", "float"):
        return rng.uniform(spec.min or 0.0, spec.max if spec.max is not None else 1000.0)
    if spec.type == "boolean":
        return rng.random() < 0.5
    if spec.type in ("timestamp", "timestamp_ntz"):
        return _iso(now)
    if spec.type != "string":  # a registry field of another type (nested, decimal, ...): null when it may be
        if not spec.required:
            return None
        raise ValueError(f"cannot generate a value of type {spec.type}: give the dataset a sample generator")
    return uuid.UUID(int=rng.getrandbits(128), version=4).hex


def _generic(ds: Dataset) -> Callable[[random.Random, datetime], tuple[str, dict]]:
    """A schema-driven generator for datasets without a hand-written one."""
    def gen(rng: random.Random, now: datetime) -> tuple[str, dict]:
        value = {name: _field_value(spec, rng, now) for name, spec in ds.fields.items()}
        return str(value[ds.key]), value
    return gen


def _with_added_fields(ds: Dataset, gen: Callable) -> Callable:
    """A dataset's own generator (``sample(rng, now) -> (key, value)`` in its code file), plus a
    value for each field the dataset's schema gained since it was written (a schema change:
    ``loglake.schema_versions``)."""
    def more(rng: random.Random, now: datetime) -> tuple[str, dict | None]:
        key, value = gen(rng, now)
        if value is not None:
            for name, spec in ds.fields.items():
                if name not in value:
                    value[name] = _field_value(spec, rng, now)
        return key, value
    return more


def malformed(ds: Dataset, rng: random.Random, key: str, value: dict) -> Record:
    """Break a good record in one of the ways the speed layer must quarantine."""
    name = rng.choice(list(ds.fields))
    spec = ds.fields[name]
    kinds = ["bad_json", "missing_field", "wrong_type", "not_an_object"]
    if ds.kind == "events":
        kinds.append("null_value")
    if spec.enum or spec.min is not None or spec.max is not None:
        kinds.append("out_of_domain")
    kind = rng.choice(kinds)
    bad = dict(value)
    if kind == "bad_json":
        return key.encode(), json.dumps(value).encode()[:-3]
    if kind == "null_value":
        return key.encode(), None
    if kind == "not_an_object":
        return key.encode(), json.dumps(list(value.values())).encode()
    if kind == "missing_field":
        bad.pop(name)
    elif kind == "wrong_type":
        # A string where a number belongs, a number where a string belongs.
        bad[name] = str(bad[name]) if spec.type in ("long", "double", "boolean") else 12345
    elif kind == "out_of_domain":
        bad[name] = ("carrier_pigeon" if spec.type == "string" else
                     (spec.min - 1 if spec.min is not None else spec.max + 1))
        if spec.type == "long":
            bad[name] = int(bad[name])
    return key.encode(), json.dumps(bad).encode()


@dataclass
class ProduceResult:
    """What a read_committed consumer sees of a produce run (``records``, ``good``, ``bad``,
    ``tombstones``, ``by_partition``, ``last_value``), and what it never sees: ``aborted``
    records of ``aborted_transactions`` (a transactional run)."""

    records: int = 0
    good: int = 0
    bad: int = 0
    tombstones: int = 0
    transactions: int = 0
    aborted_transactions: int = 0
    aborted: int = 0
    seconds: float = 0.0
    by_partition: dict[int, int] = field(default_factory=dict)
    last_value: dict[str, dict | None] = field(default_factory=dict)  # changelog: key → newest value

    @property
    def rate(self) -> float:
        """Records written per second, those of aborted transactions too."""
        return (self.records + self.aborted) / self.seconds if self.seconds > 0 else 0.0


def generate(ds: Dataset, count: int, bad_fraction: float = 0.0, seed: int | None = None,
             encoder: "Encoder | None" = None) -> Iterator[tuple[Record, bool]]:
    """``count`` records of ``ds``: exactly ``round(count * bad_fraction)`` malformed ones.
    ``encoder``: values in a Schema Registry format (``loglake.schemaregistry.serializers``), else JSON."""
    for key, value, ok, _obj in _records(ds, count, bad_fraction, seed, encoder):
        yield (key, value), ok


def _records(ds: Dataset, count: int, bad_fraction: float, seed: int | None,
             encoder: "Encoder | None") -> Iterator[tuple[bytes | None, bytes | None, bool, tuple]]:
    """(key, value, good, (the key as text, the value as a dict)) of each record ``generate`` makes."""
    if not 0.0 <= bad_fraction <= 1.0:
        raise ValueError(f"bad_fraction must be within [0, 1], found {bad_fraction}")
    rng = random.Random(seed)
    sample = ds.code_function("sample")  # the dataset's own generator, beside its conf
    gen = _with_added_fields(ds, sample) if sample is not None else _generic(ds)
    n_bad = round(count * bad_fraction)
    bad_at = set(rng.sample(range(count), n_bad)) if n_bad else set()
    now = datetime.now(timezone.utc)
    for i in range(count):
        key, value = gen(rng, now)
        if i in bad_at:
            if value is None:  # a tombstone cannot be broken further; break a fresh record
                key, value = gen(rng, now)
                while value is None:
                    key, value = gen(rng, now)
            if encoder is not None:
                yield encoder.encode_key(key), encoder.malformed(rng, value), False, (key, None)
            else:
                k, v = malformed(ds, rng, key, value)
                yield k, v, False, (key, None)
        elif value is None:
            yield key.encode() if encoder is None else encoder.encode_key(key), None, True, (key, None)
        elif encoder is None:
            yield key.encode(), json.dumps(value).encode(), True, (key, value)
        else:
            yield encoder.encode_key(key), encoder.encode(value), True, (key, value)


def produce(config: Config, ds: Dataset, count: int, *, rate: float | None = None, bad_fraction: float = 0.0,
            seed: int | None = None, topic: str | None = None, progress: bool = False,
            acked: list[tuple[int, int]] | None = None, malformed: list[tuple[int, int]] | None = None,
            transactional: bool = False, transaction_size: int = 100, abort_every: int = 3,
            encoder: "Encoder | None" = None, debezium=None) -> ProduceResult:
    """Produce ``count`` generated records to the dataset's topic (created if missing).

    Idempotent producer: ``acks=all`` + ``enable.idempotence`` so a retry never
    duplicates a record in the log. ``rate`` caps records/s. Returns counts and timing;
    ``acked`` (if given) receives ``(partition, offset)`` of every acknowledged record a
    read_committed consumer sees; ``malformed`` (if given) those of them it made malformed (the
    producer's own account, for a check that does not trust loglake's validation).

    ``transactional``: as an exactly-once producer (Kafka Streams, Flink) writes, in
    transactions of ``transaction_size`` records, every ``abort_every``-th one aborted after
    its records reached the log (0: none). The log then holds commit/abort markers and
    aborted records: offsets no read_committed consumer is given. The result counts only
    the committed records (``aborted`` the others).

    ``encoder``: values in a Schema Registry format, written by confluent-kafka's serializer
    (``loglake.schemaregistry.serializers.encoder``); malformed ones are then broken in that
    format's ways (no magic byte, an unknown schema id, a payload that does not decode).

    ``debezium``: a Debezium change stream of ``ds``'s table instead, in that encoding
    (``loglake.local.debezium.encoding``): ``last_value`` then holds each key's newest ``after``
    (None once deleted), ``tombstones`` the null values that follow the deletes.
    """
    if debezium is not None and encoder is not None:
        raise ValueError("give encoder (values of the dataset's own generator) or debezium (a change stream), "
                         "not both")
    # By confluent-kafka's serializer, the subject's newest version.
    if encoder is None and debezium is None and ds.in_registry:
        from loglake.schemaregistry.serializers import encoder as registry_encoder

        encoder = registry_encoder(config, ds, topic)
    if encoder is not None:
        ds = encoder.ds  # its fields read from the registry
    if transactional and transaction_size < 1:
        raise ValueError(f"transaction_size must be at least 1, found {transaction_size}")
    if transactional and abort_every < 0:
        raise ValueError(f"abort_every must be 0 (never) or more, found {abort_every}")
    topic = ensure_topic(config, ds, topic)
    settings = {
        # librdkafka does not default to idempotence; without it a retried send can duplicate.
        "enable.idempotence": True,
        "acks": "all",
        # Batch for throughput: a few ms of linger fills batches at high rates.
        "linger.ms": 20,
        "compression.type": "lz4",
    }
    if transactional:
        # A fresh id per run: no other producer of this id is fenced, none fences this one.
        settings["transactional.id"] = f"loglake-produce-{ds.name}-{uuid.uuid4().hex[:12]}"
    producer = Producer(config.kafka_client_conf(**settings))
    result = ProduceResult()
    errors: list[str] = []
    # Acknowledged records of the open transaction: counted once it commits.
    pending: list[tuple[int, int, bool]] = []

    def on_delivery(err, msg, ok: bool = True):
        if err is not None:
            errors.append(str(err))
        elif transactional:
            pending.append((msg.partition(), msg.offset(), ok))
        else:
            _count_delivered(result, [(msg.partition(), msg.offset(), ok)], acked, malformed)

    # Per record of the open transaction: (key, value, ok, value dict), counted when it commits.
    in_txn: list[tuple[bytes | None, bytes | None, bool, tuple]] = []

    def end_transaction(abort: bool) -> None:
        if abort:
            producer.flush(60)  # in the log first: an abort purges what is still queued
            producer.abort_transaction(60)
            result.aborted_transactions += 1
            result.aborted += len(in_txn)
            pending.clear()
        else:
            producer.commit_transaction(60)  # flushes: every delivery report is in
            for _key, value, ok, obj in in_txn:
                _count_record(result, ds, obj, ok, tombstone=value is None)
            _count_delivered(result, pending, acked, malformed)
            pending.clear()
        result.transactions += 1
        in_txn.clear()

    bar = None
    if progress:
        bar = tqdm(total=count, unit="rec", file=sys.stderr, desc=f"produce {ds.name}")
    start = time.monotonic()
    try:
        if transactional:
            producer.init_transactions(60)
            producer.begin_transaction()
        records = (debezium.records(count, bad_fraction, seed) if debezium is not None
                   else _records(ds, count, bad_fraction, seed, encoder))
        for i, (key, value, ok, obj) in enumerate(records):
            while True:
                try:
                    producer.produce(topic, key=key, value=value, on_delivery=functools.partial(on_delivery, ok=ok))
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.05)
            producer.poll(0)
            if transactional:
                in_txn.append((key, value, ok, obj))
                if len(in_txn) == transaction_size or i == count - 1:
                    n = result.transactions + 1
                    end_transaction(abort=bool(abort_every) and n % abort_every == 0)
                    if i < count - 1:
                        producer.begin_transaction()
            else:
                _count_record(result, ds, obj, ok, tombstone=value is None)
            if bar is not None and (i + 1) % 1000 == 0:
                bar.update(1000)
            if rate:
                ahead = (i + 1) / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        remaining = producer.flush(60)
        if remaining:
            raise KafkaException(f"{remaining} records were not delivered within 60 s")
    finally:
        if bar is not None:
            bar.update(count - bar.n)
            bar.close()
    result.seconds = time.monotonic() - start
    if errors:
        raise KafkaException(f"{len(errors)} records failed delivery; first: {errors[0]}")
    return result


def _count_record(result: ProduceResult, ds: Dataset, record: tuple[str, dict | None], ok: bool,
                  tombstone: bool) -> None:
    """Count one record; ``record``: its key's text and the row it leaves (None: deleted), which
    for a Debezium delete (not a tombstone itself: its value is the envelope) is None too."""
    key, value = record
    result.records += 1
    if ok:
        result.good += 1
        if tombstone:
            result.tombstones += 1
        if ds.kind == "changelog":
            result.last_value[key] = value
    else:
        result.bad += 1


def _count_delivered(result: ProduceResult, delivered: list[tuple[int, int, bool]],
                     acked: list[tuple[int, int]] | None, malformed: list[tuple[int, int]] | None) -> None:
    for p, o, ok in delivered:
        result.by_partition[p] = result.by_partition.get(p, 0) + 1
        if acked is not None:
            acked.append((p, o))
        if malformed is not None and not ok:
            malformed.append((p, o))
