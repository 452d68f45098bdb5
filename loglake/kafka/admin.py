"""Talking to Kafka with confluent-kafka: topics, end offsets, consumer-group positions."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from loglake.core.config import Config, Dataset
from loglake.core.errors import (
    ConfigError, CoordinatorNotReadyError, KafkaAuthenticationError, KafkaUnavailableError, kafka_refusal,
    known_transient
)
from loglake.core.retrying import retry_transient

TIMEOUT = 15.0


def admin(config: Config) -> AdminClient:
    return AdminClient(config.kafka_client_conf())


def _close(consumer: Consumer) -> None:
    """Close ``consumer`` after handing its queued log lines to the "loglake.kafka" logger
    (librdkafka forwards them only when the client is polled)."""
    consumer.poll(0)
    consumer.close()


def _consumer(config: Config, group: str | None = None) -> Consumer:
    return Consumer(config.kafka_client_conf(**{
        "group.id": group or "loglake-admin",
        # Offsets are committed explicitly, and only by the code that owns the position.
        "enable.auto.commit": False,
        "enable.partition.eof": False,
    }))


def list_topics(config: Config, timeout: float = TIMEOUT) -> dict[str, int]:
    """Topic name → partition count (internal topics excluded)."""
    started = time.monotonic()
    try:
        client = admin(config)
    except KafkaException as e:
        raise client_setup_error(config, e) from None
    # With security, asked in short rounds: a refused login is an error event between rounds
    # (``refused``), and waiting out the whole timeout would not change the answer.
    rounds = min(timeout, 1.0) if config.kafka.security is not None else timeout
    try:
        while True:
            try:
                md = client.list_topics(timeout=rounds)
                break
            except KafkaException as e:
                client.poll(0)  # delivers the error events that say why
                refused(config, started)
                if time.monotonic() - started + rounds > timeout + 0.01:
                    raise KafkaUnavailableError(
                        f"Kafka at {config.kafka.bootstrap_servers} did not answer: {e}") from None
    finally:
        client.poll(0)  # hands librdkafka's queued log lines to the "loglake.kafka" logger
    return {t: len(m.partitions) for t, m in md.topics.items() if not t.startswith("__")}


def client_setup_error(config: Config, error: KafkaException) -> Exception:
    """What a client that could not even be created says: its TLS files, or (as before) Kafka."""
    text = error.args[0].str() if error.args and isinstance(error.args[0], KafkaError) else str(error)
    if config.kafka.security is not None and "ssl" in text.lower():
        made = ("; the embedded broker's CA is made by `loglake kafka start`"
                if config.kafka.security.ca_file is None else "")
        return ConfigError(f"the Kafka clients cannot use the CA file {config.kafka_ca_file}: {text}{made}",
                           key=f"profiles.{config.profile_name}.kafka.security.ca_file")
    return KafkaUnavailableError(f"Kafka at {config.kafka.bootstrap_servers} did not answer: {error}")


def refused(config: Config, since: float) -> None:
    """Raise ``KafkaAuthenticationError`` if the brokers refused this profile's login or TLS
    since ``since`` (``time.monotonic()``, as the clients' error events said); otherwise return."""
    reason = kafka_refusal(config.kafka.bootstrap_servers, since)
    if config.kafka.security is not None and reason:
        raise KafkaAuthenticationError(
            f"Kafka at {config.kafka.bootstrap_servers} refused loglake's client: {reason} "
            f"({config.kafka_credentials_hint()}). Check the user and password in the environment; the embedded "
            f"broker takes the password given to its latest `loglake kafka start`")


def ensure_topic(config: Config, ds: Dataset, topic: str | None = None, replication: int | None = None,
                 extra: dict[str, str] | None = None) -> str:
    """Create the dataset's topic with its partition count unless it exists; return its name.

    Replicated as the profile says (``kafka.replication_factor``, ``kafka.min_insync_replicas``):
    with acks=all, a record is acknowledged once that many replicas hold it."""
    name = topic or ds.topic
    existing = list_topics(config)
    if name in existing:
        if name == ds.topic:
            check_partitions(ds, existing[name])
        return name
    cfg = dict(extra or {})
    replication = replication or config.kafka.replication_factor
    if config.kafka.min_insync_replicas is not None:
        cfg.setdefault("min.insync.replicas", str(config.kafka.min_insync_replicas))
    if ds.kind == "changelog":
        # A changelog keeps the newest record per key forever (the log is the table).
        cfg.setdefault("cleanup.policy", "compact")
    client = admin(config)  # keep a reference: a collected client cancels its futures
    fut = client.create_topics([NewTopic(name, ds.partitions, replication, config=cfg)])[name]
    try:
        fut.result(timeout=TIMEOUT)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    # Metadata propagates asynchronously: wait until the topic is visible with its partitions.
    deadline = time.monotonic() + TIMEOUT
    while list_topics(config).get(name) != ds.partitions and time.monotonic() < deadline:
        time.sleep(0.1)
    return name


def log_bounds(config: Config, topic: str) -> dict[int, tuple[int, int]]:
    """Partition → (earliest retained offset, end offset) of ``topic``: what the log holds.

    (Kafka calls these the low and high watermark offsets; loglake keeps "watermark" for
    the batch watermark W_p of ``loglake.ledger.ranges``.)"""
    parts = list_topics(config).get(topic)
    if parts is None:
        raise KafkaUnavailableError(f"topic {topic!r} does not exist on {config.kafka.bootstrap_servers}")

    def attempt() -> dict[int, tuple[int, int]]:
        # A fresh client per attempt: one that asked while a partition's leader was dead
        # keeps answering "unknown partition" after the new leader is elected (librdkafka).
        c = _consumer(config)
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT / 3) for p in range(parts)}
        finally:
            _close(c)

    # Retried while a partition has no leader yet: a broker that just restarted, or a cluster
    # electing a new leader after one died (its controller notices only after the dead
    # broker's session timeout, ~9 s).
    return retry_transient(attempt, what=f"reading the log bounds of {topic}", seconds=2 * TIMEOUT)


