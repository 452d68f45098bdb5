"""R4: a busy platform — streaming, maintenance, batch runs and a reader, all at once.

For ``minutes``: a producer writes ``rate`` records/s (1 % malformed) to ``job_views``;
the supervised background speed stream runs; ``loglake maintain job_views`` starts every
``maintain_every`` seconds and ``loglake batch job_views`` every ``batch_every`` seconds,
each a separate process as an operator's cron or Airflow would start it (one run of a kind
at a time: a tick that finds the previous run still going is skipped, no catch-up); and a
reader in this process queries the serving view continuously (``query_pause`` seconds
between queries) through the public path (``loglake.serving.spark.query``: every query
registers the views anew, pinned at one snapshot). Runs start within the window; the producer and the reader go on until the last
of them ended, so every run meets a stream that is writing.

What must hold:

- **every query is exact at its snapshot**: per partition, the served rows and the
  quarantined offsets below the highest served offset are exactly the offsets
  ``[earliest, hi)``: no served offset twice, none both served and quarantined, no gap
  (served + quarantined == hi − earliest). A row lost or doubled between the layers, a
  quarantine behind the rows it belongs with, fails it; and no count goes down from one
  query to the next;
- **the stream never fails**: one JVM from start to end (the supervisor never restarted
  it, the query never restarted), no failure summary;
- **maintenance shrinks the tables**: every maintenance run's OPTIMIZE of the speed table
  drops its active files (counted from the Delta log at the commit before and at the
  OPTIMIZE commit); the other tables' drops are reported;
- **every offset exactly once at the end**: once the stream caught up with the log, the
  served side of each layer (batch and its quarantine below W_p, speed and its quarantine
  at or above) holds every offset of the log exactly once (the speed layer alone no longer
  does: maintenance expired its rows below W_p); and loglake's own audit agrees.

Every maintenance or batch run that fails, every query that raises, is a note.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from loglake.kafka.admin import end_offsets
from loglake.testing import Lab, caught_up, command_env, loglake_command
from soak.scenarios import Outcome


def writer_wait_seconds() -> float:
    """How long a run may wait for the dataset's writer lease (``loglake.leases``)."""
    from loglake.leases import DEFAULT_WAIT_SECONDS

    return float(os.environ.get("LOGLAKE_WRITER_WAIT_SECONDS", DEFAULT_WAIT_SECONDS))


# One statement, so one snapshot: the registered views (``job_views``, ``quarantine.job_views``)
# are pinned together by ``register_tables``. Per partition: the served rows (count, distinct
# offsets, lowest, one past the highest), the distinct quarantined offsets below that, the
# lowest of those, and how many offsets are both served and quarantined.
CHECK_SQL = """
WITH s AS (SELECT _partition AS p, _offset AS o FROM job_views),
     q AS (SELECT DISTINCT _partition AS p, _offset AS o FROM quarantine.job_views),
     sp AS (SELECT p, count(*) AS n, count(DISTINCT o) AS nd, min(o) AS lo, max(o) + 1 AS hi FROM s GROUP BY p),
     qp AS (SELECT q.p, count(*) AS nq, min(q.o) AS qlo FROM q JOIN sp ON q.p = sp.p AND q.o < sp.hi GROUP BY q.p),
     bp AS (SELECT s.p, count(*) AS nb FROM s JOIN q ON s.p = q.p AND s.o = q.o GROUP BY s.p)
SELECT sp.p, sp.n, sp.nd, sp.lo, sp.hi, coalesce(qp.nq, 0) AS nq, qp.qlo, coalesce(bp.nb, 0) AS nb
FROM sp LEFT JOIN qp ON qp.p = sp.p LEFT JOIN bp ON bp.p = sp.p
ORDER BY sp.p
"""

PRODUCE_CHUNK_SECONDS = 5.0
MAX_NOTES_PER_KIND = 5


@dataclass
class BusyOutcome(Outcome):
    info: list[str] = field(default_factory=list)  # what happened, for the results file
    queries: int = 0
    runs: list[dict] = field(default_factory=list)
    # Each query's (start, end), seconds since the scenario's start (as a run's ``at``).
    query_windows: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "info": self.info, "queries": self.queries, "runs": self.runs,
                "query_windows": self.query_windows}

    def runs_without_a_query(self) -> list[dict]:
        """The batch and maintenance runs no query of the reader overlapped: the scenario's
        claim is that the serving view was read (and exact) while each of them wrote."""
        return [r for r in self.runs
                if not any(a < r["at"] + r["seconds"] and b > r["at"] for a, b in self.query_windows)]


