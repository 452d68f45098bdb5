"""Fault scenarios: loglake's exactness under crashes, run at any scale.

Each scenario takes a ``loglake.testing.Lab`` (a broker, a Spark session and per-scenario
configs) and a ``scale`` and returns an ``Outcome``: records, faults injected, offsets lost
and duplicated, recovery seconds per fault. ``tests/reliability`` runs them small inside
``make test``; ``soak/run.py`` (``make soak``) runs them at full size and writes the figures.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loglake.kafka.admin import end_offsets
from loglake.testing import (Lab, caught_up, command_env, config_environment, count_exactly_once, loglake_command,
                             run_loglake, sigkill)


@dataclass
class Outcome:
    id: str
    title: str
    records: int = 0
    faults: int = 0
    lost: int = 0
    duplicated: int = 0
    recovery_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0
    command: str = ""
    notes: list[str] = field(default_factory=list)  # what went wrong (a scenario passes with none)
    info: list[str] = field(default_factory=list)   # what happened, for the results file

    @property
    def exact(self) -> bool:
        return self.lost == 0 and self.duplicated == 0

    @property
    def passed(self) -> bool:
        return self.exact and not self.notes

    def to_dict(self) -> dict:
        rec = self.recovery_seconds
        return {"id": self.id, "title": self.title, "records": self.records, "faults": self.faults,
                "lost": self.lost, "duplicated": self.duplicated, "exact": self.exact,
                "passed": self.passed,
                "recovery_seconds": {"max": max(rec) if rec else None,
                                     "median": float(np.median(rec)) if rec else None, "each": rec},
                "seconds": round(self.seconds, 1), "command": self.command, "notes": self.notes,
                "info": self.info}


def speed_kills(lab: Lab, records: int, kills: int, *, seed: int = 1, bad_fraction: float = 0.01,
                rate: float | None = None) -> Outcome:
    """R1: SIGKILL the speed job ``kills`` times at random moments while ``records`` arrive
    over the dataset's partitions (6, or 2 under the test suite); then every offset must be in
    speed ∪ quarantine exactly once."""
    from loglake.core.processes import descendants, wait_for
    from loglake.kafka.admin import group_offsets
    from loglake.local.produce import produce
    from loglake.speed.control import SpeedStream

    started = time.monotonic()
    config = lab.config(speed={"trigger_interval": "1 second"})
    ds = config.dataset("job_views")
    out = Outcome("R1", f"SIGKILL the speed job {kills}x during {records:,} records over {ds.partitions} partitions",
                  records=records, command=f"soak R1 records={records} kills={kills}")
    rng = random.Random(seed)
    produced: dict = {}
    rate = rate or max(200.0, records / max(30.0, kills * 25.0))
    producer = threading.Thread(target=lambda: produced.update(r=produce(
        config, ds, records, rate=rate, bad_fraction=bad_fraction, seed=seed)), daemon=True)
    stream = SpeedStream(config, ds)
    stream.start()
    try:
        producer.start()
        for _ in range(kills):
            time.sleep(rng.uniform(3.0, 12.0))
            supervisor = stream.pid()
            job = [p for p in descendants(supervisor) if p != supervisor] if supervisor else []
            if not job:
                continue
            sigkill(job)
            killed_at, killed_wall = time.monotonic(), time.time()
            ends_then = end_offsets(config, ds.topic)
            out.faults += 1
            # Recovered: the restarted query runs, and has committed what the log held at the kill.
            marker = stream.progress_file.with_suffix(".started")

            def recovered() -> bool:
                return marker.exists() and marker.stat().st_mtime > killed_wall and caught_up(config, ds, ends_then)

            wait_for(recovered, 300, "the speed job to run again and commit past the kill", log=stream.process)
            out.recovery_seconds.append(round(time.monotonic() - killed_at, 1))
        producer.join()
        ends = end_offsets(config, ds.topic)
        wait_for(lambda: group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == ends, 600,
                 "the stream to catch up with the log end", log=stream.process)
    finally:
        stream.stop()
    out.lost, out.duplicated = count_exactly_once(config, ds, ends)
    out.records = sum(ends.values())
    out.seconds = time.monotonic() - started
    return out


def broker_faults(lab: Lab, records: int, kills: int, stops: int, *, seed: int = 2,
                  down: tuple[float, float] = (3.0, 10.0)) -> Outcome:
    """R2: SIGKILL the broker ``kills`` times and stop it cleanly ``stops`` times (in a random
    order, each down for a few seconds) while ``records`` are produced and the background
    speed stream runs. Every record the producer saw acknowledged must land exactly once in
    speed ∪ quarantine; recovery is from the broker answering again until the speed layer
    has committed everything the log held at that moment, by itself (its supervisor)."""
    from loglake.core.processes import wait_for
    from loglake.kafka.admin import ensure_topic
    from loglake.local.produce import produce
    from loglake.speed.control import SpeedStream

    started = time.monotonic()
    kafka = lab.own_broker()
    config = lab.config(bootstrap=kafka.bootstrap, speed={"trigger_interval": "1 second"})
    ds = config.dataset("job_views")
    rng = random.Random(seed)
    faults = ["kill"] * kills + ["stop"] * stops
    rng.shuffle(faults)
    out = Outcome("R2", f"SIGKILL the broker {kills}x and stop it cleanly {stops}x during {records:,} records",
                  records=records, command=f"soak R2 records={records} kills={kills} stops={stops}")
    acked: list[tuple[int, int]] = []
    errors: list[str] = []
    # The ingest outlasts the faults: each costs its downtime and the recovery after it.
    rate = max(100.0, records / max(30.0, len(faults) * 30.0))

    def ingest():
        try:
            produce(config, ds, records, rate=rate, bad_fraction=0.01, seed=seed, acked=acked)
        except Exception as e:  # records not acknowledged are not promised; they are reported
            errors.append(f"{type(e).__name__}: {e}")

    producer = threading.Thread(target=ingest, daemon=True)
    stream = SpeedStream(config, ds)
    try:
        ensure_topic(config, ds)
        stream.start()
        producer.start()
        for kind in faults:
            time.sleep(rng.uniform(4.0, 10.0))
            kafka.kill() if kind == "kill" else kafka.stop()
            out.faults += 1
            time.sleep(rng.uniform(*down))
            kafka.start(timeout=120)
            back = time.monotonic()
            ends_then = end_offsets(config, ds.topic)
            wait_for(lambda: caught_up(config, ds, ends_then), 300,
                     f"the speed layer to commit past the broker's return (after a {kind})", interval=0.5,
                     log=stream.process)
            out.recovery_seconds.append(round(time.monotonic() - back, 1))
        producer.join()
        ends = end_offsets(config, ds.topic)
        wait_for(lambda: caught_up(config, ds, ends), 600, "the stream to catch up with the log end",
                 interval=0.5, log=stream.process)
        if stream.failure() or not stream.pid():
            out.notes.append(f"the speed stream did not survive: {stream.state()}")
    finally:
        stream.stop()
        out.lost, out.duplicated = (count_exactly_once(config, ds, end_offsets(config, ds.topic))
                                    if kafka.is_running() else (-1, -1))
        kafka.stop()
    beyond = [a for a in acked if a[1] >= ends.get(a[0], 0)]
    if beyond:
        out.notes.append(f"{len(beyond)} acknowledged records are not in the log, e.g. {beyond[:3]}")
        out.lost += len(beyond)
    if len(set(acked)) != len(acked):
        out.notes.append(f"{len(acked) - len(set(acked))} offsets acknowledged twice")
    out.notes += [f"producer: {e}" for e in errors]
    out.records = sum(ends.values())
    out.info.append(f"{len(acked):,} of {records:,} records acknowledged; {out.records:,} in the log")
    out.seconds = time.monotonic() - started
    return out


def _batch_content(config, ds) -> list[tuple]:
    """Every row of the batch table and the batch part of quarantine, in offset order."""
    from loglake.tables import open_table, query

    rows = []
    for layer, where in (("batch", "TRUE"), ("quarantine", "\"_layer\" = 'batch'")):
        table = open_table(config.table_path(ds, layer))
        if table is not None:
            rows += [(layer, *sorted(r.items())) for r in query(table, f"SELECT * FROM t WHERE {where}")]
    return sorted(rows, key=lambda r: (dict(r[1:])["_partition"], dict(r[1:])["_offset"], r[0]))


def recompute_killed(lab: Lab, records: int, *, seed: int = 6) -> Outcome:
    """R6: the same offset ranges (one per partition) recomputed three times: first by
    ``loglake backfill``, SIGKILLed (the CLI and its Spark job) while it writes — its data
    files on disk before its commit; then twice to the end through the jobs' own code (the
    second below the watermark, so staged and swapped in). The two complete runs must leave
    identical content and batch ∪ quarantine must hold every offset exactly once;
    recovery seconds: each complete run."""
    import subprocess
    from collections import Counter

    from loglake.core.offsets import OffsetRange
    from loglake.core.processes import alive, descendants
    from loglake.core.plans import Plan
    from loglake.ledger.ranges import ledger_rows
    from loglake.local.produce import produce
    from loglake.ops.coverage import check_exactly_once
    from loglake.quality.pipeline import recompute_and_publish

    started = time.monotonic()
    spark = lab.spark()
    config = lab.config()
    ds = config.dataset("job_views")
    produce(config, ds, records, bad_fraction=0.02, seed=seed)
    ends = {p: e for p, e in end_offsets(config, ds.topic).items() if e}
    out = Outcome("R6", f"the same ranges recomputed twice, once SIGKILLed mid-write ({records:,} records)",
                  records=sum(ends.values()), command=f"soak R6 records={records}")
    ranges = [a for p, end in sorted(ends.items()) for a in ("--range", f"{p}:0-{end}")]
    table = Path(config.table_path(ds, "batch"))
    log = lab.root / f"r6-{seed}.log"
    with log.open("ab") as f:
        proc = subprocess.Popen(loglake_command("backfill", ds.name, *ranges), env=command_env(config),
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not any(table.glob("*.parquet")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        committed = (table / "_delta_log" / f"{0:020d}.json").exists()
        if proc.poll() is None:
            sigkill(alive(descendants(proc.pid)))  # the CLI and its spark-submit JVM: a crash
            out.faults += 1
            out.info.append("killed after its data files were written, "
                            + ("after the table's first commit" if committed else "before its commit"))
        else:
            out.notes.append(f"the first run ended ({proc.returncode}) before it could be killed (see {log})")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if any(r["state"] == "published" for r in ledger_rows(config, ds)):
        out.notes.append("the killed run published a range")

    plan = Plan(ds.name, tuple(OffsetRange(ds.topic, p, 0, e) for p, e in sorted(ends.items())), "backfill")
    contents = []
    for attempt in ("r6-a", "r6-b"):
        t0 = time.monotonic()
        summary = recompute_and_publish(spark, config, ds, plan, attempt)
        if not summary.quality.published:
            out.notes.append(f"{attempt} was not published: {summary.quality.to_dict()}")
        out.recovery_seconds.append(round(time.monotonic() - t0, 1))
        contents.append(_batch_content(config, ds))
    if contents[0] != contents[1]:
        differ = sum(1 for a, b in zip(contents[0], contents[1]) if a != b) + abs(len(contents[0]) - len(contents[1]))
        out.notes.append(f"the two complete runs differ in {differ} rows")
    rows = np.array([(dict(r[1:])["_partition"], dict(r[1:])["_offset"]) for r in contents[1]],
                    dtype=np.int64).reshape(-1, 2)
    for p, end in ends.items():
        cov = check_exactly_once(np.arange(end), rows[rows[:, 0] == p][:, 1], 0, end)
        out.lost += len(cov.missing) + len(cov.unexpected)
        out.duplicated += len(cov.duplicated)
    published = Counter(r["run_id"] for r in ledger_rows(config, ds) if r["state"] == "published")
    if published != Counter({"r6-a": len(ends), "r6-b": len(ends)}):
        out.notes.append(f"published ranges per run: {dict(published)}, expected {len(ends)} for each of 2 runs")
    out.seconds = time.monotonic() - started
    return out


def delete_oldest(config, topic: str, fraction: float) -> dict[int, int]:
    """DeleteRecords below ``fraction`` of each partition, as retention would; the new earliest offsets."""
    from confluent_kafka import TopicPartition

    from loglake.kafka.admin import admin, log_bounds

    bounds = log_bounds(config, topic)
    cut = [TopicPartition(topic, p, int(hi * fraction)) for p, (_lo, hi) in bounds.items() if hi]
    client = admin(config)  # keep a reference: a collected client cancels its futures
    for fut in client.delete_records(cut).values():
        fut.result(timeout=30)
    return {p: lo for p, (lo, _hi) in log_bounds(config, topic).items()}


def retention_loss(lab: Lab, records: int, *, seed: int = 61) -> Outcome:
    """R3: Kafka deletes offsets neither layer has read (DeleteRecords of the oldest 90 % of
    each partition, as retention would after an outage). The loss is loud on both sides,
    naming topic, partition and offsets; only its dataset stops (the batch plan plans the
    others; the background stream waits instead of crash-looping); nothing moves until
    ``loglake accept-loss`` records it; then batch and speed continue from the earliest
    retained offset by themselves, the audit passes and reports the loss, status shows it.

    ``lost`` counts offsets missing without a record; recovery seconds: from the
    acceptance until the batch layer (one batch run) and the waiting stream caught up."""
    from loglake.core.errors import DataLossError, ParamError
    from loglake.core.processes import wait_for
    from loglake.ledger.losses import accept_loss, find_losses
    from loglake.batch.planning import plan_batch
    from loglake.ledger.ranges import batch_watermarks
    from loglake.local.produce import produce
    from loglake.ops.audit import audit_dataset
    from loglake.ops.audit_report import format_audit
    from loglake.ops.status import dataset_status, format_status
    from loglake.speed.control import SpeedStream
    from loglake.quality.pipeline import recompute_and_publish
    from loglake.speed.stream import run_speed

    started = time.monotonic()
    spark = lab.spark()
    config = lab.config(speed={"trigger_interval": "1 second"})
    ds, ceos = config.dataset("job_views"), config.dataset("company_ceos")
    out = Outcome("R3", f"retention deletes 90 % of {records:,} records before either layer read them",
                  records=records, command=f"soak R3 records={records}")

    def expect(ok: bool, what: str) -> None:
        if not ok:
            out.notes.append(what)

    first = max(ds.partitions, records // 3)
    produce(config, ds, first, seed=seed)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "r3-before")
    produce(config, ds, records - first, seed=seed + 1)  # neither layer reads these before Kafka deletes most
    earliest = delete_oldest(config, ds.topic, 0.9)
    marks = batch_watermarks(config, ds)
    out.faults = sum(1 for p, lo in earliest.items() if lo > marks.get(p, 0))

    # Loud on both sides, naming topic, partition and offsets; no stack trace.
    try:
        plan_batch(config, ds)
        expect(False, "plan_batch accepted a plan across deleted offsets")
    except DataLossError as e:
        p = e.partition
        expect((e.topic, e.missing_start, e.missing_end) == (ds.topic, marks[p], earliest[p]),
               f"the batch error names {e.topic}[{e.partition}] [{e.missing_start}, {e.missing_end})")
        expect("loglake accept-loss" in str(e), "the batch error does not name loglake accept-loss")
    r = run_loglake(config, "speed", "run", ds.name, "--available-now")
    expect(r.returncode == 2 and "DataLossError" in r.stderr and "accept-loss" in r.stderr,
           f"speed run --available-now: {r.returncode}: {r.stderr[-300:]}")
    expect("Traceback" not in r.stderr and "at org.apache" not in r.stderr, "speed run printed a stack trace")

    # The background stream waits (no crash loop) until the loss is accepted.
    stream = SpeedStream(config, ds)
    stream.start()
    try:
        wait_for(lambda: stream.blocked(), 300, "the stream to report that it waits for accept-loss",
                 log=stream.process)
        expect("WAITING" in stream.state(), f"status of the waiting stream: {stream.state()}")

        # Only this dataset stops: the batch DAG's plan plans the others and names this one.
        from loglake.core import paths

        sys_path = str(paths.REPO_ROOT / "plugins")
        import sys

        if sys_path not in sys.path:
            sys.path.insert(0, sys_path)
        from loglake_airflow.plans import batch_requests

        with config_environment(config):  # the plan task's body reads the config from there
            produce(config, ceos, 50, seed=seed + 2)
            planned = batch_requests("r3/run")
        expect([r["dataset"] for r in planned["requests"]] == ["company_ceos"],
               f"the batch plan with one dataset lost: {planned['requests']}")
        expect([(s["dataset"], s["kind"]) for s in planned["stopped"]] == [("job_views", "data_loss")]
               and planned["stopped"][0]["message"].startswith(f"data loss: {ds.topic}["),
               f"the batch plan's stopped datasets: {planned['stopped']}")

        # Nothing is skipped without a record.
        try:
            accept_loss(config, ds, "  ")
            expect(False, "a blank reason was accepted")
        except ParamError:
            pass
        losses = find_losses(config, ds)
        expect({(x.partition, x.start, x.end) for x in losses} == {
            (q, marks.get(q, 0), earliest[q]) for q in earliest if marks.get(q, 0) < earliest[q]},
            f"find_losses: {losses}")
        expect(all(x.needed_by == ("batch", "speed") for x in losses), "a loss not needed by both layers")
        accepted_at = time.monotonic()
        first_p = losses[0].partition
        accepted = accept_loss(config, ds, "weekend outage, retention ran", partition=first_p)
        expect([(x.partition, x.start, x.end) for x in accepted] == [(first_p, losses[0].start, losses[0].end)],
               f"accept-loss --partition {first_p}: {accepted}")
        r = run_loglake(config, "accept-loss", ds.name, "--reason", "weekend outage, retention ran")
        expect(r.returncode == 0 and r.stdout.count("accepted as lost:") == len(losses) - 1,
               f"loglake accept-loss: {r.returncode}: {r.stdout[-300:]}{r.stderr[-300:]}")
        expect(find_losses(config, ds) == [], "losses left after accept-loss")

        # Every layer continues from the earliest retained offset.
        plan = plan_batch(config, ds)
        ends = end_offsets(config, ds.topic)
        expect({r.partition: r.start for r in plan.ranges} == {q: earliest[q] for q in earliest if earliest[q] < ends[q]},
               f"the batch plan after acceptance starts at {[(r.partition, r.start) for r in plan.ranges]}")
        recompute_and_publish(spark, config, ds, plan, "r3-after")
        out.recovery_seconds.append(round(time.monotonic() - accepted_at, 1))
        wait_for(lambda: caught_up(config, ds, ends) and not stream.blocked(), 300,
                 "the waiting stream to resume and reach the log end", interval=0.5, log=stream.process)
        out.recovery_seconds.append(round(time.monotonic() - accepted_at, 1))
        expect(stream.pid() is not None and stream.failure() is None, f"the stream after resuming: {stream.state()}")
    finally:
        stream.stop()
    result = audit_dataset(config, ds)
    expect(result.ok, "audit: " + " | ".join(format_audit(result)))
    out.lost, out.duplicated = result.missing + result.unexpected, result.duplicated
    expect({(x.partition, x.start, x.end) for x in result.lost} == {
        (x.partition, x.start, x.end) for x in losses}, f"the audit reports the losses as {result.lost}")
    expect("acknowledged loss" in "\n".join(format_audit(result)), "the audit does not report the loss")
    lines = "\n".join(format_status(ds, dataset_status(config, ds)))
    expect(f"accepted loss: [{first_p}] offsets [{losses[0].start}, {losses[0].end})" in lines
           and "weekend outage" in lines, f"status does not show the accepted loss:\n{lines}")
    out.info.append(f"{sum(x.end - x.start for x in losses):,} offsets accepted as lost in {len(losses)} ranges")
    out.records = sum(ends.values())
    out.seconds = time.monotonic() - started
    return out


# R5: each kind of odd record, and the reason the speed and batch layers must give it
# (None: valid by loglake's contract: unknown fields are allowed, a repeated key's last
# value wins; both documented under Quarantine reasons).
R5_LIMIT = 2048  # max_value_bytes of the scenario's job_views


def _r5_record(kind: str, good: dict) -> bytes | None:
    text = json.dumps(good)
    if kind == "non_utf8":
        return b"\xff\xfe" + text.encode()[2:]
    if kind == "truncated":
        return text.encode()[: len(text) // 2]
    if kind == "wrong_type":
        return json.dumps({**good, "user_id": str(good["user_id"])}).encode()
    if kind == "null_value":
        return None
    if kind == "null_field":
        return json.dumps({**good, "source": None}).encode()
    if kind == "out_of_domain":
        return json.dumps({**good, "duration_ms": -1}).encode()
    if kind == "oversized":
        return json.dumps({**good, "padding": "x" * R5_LIMIT}).encode()
    if kind == "empty":
        return b""
    if kind == "extra_fields":
        return json.dumps({**good, "client": "ios", "experiment": {"arm": "b"}}).encode()
    if kind == "duplicated_keys":
        return ('{"duration_ms": "not a number", ' + text[1:]).encode()  # the last (valid) value wins
    raise ValueError(kind)


R5_KINDS = {"non_utf8": "bad_json", "truncated": "bad_json", "wrong_type": "wrong_type",
            "null_value": "null_value", "null_field": "null_field", "out_of_domain": "out_of_domain",
            "oversized": "oversized", "empty": "bad_json", "extra_fields": None, "duplicated_keys": None}


def malformed_kinds(lab: Lab, records: int, per_kind: int, *, flood: int = 0, seed: int = 5) -> Outcome:
    """R5: ``per_kind`` records of every odd kind (R5_KINDS) shuffled among ``records``, then
    ``flood`` malformed records in a row; the speed layer (available-now) and a batch
    recompute each must put exactly the malformed ones in quarantine, each with its kind's
    reason, and the rest in their table: good + quarantine = log, per offset."""
    from confluent_kafka import Producer

    from loglake.kafka.admin import ensure_topic
    from loglake.batch.planning import plan_batch
    from loglake.tables import open_table, query
    from loglake.local.produce import generate
    from loglake.quality.pipeline import recompute_and_publish
    from loglake.speed.stream import run_speed

    started = time.monotonic()
    spark = lab.spark()
    config = lab.config(datasets={"job_views": {"max_value_bytes": R5_LIMIT}})
    ds = config.dataset("job_views")
    odd = [k for k in R5_KINDS for _ in range(per_kind)]
    kinds: list[str | None] = odd + [None] * max(0, records - len(odd))
    rng = random.Random(seed)
    rng.shuffle(kinds)
    kinds += ["truncated"] * flood
    out = Outcome("R5", f"{per_kind:,} records of each of {len(R5_KINDS)} odd kinds among {len(kinds) - flood:,}"
                  + (f", then {flood:,} malformed in a row" if flood else ""),
                  records=len(kinds), command=f"soak R5 records={records} per_kind={per_kind} flood={flood}")
    topic = ensure_topic(config, ds)
    producer = Producer(config.kafka_client_conf(**{"enable.idempotence": True, "acks": "all", "linger.ms": 20,
                                                    "compression.type": "lz4"}))
    expected: dict[tuple[int, int], str | None] = {}
    errors: list[str] = []

    def delivered(kind):
        def cb(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                expected[msg.partition(), msg.offset()] = R5_KINDS[kind] if kind else None
        return cb

    goods = (json.loads(v) for (_k, v), _ok in generate(ds, len(kinds), seed=seed))
    for kind, good in zip(kinds, goods):
        value = _r5_record(kind, good) if kind else json.dumps(good).encode()
        while True:
            try:
                producer.produce(topic, key=str(good["user_id"]).encode(), value=value, on_delivery=delivered(kind))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) or errors:
        out.notes.append(f"produce: {len(errors)} failed, e.g. {errors[:1]}")

    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "r5")
    reasons: dict[tuple[int, int], str] = {}
    for layer in ("speed", "batch"):
        rows = query(open_table(config.table_path(ds, layer)), "SELECT _partition, _offset FROM t")
        got: dict[tuple[int, int], list] = {}
        for r in rows:
            got.setdefault((r["_partition"], r["_offset"]), []).append(None)
        for r in query(open_table(config.table_path(ds, "quarantine")),
                       f"SELECT _partition, _offset, reason_code, reason FROM t WHERE _layer = '{layer}'"):
            got.setdefault((r["_partition"], r["_offset"]), []).append(r["reason_code"])
            if not r["reason"]:
                out.notes.append(f"{layer}: {r['_partition']}:{r['_offset']} quarantined without a reason")
        out.lost += sum(1 for k in expected if k not in got) + sum(1 for k in got if k not in expected)
        out.duplicated += sum(len(v) - 1 for v in got.values() if len(v) > 1)
        wrong = {k: (expected[k], v[0]) for k, v in got.items() if k in expected and v[0] != expected[k]}
        if wrong:
            sample = list(wrong.items())[:5]
            out.notes.append(f"{layer}: {len(wrong)} records with another outcome than expected (expected, got): {sample}")
        reasons.update({k: v[0] for k, v in got.items() if v[0]})
    by_reason: dict[str, int] = {}
    for code in reasons.values():
        by_reason[code] = by_reason.get(code, 0) + 1
    out.info.append(f"quarantined by reason: {dict(sorted(by_reason.items()))}")
    out.faults = len(odd) + flood
    out.seconds = time.monotonic() - started
    return out


# R8: what an operator may type, and the field each must be refused by (nothing runs).
BAD_CLI = [
    (["backfill", "job_views'; DROP TABLE batch.job_views; --", "--range", "0:0-1"], "unknown dataset"),
    (["backfill", "job_views", "--range", "0:0-5; DROP TABLE batch.job_views"], "ranges[0]"),
    (["backfill", "job_views", "--range", "0:0-5 OR 1=1"], "ranges[0]"),
    (["backfill", "job_views", "--range", "99:0-1"], "ranges[0].partition"),
    (["backfill", "job_views", "--range", "0:5-1"], "ranges[0].start"),
    (["backfill", "job_views", "--range", "0:0-999999999"], "ranges[0].end"),
    (["backfill", "job_views", "--range", "0:-3-1"], "ranges[0]"),
    (["backfill", "job_views", "--from", "2026-01-01' OR '1'='1", "--to", "2026-01-02"], "from_ts"),
    (["backfill", "job_views", "--range", "0:0-1", "--from", "2026-01-01", "--to", "2026-01-02"], "ranges"),
    (["backfill", "company_ceos", "--range", "0:0-1"], "dataset"),
    (["accept-loss", "job_views", "--reason", "  "], "reason"),
    (["accept-loss", "job_views", "--partition", "42", "--reason", "x"], "partition"),
    (["produce", "job_views; rm -rf /", "--count", "1"], "unknown dataset"),
    (["query", "DELETE FROM batch.job_views"], "read-only"),
]

BAD_PARAMS = [
    ({"dataset": "job_views", "ranges": ["0:0-5; DROP TABLE x"]}, "ranges[0]"),
    ({"dataset": "../../etc/passwd", "ranges": ["0:0-1"]}, "unknown dataset"),
    ({"dataset": "job_views", "ranges": ["0:3-1"]}, "ranges[0].start"),
    ({"dataset": "job_views", "from_ts": "yesterday; rm -rf /", "to_ts": "2026-01-01T00:00:00Z"}, "from_ts"),
    ({"dataset": "job_views"}, "ranges"),
]

BAD_CONF = [
    ("job_views.yaml", "kind: events\npartitions: [six\n", "job_views.yaml"),
    ("job_views.yaml", None, "partitions"),  # partitions: "six"
    ("job_views.yaml", None, "pattern"),     # a pattern Java refuses
    ("job_views.yaml", None, "surprise"),    # an unknown key
]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    """Every file under ``root`` with its size and mtime: what a refused command must not change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime)
            for p in root.rglob("*") if p.is_file() and "logs" not in p.parts}