def check_partitions(ds: Dataset, found: int) -> None:
    """A topic whose partition count differs from its dataset's ``partitions`` is refused:
    keys hash to partitions by their count, so after a change one key's changes live in two
    partitions whose offsets cannot order them (a changelog's newest value would be a guess),
    and ranges, watermarks and checkpoints name partitions that moved."""
    if found != ds.partitions:
        raise ConfigError(
            f"topic {ds.topic} has {found} partitions but the dataset declares {ds.partitions}; loglake orders a "
            f"key's changes by offset within its partition, which a changed partition count breaks. Make "
            f"partitions: {found} if the topic is right, or use a new topic (a new dataset) and backfill it "
            f"from the log", key=f"datasets.{ds.name}.partitions")


def dataset_bounds(config: Config, ds: Dataset) -> dict[int, tuple[int, int]]:
    """``log_bounds`` of the dataset's topic, after checking its partition count (``check_partitions``)."""
    bounds = log_bounds(config, ds.topic)
    check_partitions(ds, len(bounds))
    return bounds


def end_offsets(config: Config, topic: str) -> dict[int, int]:
    return {p: hi for p, (_lo, hi) in log_bounds(config, topic).items()}


def offsets_for_times(config: Config, topic: str, timestamp_ms: int,
                      bounds: dict[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """Per partition, the first offset whose record timestamp is >= ``timestamp_ms``
    (the end offset where no such record exists yet). ``bounds``: ``log_bounds(topic)``
    if the caller already read them."""
    bounds = bounds if bounds is not None else log_bounds(config, topic)
    c = _consumer(config)
    try:
        found = c.offsets_for_times([TopicPartition(topic, p, timestamp_ms) for p in bounds], timeout=TIMEOUT)
    finally:
        _close(c)
    return {tp.partition: (tp.offset if tp.offset >= 0 else bounds[tp.partition][1]) for tp in found}


def _retrying(call, what: str):
    """``call()``, retried while the group coordinator moves or is still loading
    ``__consumer_offsets`` (right after a broker starts), for up to ``TIMEOUT`` seconds.

    A retriable Kafka error still there at the end is a ``CoordinatorNotReadyError``
    (transient: a later attempt may succeed); any other Kafka error a ``KafkaUnavailableError``.
    """
    def attempt():
        try:
            return call()
        except KafkaException as e:
            if known_transient(e):
                raise CoordinatorNotReadyError(f"{what} failed: {e.args[0]}") from None
            raise KafkaUnavailableError(f"{what} failed: {e.args[0]}") from None

    return retry_transient(attempt, seconds=TIMEOUT, only=CoordinatorNotReadyError)


class PositionCommitter:
    """Records a consumer group's position (next offset to read, per partition) in Kafka,
    from a thread of its own: ``submit`` never waits, the newest position wins, and an
    outage only delays the record until the broker answers again.

    One long-lived consumer that never joins the group commits for it (the group never
    has live members: the speed layer reads with Spark's own consumers). Not the admin
    API's AlterConsumerGroupOffsets: librdkafka 2.x aborts the whole process (assertion
    ``eonce->refcnt > 0``) when an admin client that timed out on a coordinator request
    is destroyed, as happens while the broker is down
    (tests/reliability/test_speed_position.py).
    """

    RETRY_SECONDS = 1.0

    def __init__(self, config: Config, group: str, topic: str):
        self.config, self.group, self.topic = config, group, topic
        self._cond = threading.Condition()
        self._wanted: dict[int, int] = {}
        self._done: dict[int, int] = {}
        self._closing = False
        self._thread: threading.Thread | None = None

    def submit(self, offsets: dict[int, int]) -> None:
        if not offsets:
            return
        with self._cond:
            self._wanted = {**self._wanted, **offsets}
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"loglake-position-{self.topic}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = TIMEOUT) -> bool:
        """Wait until the newest submitted position is recorded; False if it was not in ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._done == self._wanted, timeout)

    def close(self, timeout: float = TIMEOUT) -> bool:
        """Record what was submitted (waiting up to ``timeout``), then end the thread and its
        consumer. True when everything submitted is recorded."""
        flushed = self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)  # still inside a commit to a silent broker: it ends after it
        return flushed

    def _run(self) -> None:
        consumer = _consumer(self.config, self.group)
        try:
            self._commit_loop(consumer)
        finally:
            _close(consumer)

    def _commit_loop(self, consumer: Consumer) -> None:
        failing = False
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or self._done != self._wanted)
                if self._closing:
                    return
                wanted = dict(self._wanted)
            try:
                consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(wanted.items())],
                                asynchronous=False)
                consumer.poll(0)  # hands librdkafka's queued log lines to the "loglake.kafka" logger
            except Exception as e:  # the broker away, the coordinator moving: try again
                if not failing:
                    print(f"loglake: could not record speed position (retrying until Kafka answers): "
                          f"{e.args[0] if isinstance(e, KafkaException) else e}", file=sys.stderr, flush=True)
                failing = True
                with self._cond:
                    self._cond.wait_for(lambda: self._closing, self.RETRY_SECONDS)
                continue
            if failing:
                print(f"loglake: speed position recorded again ({self.group})", file=sys.stderr, flush=True)
            failing = False
            with self._cond:
                self._done = wanted
                self._cond.notify_all()


def group_offsets(config: Config, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    """``group``'s committed position per partition (None where it has none)."""
    c = _consumer(config, group)
    try:
        tps = _retrying(lambda: c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT),
                        f"reading {group} offsets for {topic}")
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in tps}
    finally:
        _close(c)