@dataclass
class QueryCheck:
    """What one query found wrong at its snapshot (offsets missing, doubled; descriptions)."""

    lost: int = 0
    duplicated: int = 0
    problems: list[str] = field(default_factory=list)


def check_snapshot(rows: list[dict], earliest: dict[int, int], previous: dict[int, tuple[int, int]]) -> QueryCheck:
    """Judge one query's per-partition figures (``CHECK_SQL``) against the invariant; ``previous``:
    partition → (served count, hi) of the query before, which no partition may go below."""
    out = QueryCheck()
    seen = set()
    for r in rows:
        p, n, nd, hi, nq, nb = r["p"], r["n"], r["nd"], r["hi"], r["nq"], r["nb"]
        seen.add(p)
        e = earliest.get(p, 0)
        lo = min(r["lo"], r["qlo"]) if r["qlo"] is not None else r["lo"]
        if nd != n:
            out.duplicated += n - nd
            out.problems.append(f"[{p}] {n - nd} offsets served twice ({n} rows, {nd} distinct offsets)")
        if nb:
            out.duplicated += nb
            out.problems.append(f"[{p}] {nb} offsets both served and quarantined")
        if lo < e:
            out.duplicated += e - lo
            out.problems.append(f"[{p}] offsets from {lo} served or quarantined, below the earliest {e}")
        covered = nd + nq - nb
        if covered < hi - e:
            out.lost += hi - e - covered
            out.problems.append(f"[{p}] a gap: {nd} served + {nq} quarantined (distinct, {nb} both) cover "
                                f"{covered} of [{e}, {hi}) ({hi - e - covered} missing)")
        before = previous.get(p)
        if before and (n < before[0] or hi < before[1]):
            out.lost += max(before[0] - n, 0)
            out.problems.append(f"[{p}] went down: {before[0]} rows up to {before[1]} before, now {n} up to {hi}")
    for p, (n, hi) in previous.items():
        if p not in seen and n:
            out.lost += n
            out.problems.append(f"[{p}] went down: {n} rows up to {hi} before, now none")
    return out


def _jvm(supervisor: int | None) -> dict[int, float]:
    """The stream's Spark driver JVM(s) under its supervisor: pid → creation time."""
    from loglake.core.processes import command_line, descendants

    if not supervisor:
        return {}
    return {pid: t for pid, t in descendants(supervisor).items()
            if "org.apache.spark.deploy.SparkSubmit" in (command_line(pid) or "")}


def _active_files(path: str, version: int) -> int:
    from loglake.tables import open_table

    table = open_table(path, version)
    return 0 if table is None else len(table.file_uris())


def _version(path: str) -> int | None:
    from loglake.tables import open_table

    table = open_table(path)
    return None if table is None else table.version()


def optimize_drops(path: str, after: int, upto: int | None) -> list[tuple[int, int, int]]:
    """``(version, files before, files after)`` of each OPTIMIZE commit of the table in
    ``(after, upto]``, the active files counted from the Delta log at the version before it
    and at it."""
    from loglake.tables import open_table

    table = open_table(path)
    if table is None or upto is None:
        return []
    out = []
    for h in table.history():
        v = h.get("version")
        if v is not None and after < v <= upto and str(h.get("operation", "")).upper().startswith("OPTIMIZE"):
            out.append((v, _active_files(path, v - 1), _active_files(path, v)))
    return sorted(out)


def served_exactly_once(config, ds, ends: dict[int, int]) -> tuple[int, int, list[str]]:
    """(lost, duplicated, descriptions) of the served side of each layer against the log
    ``[0, end)``: batch rows and batch quarantine below W_p, speed rows and speed
    quarantine at or above it, at one snapshot (``loglake.ledger.snapshots.pin``), read with delta-rs."""
    from loglake.kafka.admin import log_bounds
    from loglake.ledger.snapshots import pin
    from loglake.tables import open_table, query
    from loglake.ops.coverage import check_exactly_once

    earliest = {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}
    snap = pin(config, ds)
    marks = snap.watermarks(earliest)
    quarantine = config.table_path(ds, "quarantine")
    parts = [(config.table_path(ds, "batch"), snap.version("batch"), "TRUE", True),
             (quarantine, snap.batch_quarantine_version, "\"_layer\" = 'batch'", True),
             (config.table_path(ds, "speed"), snap.version("speed"), "TRUE", False),
             (quarantine, snap.version("quarantine"), "\"_layer\" = 'speed'", False)]
    landed = []
    for path, version, where, below in parts:
        table = None if version is None else open_table(path, version)
        if table is None:
            continue
        for r in query(table, f"SELECT \"_partition\" AS p, \"_offset\" AS o FROM t WHERE {where}"):
            w = marks.get(r["p"])
            if (w is not None and r["o"] < w) == below:
                landed.append((r["p"], r["o"]))
    rows = np.array(landed, dtype=np.int64).reshape(-1, 2)
    lost = dup = 0
    said = []
    for p, end in sorted(ends.items()):
        cov = check_exactly_once(np.arange(end), rows[rows[:, 0] == p][:, 1], 0, end)
        lost += len(cov.missing) + len(cov.unexpected)
        dup += len(cov.duplicated)
        if not cov.ok:
            said.append(f"[{p}] at the end (W={marks.get(p)}): {len(cov.missing)} missing e.g. "
                        f"{cov.missing[:5].tolist()}, {len(cov.duplicated)} duplicated e.g. "
                        f"{cov.duplicated[:5].tolist()}, {len(cov.unexpected)} unexpected")
    return lost, dup, said


