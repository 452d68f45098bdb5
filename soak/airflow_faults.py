"""Fault scenarios against Airflow itself (R7): the scheduler SIGKILLed during a backfill.

Same contract as ``soak.scenarios``: a scenario takes a ``loglake.testing.Lab`` and its scale
and returns an ``Outcome``; ``tests/reliability`` runs it small, ``soak/run.py`` at full size.
"""

from __future__ import annotations

import random
import time
from datetime import datetime

import numpy as np

from loglake.testing import Lab, landed, sigkill
from soak.scenarios import Outcome

DAG = "loglake_backfill"
FINAL = ("success", "failed")


def scheduler_kills(lab: Lab, kills: int, records: int, ranges: int, *, seed: int = 7,
                    pause: tuple[float, float] = (0.5, 6.0),
                    restart_after: tuple[float, float] = (0.0, 0.0)) -> Outcome:
    """R7: SIGKILL the Airflow scheduler ``kills`` times while a ``loglake_backfill`` run of
    ``ranges`` offset ranges (two or more per partition) over ``records`` job_views records
    runs; after each kill the scheduler is started again the way ``loglake up`` does it
    (``EmbeddedAirflow.start()`` starts what is not running), ``restart_after`` seconds later
    (an operator's delay). The run must end ``success``; every requested range must be in
    the offsets ledger exactly once as *written* and once as *published* by that run, and
    batch ∪ quarantine(_layer='batch') must hold each requested offset exactly once and no
    other; nothing of Airflow may be left running after it is stopped.

    Each kill comes ``pause`` seconds after a task of the run was seen running (its task
    process alive), and only while one still is. The scheduler's main process alone is
    killed, as the kernel's OOM killer or a crash would.

    What a kill does (Airflow 3.3, LocalExecutor, measured here):

    - The scheduler's forked LocalExecutor workers and its log server (``airflow serve-logs``)
      do not die with it: they are reparented to init, in the dead scheduler's session. A
      worker that runs a task goes on supervising it — the task process (a process group of
      its own) with its spark-submit JVM and the job's Python driver under it — because the
      task heartbeats to and reports its end through the api-server's Execution API, not the
      scheduler. So the task finishes, its state is recorded, and the Spark job's lease
      (``loglake.leases``) is released as usual. The idle workers block for ever on the dead
      scheduler's task queue, and the log server keeps the worker log port.
    - The restarted scheduler adopts nothing (a LocalExecutor cannot adopt tasks). At start
      and every ``orphaned_tasks_check_interval`` it resets the task instances queued by a
      scheduler whose heartbeat is older than ``scheduler_health_check_threshold`` (30 s).
      A restart within 30 s therefore resets nothing: the running task ends in the old
      worker and the new scheduler queues what follows. A restart later than that (or a
      task outliving the next check) resets a task that may still run: the api-server then
      refuses its next heartbeat, its supervisor SIGTERMs the task's process group
      (spark-submit and the job's Python driver: the driver's lease goes with its pid), and
      the task runs again as a new try of the same run, at once — no retry is spent on it —
      recomputing the same ranges in place, which the batch job does idempotently.
    - Two defects this scenario found, fixed in loglake: (1) ``EmbeddedAirflow.start()``
      took the dead scheduler's last heartbeat (younger than 30 s) for health and returned
      at once, and the dead scheduler's workers and log server stayed for ever: ``loglake
      down`` did not reach them (they are below no running component) and the restarted
      scheduler's own log server could not bind the port. Now ``start()`` waits for the
      heartbeat of the scheduler it started and first stops what a dead component left
      behind, except workers still running a task (they finish it, as above); ``stop()``
      stops those too. (2) A task reset after its Spark job had committed but before it
      reported success recorded its ranges in the ledger a second time when the next try
      committed; the ledger now records a range written or published once per run
      (``loglake.lake.system_tables.append_ledger``).

    Recovery seconds, per kill: from the SIGKILL until the restarted scheduler's own heartbeat
    is healthy (``/api/v2/monitor/health`` reports a scheduler heartbeat later than the kill)
    *and* the run is progressing — a task instance of the run started or ended after the
    kill, or one is running with its task process alive — or the run has ended.
    """
    import psutil

    from loglake.core.processes import alive, descendants, free_port, wait_for
    from loglake.kafka.admin import end_offsets
    from loglake.local.airflow_client import AirflowClient
    from loglake.local.airflow_standalone import EmbeddedAirflow
    from loglake.local.produce import produce

    started = time.monotonic()
    config = lab.config()
    ds = config.dataset("job_views")
    produce(config, ds, records, bad_fraction=0.02, seed=seed)
    ends = end_offsets(config, ds.topic)
    requested = split_ranges({p: e for p, e in ends.items() if e}, ranges)
    out = Outcome("R7", f"SIGKILL the Airflow scheduler {kills}x during a backfill of {len(requested)} ranges "
                        f"({records:,} records)",
                  records=sum(b - a for _p, a, b in requested),
                  command=f"soak R7 kills={kills} records={records} ranges={ranges}")
    rng = random.Random(seed)
    # Only the backfill runs: the scheduled DAGs stay paused (as created), so the ledger and
    # the tables hold this run's work alone. The trigger unpauses loglake_backfill.
    af = EmbeddedAirflow(config, free_port())
    seen: dict[int, float] = {}  # every process of Airflow's seen during the scenario

    def remember() -> None:
        for proc in af.processes.values():
            pid = proc.pid()
            if pid:
                seen.update(descendants(pid))

    run_id, state = None, None
    try:
        out.info.append(f"Airflow healthy {af.start(300):.1f}s after its start")
        client = AirflowClient(af.url, af.token())
        client.wait_for_dag(DAG, 180)
        conf = {"dataset": ds.name, "ranges": [f"{p}:{a}-{b}" for p, a, b in requested]}
        run_id = client.trigger(DAG, conf)

        def run_state() -> str:
            return client.call("GET", f"/dags/{DAG}/dagRuns/{run_id}")["state"]

        def executing() -> list[dict]:
            """The run's task instances in state running whose task process is alive."""
            return [ti for ti in client.task_instances(DAG, run_id)
                    if ti["state"] == "running" and ti.get("pid") and psutil.pid_exists(ti["pid"])]

        while out.faults < kills and run_state() not in FINAL:
            if not executing():
                time.sleep(0.3)
                continue
            time.sleep(rng.uniform(*pause))
            tasks = executing()
            scheduler = af.processes["scheduler"].pid()
            if not tasks or not scheduler:
                continue
            remember()
            tree = descendants(scheduler)
            sigkill([scheduler])
            killed, killed_wall = time.monotonic(), time.time()
            out.faults += 1
            wait_for(lambda: af.processes["scheduler"].pid() is None, 30, "the killed scheduler to be gone")
            survived = _roles(alive(tree))
            delay = rng.uniform(*restart_after)
            time.sleep(delay)
            af.start(300)  # what `loglake up` does: start whatever is not running

            def recovered() -> bool:
                health = (af.health() or {}).get("scheduler") or {}
                beat = _ts(health.get("latest_scheduler_heartbeat"))
                if health.get("status") != "healthy" or not beat or beat <= killed_wall:
                    return False
                if run_state() in FINAL:
                    return True
                for ti in client.task_instances(DAG, run_id):
                    if max(_ts(ti.get("start_date")) or 0, _ts(ti.get("end_date")) or 0) > killed_wall:
                        return True
                    if ti["state"] == "running" and ti.get("pid") and psutil.pid_exists(ti["pid"]):
                        return True
                return False

            wait_for(recovered, 600, f"the scheduler to be healthy and the run to progress after kill {out.faults}",
                     interval=0.25, log=af.processes["scheduler"])
            out.recovery_seconds.append(round(time.monotonic() - killed, 1))
            out.info.append(
                f"kill {out.faults} during {_names(tasks)}: "
                f"survived {survived}; restarted after {delay:.0f}s; recovered in {out.recovery_seconds[-1]}s")
        if out.faults < kills:
            out.notes.append(f"the run ended after {out.faults} of {kills} kills (make it longer: more records)")
        state = wait_for(lambda: (s := run_state()) in FINAL and s, 1800, "the backfill run to end", interval=1,
                         log=af.processes["scheduler"])
        remember()
        tis = client.task_instances(DAG, run_id)
        out.info.append(f"run {state}: " + ", ".join(f"{t['task_id']} {t['state']} (try {t['try_number']})"
                                                     for t in tis))
        if state != "success":
            out.notes.append(f"the backfill run ended {state}: "
                             + ", ".join(f"{t['task_id']} {t['state']}" for t in tis if t["state"] != "success"))
    finally:
        af.stop()
        left = alive(seen)
        if left:
            out.notes.append(f"left running after Airflow was stopped: {_roles(left)}")
            sigkill(left)  # the scenario leaves nothing behind either way
    if run_id is not None:
        check_backfill(config, ds, requested, ends, f"{DAG}/{run_id}", out)
    out.seconds = time.monotonic() - started
    return out