@dataclass(frozen=True)
class PartitionState:
    partition: int
    earliest: int
    end: int
    speed_position: int | None


def dataset_state(config: Config, ds: Dataset) -> list[PartitionState]:
    """Per partition: retained range, end offset, and the speed layer's committed position."""
    bounds = log_bounds(config, ds.topic)
    pos = group_offsets(config, ds.consumer_group, ds.topic, len(bounds))
    return [PartitionState(p, lo, hi, pos.get(p)) for p, (lo, hi) in sorted(bounds.items())]


def record_timestamps(config: Config, topic: str, wanted: dict[int, list[int]],
                      timeout: float = TIMEOUT) -> dict[tuple[int, int], int]:
    """(partition, offset) → Kafka timestamp (ms) of the first record at or after that
    offset, for every offset in ``wanted`` (partition → offsets). Offsets with no record
    at or after them (only transaction markers or compacted-away offsets before the
    end) are absent. Committed records only: a record of an aborted transaction never counts."""
    return {k: m.timestamp()[1] for k, m in read_records(config, topic, wanted, timeout).items()}


def read_records(config: Config, topic: str, wanted: dict[int, list[int]], timeout: float = TIMEOUT,
                 read_on: int = 0):
    """(partition, offset) → the first record (a confluent-kafka ``Message``) at or after that
    offset, for every offset in ``wanted`` (partition → offsets); offsets with no record at
    or after them are absent. One consumer reads them all, reading on to the next offset when
    it is at most ``read_on`` records ahead, seeking to it otherwise. Committed records only
    (read_committed), as both layers read them: a record of an aborted transaction is never
    the record at an offset."""
    todo = {p: sorted(set(offs)) for p, offs in wanted.items() if offs}
    if not todo:
        return {}
    c = Consumer(config.kafka_client_conf(**{
        "group.id": "loglake-status",  # never joins nor commits: partitions are assigned
        "enable.auto.commit": False,
        # The end of a partition tells that no record follows the offset.
        "enable.partition.eof": True,
        # An offset deleted meanwhile: the oldest record that is still there.
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # A bounded prefetch (not the default of up to 64 MiB): consume() finds a batch
        # waiting instead of one fetch's worth (with queued.min.messages=1 each call waited
        # for its timeout, and a read of 1 KB records did not finish in 30 s).
        "queued.min.messages": 10_000,
        "queued.max.messages.kbytes": 16 * 1024,
        # Small fetches: after a seek only the next few records are wanted, and a fetch of
        # well-compressed records decompresses many times its size.
        "fetch.max.bytes": 1024 * 1024,
        "max.partition.fetch.bytes": 64 * 1024,
    }))
    found: dict[tuple[int, int], object] = {}
    try:
        c.assign([TopicPartition(topic, p, offs[0]) for p, offs in todo.items()])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            # consume() waits for num_messages or the timeout: a short one, so that a partial
            # batch (all a fetch brought) is handled at once, not after half a second.
            for msg in c.consume(num_messages=1000, timeout=0.05):
                p = msg.partition()
                targets = todo.get(p)
                if not targets:
                    continue
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaUnavailableError(f"reading {topic}[{p}] at offset {targets[0]} failed: {err}")
                if err is not None:  # the end: no record at or after the offsets left
                    targets.clear()
                # Records arrive in offset order, so the first one at or after a target is its record
                # (also one fetched before the seek below).
                popped = False
                while targets and err is None and msg.offset() >= targets[0]:
                    found[p, targets.pop(0)] = msg
                    popped = True
                if not targets:
                    del todo[p]
                    c.pause([TopicPartition(topic, p)])
                elif popped and msg.offset() + 1 + read_on < targets[0]:
                    with contextlib.suppress(KafkaException):  # only a shortcut: reading on finds it too
                        c.seek(TopicPartition(topic, p, targets[0]))
    finally:
        _close(c)
    if todo:
        raise KafkaUnavailableError(f"no answer reading {topic} partitions {sorted(todo)} within {timeout:.0f}s")
    return found


def topic_configs(config: Config, topic: str, names: tuple[str, ...] = ("retention.ms", "cleanup.policy"),
                  timeout: float = TIMEOUT) -> dict[str, str]:
    """The values of the topic settings ``names`` (the broker default where not set on the topic)."""

    client = admin(config)  # keep a reference: a collected client cancels its futures
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = client.describe_configs([res], request_timeout=timeout)[res].result(timeout=timeout)
    except KafkaException as e:
        raise KafkaUnavailableError(f"reading the settings of topic {topic!r} failed: {e.args[0]}") from None
    return {n: entries[n].value for n in names if n in entries}