def busy_platform(lab: Lab, minutes: float, maintain_every: float, batch_every: float, rate: float, *,
                  seed: int = 4, query_pause: float = 0.0) -> Outcome:
    """R4: ``minutes`` of streaming at ``rate`` records/s with ``loglake maintain`` every
    ``maintain_every`` s, ``loglake batch`` every ``batch_every`` s and a reader querying
    the serving view continuously (``query_pause`` seconds between two queries: 0, or a
    little at CI scale, where four JVMs share two cores); see the module's docstring for
    what must hold."""
    from loglake.core.processes import alive, descendants, terminate, wait_for
    from loglake.kafka.admin import ensure_topic, log_bounds
    from loglake.local.produce import produce
    from loglake.ops.audit import audit_dataset
    from loglake.serving.spark import query
    from loglake.speed.control import SpeedStream

    started = time.monotonic()
    spark = lab.spark()
    config = lab.config(speed={"trigger_interval": "1 second"})
    ds = config.dataset("job_views")
    window = minutes * 60.0
    out = BusyOutcome("R4", f"{minutes:g} min of streaming at {rate:g} records/s with maintenance every "
                            f"{maintain_every:g} s, a batch run every {batch_every:g} s and a reader querying "
                            f"the serving view continuously",
                      command=f"soak R4 minutes={minutes:g} maintain_every={maintain_every:g} "
                              f"batch_every={batch_every:g} rate={rate:g}")
    env = command_env(config)
    logs = lab.root / f"r4-{seed}"
    logs.mkdir(parents=True, exist_ok=True)
    guard = threading.Lock()
    notes: dict[str, list[str]] = {}  # kind → what went wrong (capped when reported)
    counts: dict[str, int] = {}

    def note(kind: str, text: str) -> None:
        with guard:
            counts[kind] = counts.get(kind, 0) + 1
            notes.setdefault(kind, [])
            if len(notes[kind]) < MAX_NOTES_PER_KIND:
                notes[kind].append(text)

    stop_ingest, stop_jobs, stop_reader = threading.Event(), threading.Event(), threading.Event()
    procs: list[subprocess.Popen] = []
    produced = {"records": 0}

    def ingest() -> None:
        chunk = max(1, int(rate * PRODUCE_CHUNK_SECONDS))
        i = 0
        while not stop_ingest.is_set():
            try:
                # Each chunk its own seed: view ids stay unique (the quality gate checks that).
                r = produce(config, ds, chunk, rate=rate, bad_fraction=0.01, seed=seed * 1_000_003 + i)
                produced["records"] += r.records
            except Exception as e:
                note("producer", f"producer: {type(e).__name__}: {e}")
                time.sleep(1.0)
            i += 1

    t0 = [0.0]

    def run(kind: str, args: list[str], timeout: float) -> dict:
        """One operator-started run (``loglake <args>``) as its own process; its record."""
        speed_path = config.table_path(ds, "speed")
        tables = {t: config.table_path(ds, t) for t in ("speed", "quarantine", "batch")}
        before = {t: _version(p) for t, p in tables.items()}
        speed_files_before = _active_files(speed_path, before["speed"]) if before["speed"] is not None else 0
        with guard:
            out.faults += 1
            log = logs / f"{out.faults:03d}-{kind}.log"
        at = time.monotonic()
        with log.open("wb") as f:
            proc = subprocess.Popen(loglake_command(*args), env=env, stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with guard:
            procs.append(proc)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            terminate(alive(descendants(proc.pid)), 10.0)
            code = proc.wait()
            note(kind, f"{kind} run at {at - t0[0]:.0f}s did not end within {timeout:.0f}s (killed; log {log})")
        record = {"kind": kind, "at": round(at - t0[0], 1), "seconds": round(time.monotonic() - at, 1),
                  "code": code, "log": str(log)}
        if code != 0:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            note(kind, f"{kind} run at {record['at']}s exited with {code}: {tail[-600:]} (log {log})")
        if kind == "maintain":
            said = log.read_text(errors="replace")
            expired = re.search(r"(\d+) speed row\(s\) expired", said)
            record["expired"] = int(expired.group(1)) if expired else None
            record["operations"] = [line.strip() for line in said.splitlines() if line.startswith("  ")]
            after = {t: _version(p) for t, p in tables.items()}
            drops = {t: optimize_drops(p, before[t] if before[t] is not None else -1, after[t])
                     for t, p in tables.items()}
            record["optimize"] = {t: [f"v{v}: {a} → {b} files" for v, a, b in d] for t, d in drops.items()}
            record["speed_files"] = [speed_files_before,
                                     _active_files(speed_path, after["speed"]) if after["speed"] is not None else 0]
            if code == 0 and not any(b < a for _v, a, b in drops["speed"]):
                note("files", f"maintenance at {record['at']}s: the speed table's active files did not drop at an "
                              f"OPTIMIZE commit ({record['optimize']['speed'] or 'no OPTIMIZE commit'}; "
                              f"{speed_files_before} files before the run)")
        with guard:
            out.runs.append(record)
        return record

    def cron(kind: str, args: list[str], every: float) -> None:
        """Start a run at every tick of ``every`` seconds within the window; a tick that finds
        the previous run still going is skipped (one run at a time, no catch-up)."""
        k, skipped = 1, 0
        while True:
            at = t0[0] + k * every
            if at >= t0[0] + window or stop_jobs.wait(max(0.0, at - time.monotonic())):
                break
            try:
                # Its own work gets max(900 s, 4 ticks); waiting for the dataset's writer lease while
                # the other kind holds it (the single-writer rule, up to its wait bound) is not its work.
                run(kind, args, timeout=max(900.0, 4 * every) + writer_wait_seconds())
            except Exception as e:  # the scenario's own bookkeeping failed: say so, keep the schedule
                note(kind, f"{kind} run at {time.monotonic() - t0[0]:.0f}s: {type(e).__name__}: {e}")
            nxt = int((time.monotonic() - t0[0]) // every) + 1
            skipped += max(0, nxt - k - 1)
            k = max(k + 1, nxt)
        if skipped:
            with guard:
                out.info.append(f"{kind}: {skipped} tick(s) skipped while the previous run was still going")

    previous: dict[int, tuple[int, int]] = {}
    seconds: list[float] = []

    def read() -> None:
        while not stop_reader.is_set():
            q0 = time.monotonic()
            try:
                earliest = {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}
                rows = [r.asDict() for r in query(spark, config, CHECK_SQL).collect()]
            except Exception as e:
                note("query", f"query {out.queries + 1} at {q0 - t0[0]:.0f}s raised {type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0][:400] if str(e).strip() else ''}")
                time.sleep(1.0)
                continue
            out.queries += 1
            seconds.append(time.monotonic() - q0)
            out.query_windows.append((round(q0 - t0[0], 1), round(time.monotonic() - t0[0], 1)))
            found = check_snapshot(rows, earliest, previous)
            if found.problems:
                out.lost += found.lost
                out.duplicated += found.duplicated
                note("invariant", f"query {out.queries} at {q0 - t0[0]:.0f}s: " + "; ".join(found.problems))
            for r in rows:
                before = previous.get(r["p"], (0, 0))
                previous[r["p"]] = (max(before[0], r["n"]), max(before[1], r["hi"]))
            stop_reader.wait(query_pause)

    stream = SpeedStream(config, ds)
    threads: list[threading.Thread] = []
    producer = threading.Thread(target=ingest, name="r4-producer", daemon=True)
    reader = threading.Thread(target=read, name="r4-reader", daemon=True)
    ends: dict[int, int] = {}
    try:
        ensure_topic(config, ds)
        stream.start()
        producer.start()
        stream.wait_first_batch(300)
        supervisor = stream.pid()
        jvm = _jvm(supervisor)
        marker = stream.progress_file.with_suffix(".started")
        started_mark = marker.stat().st_mtime if marker.exists() else None
        if not jvm:
            out.notes.append(f"no Spark driver JVM found under the stream's supervisor {supervisor}")
        t0[0] = time.monotonic()
        out.info.append(f"the stream's first micro-batch after {t0[0] - started:.1f}s; its JVM {sorted(jvm)}")
        threads = [threading.Thread(target=cron, args=("maintain", ["maintain", ds.name], maintain_every),
                                    name="r4-maintain", daemon=True),
                   threading.Thread(target=cron, args=("batch", ["batch", ds.name], batch_every),
                                    name="r4-batch", daemon=True)]
        for t in threads:
            t.start()
        reader.start()
        time.sleep(max(0.0, t0[0] + window - time.monotonic()))
        for t in threads:  # no run starts after the window; the running ones finish, still under load
            t.join(timeout=max(900.0, 4 * max(maintain_every, batch_every)) + writer_wait_seconds() + 60)
        stop_ingest.set()
        producer.join(timeout=PRODUCE_CHUNK_SECONDS * 4 + 120)
        ends = end_offsets(config, ds.topic)
        wait_for(lambda: caught_up(config, ds, ends), 600, "the stream to catch up with the log end", interval=0.5,
                 log=stream.process)
        stop_reader.set()
        reader.join(timeout=600)

        # The stream: one JVM throughout, never restarted, no failure.
        now_jvm = _jvm(stream.pid())
        if stream.failure() or not stream.pid():
            out.notes.append(f"the speed stream did not survive: {stream.state()}")
        elif jvm and (now_jvm != jvm or alive(jvm) != jvm):
            out.notes.append(f"the stream's JVM changed: {sorted(jvm)} at the start, {sorted(now_jvm)} at the end")
        log_text = stream.process.log_file.read_text(errors="replace") if stream.process.log_file.exists() else ""
        restarted = [line for line in log_text.splitlines() if "loglake supervisor:" in line]
        if restarted:
            out.notes.append(f"the supervisor restarted the stream: {restarted[:3]}")
        held = [float(m.group(1)) for m in re.finditer(r"held its appends ([0-9.]+)s", log_text)]
        if held:  # while a DELETE or replaceWhere of a writer ran (loglake.leases.appends_paused)
            out.info.append(f"the stream held its appends {len(held)} time(s) for a writer: {sum(held):.1f}s in all, "
                            f"{max(held):.1f}s at most")
        if started_mark is not None and marker.exists() and marker.stat().st_mtime != started_mark:
            out.notes.append("the stream's query started again during the run (its start marker changed)")

        # At the end, at rest: the same query once more, then every offset of the log exactly once.
        rows = [r.asDict() for r in query(spark, config, CHECK_SQL).collect()]
        found = check_snapshot(rows, {p: lo for p, (lo, _hi) in log_bounds(config, ds.topic).items()}, previous)
        if found.problems:
            out.lost += found.lost
            out.duplicated += found.duplicated
            note("invariant", "the final query: " + "; ".join(found.problems))
        lost, dup, said = served_exactly_once(config, ds, ends)
        out.lost += lost
        out.duplicated += dup
        for s in said:
            note("end", s)
        audit = audit_dataset(config, ds, record=False)
        if not audit.ok:
            note("end", f"audit: {audit.missing} missing, {audit.duplicated} duplicated, "
                        f"{audit.unexpected} unexpected")
    finally:
        stop_ingest.set()
        stop_jobs.set()
        stop_reader.set()
        for proc in procs:
            if proc.poll() is None:
                terminate(alive(descendants(proc.pid)), 10.0)
                proc.wait()
        producer.join(timeout=60)
        reader.join(timeout=120)
        stream.stop()

    out.records = sum(ends.values())
    kinds = [r["kind"] for r in out.runs]
    if "maintain" not in kinds or "batch" not in kinds:
        out.notes.append(f"runs: {kinds.count('maintain')} maintenance, {kinds.count('batch')} batch (wanted both)")
    for kind, said in notes.items():
        out.notes += said
        if counts[kind] > len(said):
            out.notes.append(f"... and {counts[kind] - len(said)} more {kind} problem(s)")
    for r in out.runs:
        line = f"{r['kind']} at {r['at']}s: {r['seconds']}s, exit {r['code']}"
        if r["kind"] == "maintain":
            line += (f"; {r['expired']} speed rows expired; speed files {r['speed_files'][0]} before → "
                     f"{r['speed_files'][1]} after; OPTIMIZE "
                     + ", ".join(f"{t} {'; '.join(v) or '-'}" for t, v in r["optimize"].items()))
        out.info.append(line)
    if seconds:
        out.info.append(f"{out.queries} queries, each {np.median(seconds):.2f}s median, {max(seconds):.2f}s max; "
                        f"{produced['records']:,} records produced")
    out.seconds = time.monotonic() - started
    return out
