"""``loglake erase``: a key forgotten in every table, every table version and every later read
of the log (issue 49), against a real broker, Spark and Delta.

What is checked is read without loglake's reader: the tables and each of their versions with
delta-rs, every Parquet file under the lake with pyarrow, the log with confluent-kafka's own
consumer. The records are written by confluent-kafka's producer, not loglake's.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from deltalake import DeltaTable

from loglake.batch.planning import plan_backfill, plan_batch
from loglake.erasure.erase import erase, purge_due
from loglake.kafka.admin import ensure_topic, log_bounds
from loglake.core.processes import wait_for
from loglake.leases import holders, stream_lease, writer
from loglake.ledger.erasures import erasures, subject
from loglake.lifecycle.rebuild_job import rebuild
from loglake.lifecycle.replay_job import replay
from loglake.ops.audit import audit_dataset
from loglake.ops.diff import diff_range
from loglake.ops.status import dataset_status, format_status
from loglake.quality.pipeline import recompute_and_publish
from loglake.serving import arrow
from loglake.speed.stream import run_speed, start_stream
from loglake.tables import dataset_tables
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

USER = 987654321          # job_views: the erased user (user_id, also the record key)
COMPANY = "c9876543210"   # company_ceos: the erased company (its key; long: no file name holds it by chance)
OTHERS = [11, 12, 13, 14, 15]


def view(user: int, n: int, **over) -> dict:
    return {"view_id": str(uuid.UUID(int=user * 1000 + n)), "user_id": user, "job_id": 100 + n,
            "viewed_at": "2026-11-30T10:00:00Z", "source": "search", "duration_ms": 1000 + n, **over}


def ceo(company: str, n: int) -> dict:
    return {"company_id": company, "company": f"Company {company}", "ceo": f"CEO number {n}",
            "since": f"2026-0{1 + n % 8}-01T00:00:00Z"}


def send(config, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    p = Producer(config.kafka_client_conf(**{"acks": "all"}))
    for k, v in records:
        p.produce(topic, key=k, value=v)
    assert p.flush(30) == 0


def views_wave(users, n0: int, count: int) -> list[tuple[bytes, bytes]]:
    return [(str(u).encode(), json.dumps(view(u, n0 + i)).encode()) for u in users for i in range(count)]


def erased_user_junk(n0: int) -> list[tuple[bytes, bytes]]:
    """Records of the erased user that are quarantined: not JSON, a wrong type, out of domain."""
    k = str(USER).encode()
    return [(k, b'{"user_id": %d, "view_id": "broken' % USER),
            (k, json.dumps(view(USER, n0, user_id=str(USER))).encode()),
            (k, json.dumps(view(USER, n0 + 1, duration_ms=-5)).encode())]


def ceos_wave(companies, n0: int) -> list[tuple[bytes, bytes]]:
    return [(c.encode(), json.dumps(ceo(c, n0 + i)).encode()) for i in range(2) for c in companies]


def positions_of(path: str, column: str, value) -> set[tuple[int, int]]:
    t = DeltaTable(path).to_pyarrow_table(columns=["_partition", "_offset", column])
    return {(p, o) for p, o, v in zip(*(t.column(c).to_pylist() for c in ("_partition", "_offset", column)))
            if v == value}


def rows_without(path: str, column: str, value) -> list[tuple]:
    """A table's rows other than the subject's, as sorted tuples (the comparison of 'unchanged')."""
    t = DeltaTable(path).to_pyarrow_table()
    names = t.column_names
    text = str(value).encode()

    def theirs(r: dict) -> bool:  # a quarantined record holds the subject in its raw bytes
        return r.get(column) == value or any(isinstance(r.get(c), bytes) and text in r[c] for c in ("key", "value"))

    return sorted(tuple(json.dumps(r[c], default=str) for c in names) for r in t.to_pylist() if not theirs(r))


def _cells(array: pa.Array):
    """Every leaf value of an Arrow array, through structs, lists and maps."""
    t = array.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _cells(array.field(i))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        yield from _cells(array.flatten())
    elif pa.types.is_dictionary(t):
        yield from _cells(array.dictionary)
    else:
        yield from array.to_pylist()


def files_holding(root: Path, text: str, number: int | None = None) -> list[str]:
    """Every Parquet file under ``root`` with a cell that holds ``text`` (strings, bytes, JSON
    statistics) or equals ``number``."""
    out = []
    for f in sorted(root.rglob("*.parquet")):
        table = pq.read_table(f)
        for col in table.columns:
            for cell in _cells(col.combine_chunks() if col.num_chunks else pa.array([], col.type)):
                if cell is None:
                    continue
                if isinstance(cell, (bytes, bytearray)):
                    cell = bytes(cell).decode("utf-8", "replace")
                if (isinstance(cell, str) and text in cell) or (
                        number is not None and isinstance(cell, int) and not isinstance(cell, bool) and cell == number):
                    out.append(str(f.relative_to(root)))
                    break
            else:
                continue
            break
    return out


def versions_holding(path: str, column: str, value) -> tuple[list[int], list[int]]:
    """(readable versions whose rows hold the subject, versions that cannot be read)."""
    holding, unreadable = [], []
    for v in range(DeltaTable(path).version() + 1):
        try:
            t = DeltaTable(path, version=v).to_pyarrow_table()
        except Exception:  # noqa: BLE001 — a purged version: its files are gone
            unreadable.append(v)
            continue
        if column in t.column_names and value in t.column(column).to_pylist():
            holding.append(v)
        elif "value" in t.column_names and any(x is not None and str(value).encode() in x
                                               for x in t.column("value").to_pylist()):
            holding.append(v)
    return holding, unreadable


def log_has(config, topic: str, key: bytes) -> list[tuple[int, int, bool]]:
    """(partition, offset, is a tombstone) of every record of ``key`` in ``topic``, by Kafka's own consumer."""
    c = Consumer(config.kafka_client_conf(**{"group.id": f"t-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                                             "enable.partition.eof": True}))
    bounds = log_bounds(config, topic)
    c.assign([TopicPartition(topic, p, lo) for p, (lo, hi) in bounds.items() if hi > lo])
    pending = {p for p, (lo, hi) in bounds.items() if hi > lo}
    out = []
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            pending.discard(m.partition())
            continue
        if m.key() == key:
            out.append((m.partition(), m.offset(), m.value() is None))
        if m.offset() >= bounds[m.partition()][1] - 1:
            pending.discard(m.partition())
    c.close()
    return out


def stream_until(spark, config, ds, done) -> None:
    query, _ = start_stream(spark, config, ds)
    try:
        wait_for(done, 120, f"{ds.name}'s stream to land the records")
    finally:
        query.stop()


def landed(config, ds, n: int):
    def check() -> bool:
        speed = DeltaTable(config.table_path(ds, "speed")).to_pyarrow_table(columns=["_offset"]).num_rows
        quarantine = DeltaTable(config.table_path(ds, "quarantine")).to_pyarrow_table(
            columns=["_layer"]).column("_layer").to_pylist().count("speed")
        return speed + quarantine >= n
    return check


def test_an_erased_key_is_gone_from_every_table_and_version_and_stays_gone(spark, make_config, tmp_path):
    config = make_config(topic_suffix="erase", erasure={"purge_after": "24h"},
                         datasets={"company_ceos": {"history": "scd2"}})
    views, ceos = config.dataset("job_views"), config.dataset("company_ceos")
    for ds in (views, ceos):
        ensure_topic(config, ds)
    # Wave 1 (batch): no record of the subjects in job_views; company_ceos has them.
    send(config, views.topic, views_wave(OTHERS, 0, 4))
    send(config, ceos.topic, ceos_wave(["c1", "c2", COMPANY], 0))
    for ds in (views, ceos):
        run_speed(spark, config, ds, available_now=True)
        recompute_and_publish(spark, config, ds, plan_batch(config, ds), f"first-{ds.name}")
    clean_views_version = DeltaTable(config.table_path(views, "batch")).version()
    # Wave 2 (speed, then batch): the subject's records, valid and quarantined, among others'.
    send(config, views.topic, views_wave(OTHERS + [USER], 10, 3) + erased_user_junk(50))
    send(config, ceos.topic, ceos_wave(["c1", COMPANY, "c4"], 10))
    for ds in (views, ceos):
        run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ceos, plan_batch(config, ceos), "second-ceos")
    before = {(ds.name, t.layer): rows_without(t.path, col, val) for ds, col, val in
              ((views, "user_id", USER), (ceos, "company_id", COMPANY)) for t in dataset_tables(config, ds)
              if DeltaTable.is_deltatable(t.path)}
    assert positions_of(config.table_path(views, "speed"), "user_id", USER)
    assert positions_of(config.table_path(ceos, "latest"), "company_id", COMPANY)

    # Erase both while the streams run and more records (of others) arrive.
    results, errors = {}, []
    leases = ExitStack()
    streams = [start_stream(spark, config, ds, lease=leases.enter_context(stream_lease(config, ds.name)))[0]
               for ds in (views, ceos)]
    try:
        def more() -> None:
            for i in range(3):
                send(config, views.topic, views_wave(OTHERS, 100 + 10 * i, 2))
                time.sleep(0.5)

        producer = threading.Thread(target=more)
        producer.start()
        for ds, key in ((views, str(USER)), (ceos, COMPANY)):
            try:
                results[ds.name] = erase(config, ds, key, reason="GDPR Art. 17 request #1", requested_by="dpo@test")
            except Exception as e:  # noqa: BLE001 — reported below, after the streams stop
                errors.append(e)
        producer.join()
        wait_for(lambda: all(q.lastProgress is not None for q in streams), 60, "the streams' progress")
        time.sleep(3)  # a micro-batch or two after the erasures
    finally:
        for q in streams:
            q.stop()
        leases.close()
    assert not errors, errors
    rv, rc = results["job_views"], results["company_ceos"]
    # job_views: 3 valid records and 3 quarantined ones; company_ceos: 4 changes and the tombstone.
    assert rv.offsets == 6 and rc.offsets == 5, (rv, rc)
    assert rc.tombstone is not None  # the changelog's key got its tombstone
    # No key in the printed lines, the ledger, the status.
    for r in (rv, rc):
        assert str(USER) not in "\n".join(r.lines()) and COMPANY not in "\n".join(r.lines())
    recorded = erasures(config)
    assert {e.subject for e in recorded} == {subject("job_views", "user_id", str(USER)),
                                             subject("company_ceos", "company_id", COMPANY)}
    assert all(e.state == "applied" for e in recorded)
    status = "\n".join(format_status(views, dataset_status(config, views)))
    assert "erasures: 1 recorded" in status and str(USER) not in status

    # No row of the subjects in any table's current version; the others' rows as before
    # (plus the records that arrived meanwhile).
    for ds, col, val in ((views, "user_id", USER), (ceos, "company_id", COMPANY)):
        for t in dataset_tables(config, ds):
            if not DeltaTable.is_deltatable(t.path):
                continue
            current = DeltaTable(t.path).to_pyarrow_table()
            if col in current.column_names:
                assert val not in current.column(col).to_pylist(), (t.name, "current version")
            if "value" in current.column_names:
                assert not any(v is not None and str(val).encode() in v for v in current.column("value").to_pylist())
            after = rows_without(t.path, col, val)
            assert set(before[(ds.name, t.layer)]) <= set(after), t.name
    assert not arrow.read(config, "job_views").filter(pa.compute.equal(
        arrow.read(config, "job_views").column("user_id"), USER)).num_rows

    # The purge, once due: no version of any table and no Parquet file under the lake holds the keys.
    assert purge_due(config) == []  # not due yet
    done = purge_due(config, now=datetime.now(timezone.utc) + timedelta(hours=25))
    assert {d["dataset"] for d in done} == {"job_views", "company_ceos"}
    assert all(e.state == "purged" for e in erasures(config))
    for ds, col, val in ((views, "user_id", USER), (ceos, "company_id", COMPANY)):
        for t in dataset_tables(config, ds):
            if DeltaTable.is_deltatable(t.path):
                holding, _unreadable = versions_holding(t.path, col, val)
                assert not holding, (t.name, holding)
    lake = Path(config.lake_root)
    assert files_holding(lake, COMPANY) == []
    assert files_holding(lake, str(USER), USER) == []
    # The other rows' history stays readable: the batch table's version before the subject came.
    old = DeltaTable(config.table_path(views, "batch"), version=clean_views_version).to_pyarrow_table()
    assert old.num_rows == len(OTHERS) * 4

    # The log still holds the records (Kafka keeps an events topic's bytes): every later read skips them.
    assert len(log_has(config, views.topic, str(USER).encode())) == 6
    recompute_and_publish(spark, config, views, plan_batch(config, views), "after-erase")
    offsets = sorted(o for _p, o, _t in log_has(config, views.topic, str(USER).encode()))
    part = log_has(config, views.topic, str(USER).encode())[0][0]
    recompute_and_publish(spark, config, views, plan_backfill(
        config, views, ranges=[f"{part}:{offsets[0]}-{offsets[-1] + 1}"]), "backfill-erased")
    replay(spark, config, views, "replay-after-erase")
    rebuild(spark, config, views, "batch", "rebuild-after-erase")
    rebuild(spark, config, ceos, "latest", "rebuild-ceos-latest")
    run_speed(spark, config, views, available_now=True)
    for ds, col, val in ((views, "user_id", USER), (ceos, "company_id", COMPANY)):
        for t in dataset_tables(config, ds):
            if DeltaTable.is_deltatable(t.path):
                current = DeltaTable(t.path).to_pyarrow_table()
                if col in current.column_names:
                    assert val not in current.column(col).to_pylist(), (t.name, "after recomputes")
        audit = audit_dataset(config, ds, record=False)
        assert audit.ok, audit
        assert audit.erased >= 1
    d = diff_range(config, views, part, 0, log_bounds(config, views.topic)[part][1])
    assert d.erased >= 3
    # Compacted topic: the key's tombstone is in the log, after its records.
    records = log_has(config, ceos.topic, COMPANY.encode())
    assert records[-1][2] and records[-1][1] == rc.tombstone[1]


def test_an_erasure_and_a_batch_run_in_either_order_resurrect_nothing(spark, make_config, tmp_path):
    config = make_config(topic_suffix="erase-race", erasure={"purge_after": "0"})
    views = config.dataset("job_views")
    ensure_topic(config, views)
    send(config, views.topic, views_wave(OTHERS + [USER], 0, 3))
    run_speed(spark, config, views, available_now=True)
    batch_path = config.table_path(views, "batch")

    # A batch run holds the writer's lease when the erasure comes: the erasure waits for it.
    started = threading.Event()
    out: dict = {}

    def batch_run(name: str) -> None:
        with writer(config, views.name, "batch", name):
            started.set()
            time.sleep(1.0)
            out[name] = recompute_and_publish(spark, config, views, plan_batch(config, views), name)

    t = threading.Thread(target=batch_run, args=("batch-first",))
    t.start()
    started.wait(30)
    result = erase(config, views, str(USER), reason="GDPR request, batch first")
    t.join()
    assert USER not in DeltaTable(batch_path).to_pyarrow_table(columns=["user_id"]).column("user_id").to_pylist()
    assert result.purged is not None  # purge_after 0: purged at once
    assert files_holding(Path(config.lake_root), str(USER), USER) == []

    # The erasure holds the lease when a batch run starts: the run waits, then skips the records.
    send(config, views.topic, views_wave([USER] + OTHERS, 20, 2))  # new data of the key: after the request
    new = log_has(config, views.topic, str(USER).encode())
    run_speed(spark, config, views, available_now=True)
    ready = threading.Event()

    key_file = tmp_path / "key"
    key_file.write_text(f"{USER}\n")

    def erase_second() -> None:  # by the command, the key from a file: not in the process list
        ready.set()
        out["erase"] = run_loglake(config, "erase", views.name, "--key-file", str(key_file), "--reason",
                                   "GDPR request, erasure first")

    e = threading.Thread(target=erase_second)
    e.start()
    ready.wait(30)
    wait_for(lambda: holders(config, [views.name]).get(views.name) is not None or "erase" in out, 30,
             "the erasure's lease")
    with writer(config, views.name, "batch", "batch-second"):
        recompute_and_publish(spark, config, views, plan_batch(config, views), "batch-second")
    e.join()
    said = out["erase"].stdout + out["erase"].stderr
    assert out["erase"].returncode == 0, said
    assert "2 record(s) erased" in said and str(USER) not in said, said
    assert USER not in DeltaTable(batch_path).to_pyarrow_table(columns=["user_id"]).column("user_id").to_pylist()
    assert len(new) == 5
    audit = audit_dataset(config, views, record=False)
    assert audit.ok and audit.erased == 5, audit