def split_ranges(ends: dict[int, int], ranges: int) -> list[tuple[int, int, int]]:
    """``ranges`` contiguous ranges ``(partition, start, end)``, two or more per partition
    where there are enough, together covering whole partitions ``[0, end)``."""
    used = sorted(ends)[:max(1, min(len(ends), ranges // 2))]
    out = []
    for i, p in enumerate(used):
        n = ranges // len(used) + (1 if i < ranges % len(used) else 0)
        cuts = np.linspace(0, ends[p], n + 1).astype(int)
        out += [(p, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
    return out


def check_backfill(config, ds, requested, ends: dict[int, int], run_id: str, out: Outcome) -> None:
    """The ledger has each requested range once as written and once as published by
    ``run_id`` (and nothing else); batch ∪ quarantine(_layer='batch') holds each requested
    offset exactly once and no other: misses and strays count as lost, repeats as duplicated."""
    from loglake.ledger.ranges import ledger_rows
    from loglake.ops.coverage import check_exactly_once

    rows = ledger_rows(config, ds)
    for state in ("written", "published"):
        counts: dict[tuple, int] = {}
        for r in rows:
            if r["state"] == state:
                key = (r["partition"], r["start"], r["end"], r["run_id"])
                counts[key] = counts.get(key, 0) + 1
        for p, a, b in requested:
            n = counts.pop((p, a, b, run_id), 0)
            if n != 1:
                out.notes.append(f"ledger: range {p}:{a}-{b} {state} {n} times by {run_id}")
        if counts:
            out.notes.append(f"ledger: {state} rows nobody requested: {sorted(counts)[:5]}")
    held = landed(config, ds, "batch")
    for p, end in ends.items():
        log = [np.arange(a, b) for q, a, b in requested if q == p]
        cov = check_exactly_once(np.concatenate(log) if log else np.zeros(0, np.int64), held[held[:, 0] == p][:, 1],
                                 0, end)
        out.lost += len(cov.missing) + len(cov.unexpected)
        out.duplicated += len(cov.duplicated)


def _names(tis: list[dict]) -> str:
    return ", ".join(f"{t['task_id']} (try {t['try_number']})" for t in tis)


def _ts(value: str | None) -> float | None:
    return None if not value else datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _role(pid: int) -> str:
    """What an Airflow process is, from its command line (its process title)."""
    import psutil

    try:
        cmd = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return "gone"
    for marker, role in (("org.apache.spark.deploy.SparkSubmit", "spark-submit"), ("spark_jobs/", "spark driver"),
                         ("LocalExecutor: <idle>", "idle worker"), ("LocalExecutor", "busy worker"),
                         ("serve-logs", "log server"), ("airflow worker --", "task process"),
                         ("airflow scheduler", "scheduler")):
        if marker in cmd:
            return role
    return "other"


def _roles(procs) -> dict[str, int]:
    out: dict[str, int] = {}
    for pid in procs:
        role = _role(pid)
        out[role] = out.get(role, 0) + 1
    return dict(sorted(out.items()))