def bad_input(lab: Lab) -> Outcome:
    """R8: malformed config, unknown datasets, out-of-bounds ranges, injection-like values in
    CLI arguments and DAG params: each refused at the edge naming the field; nothing written."""
    import yaml

    from loglake.core.config import load_config
    from loglake.core.errors import ConfigError
    from loglake.local.produce import produce

    started = time.monotonic()
    config = lab.config()
    ds = config.dataset("job_views")
    produce(config, ds, 50, seed=8)
    out = Outcome("R8", "bad operator input: config, CLI arguments, DAG params", command="soak R8")
    before = _tree(config.home)
    for args, field_ in BAD_CLI:
        r = run_loglake(config, *args, timeout=300)
        out.faults += 1
        if r.returncode == 0 or field_ not in r.stderr or "Traceback" in r.stderr:
            out.notes.append(f"not refused as expected: loglake {' '.join(args)} -> {r.returncode}: {r.stderr[-300:]}")

    from loglake_airflow.plans import backfill_requests  # the DAG's plan task body (plugins on sys.path)

    with config_environment(config):
        for params, field_ in BAD_PARAMS:
            out.faults += 1
            try:
                backfill_requests({"ranges": None, "from_ts": None, "to_ts": None, "dry_run": False, **params}, "r8/run")
                out.notes.append(f"DAG params accepted: {params}")
            except Exception as e:  # AirflowFailException naming the field
                if field_ not in str(e) or type(e).__name__ != "AirflowFailException":
                    out.notes.append(f"DAG params {params}: {type(e).__name__}: {e}")

    source = (config.conf_dir / "datasets" / "job_views.yaml").read_text()
    for name, text, field_ in BAD_CONF:
        out.faults += 1
        data = yaml.safe_load(source)
        if text is None:
            if field_ == "partitions":
                data["partitions"] = "six"
            elif field_ == "pattern":
                data["schema"]["view_id"]["pattern"] = "^(?P<id>[0-9a-f]+)$"
            else:
                data[field_] = True
            text = yaml.safe_dump(data)
        broken = lab.root / f"conf-{out.faults}"
        import shutil

        shutil.copytree(config.conf_dir, broken)
        (broken / "datasets" / name).write_text(text)
        try:
            load_config(broken, home=config.home)
            out.notes.append(f"config accepted: {field_}")
        except ConfigError as e:
            if field_ not in str(e):
                out.notes.append(f"config {field_}: {e}")
    changed = [k for k, v in _tree(config.home).items() if before.get(k) != v]
    changed += [k for k in before if not (config.home / k).exists()]
    if changed:
        out.notes.append(f"files changed by refused input: {changed[:10]}")
    out.lost = len(out.notes)  # a refusal that did not happen counts as a defect
    out.seconds = time.monotonic() - started
    return out
