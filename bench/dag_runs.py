"""The ``loglake_batch`` runs P5 and P9 are read from, on the bench's platform (``bench.stack``).

Each run is triggered through Airflow's REST API over fresh records in every dataset of
``P9_DATASETS`` once the speed streams have caught up with them; as many as fit ``BUDGET``.
Per run: its wall, when the batch watermark covered the records (``_WatermarkWatch``), and
each task taken apart (``_breakdown``): its queueing, and for a Spark task what its summary
says of the submission (``_spark_parts``).
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from datetime import datetime, timezone

from bench.harness import Harness
from bench.stack import Platform, Sampler
from loglake.kafka.admin import log_bounds
from loglake.ledger.ranges import batch_watermarks
from loglake.speed.control import SpeedStream
from loglake.local.demo import _client, _spark_overhead, dag_run, typed_run, wait_caught_up
from loglake.local.produce import produce
from loglake.ops.status import dataset_status

BUDGET = 14 * 60  # seconds for the whole platform run on 2 cores (`make bench` in all: under 40 min)
P9_RECORDS = 20_000  # new records per dataset before each run (2,000 with --quick)
P9_DATASETS = ("job_views", "company_ceos")
# The jobs' phases in the order they run (a summary's ``phases`` comes back from XCom with its
# keys sorted); others follow in their own order.
PHASE_ORDER = ("prepare", "read", "validate", "read_validate_write", "write", "quarantine", "commit", "quality",
               "results", "publish", "ledger")


def measure(h: Harness, plat: Platform, started: float) -> dict:
    """``loglake_batch`` runs triggered through the REST API, each over fresh records in every
    dataset of ``P9_DATASETS`` (once the speed streams have caught up with them), as many as fit
    ``BUDGET`` counted from ``started`` (the platform run's start); the platform's PSS sampled
    meanwhile (P8's batch figure).

    When the log holds more than a few records the batch layer has not recomputed yet (P8's
    events), a first run absorbs them: its Spark tasks count for P5 and its memory for P8, but
    it is not one of P9's runs, which are each over the same number of new records."""
    config = plat.config
    _airflow, client = _client(config)
    n = 2000 if h.quick else P9_RECORDS
    sizes = {name: n for name in P9_DATASETS if name in config.datasets}
    runs, note, failed_after = [], None, None
    sampler = Sampler(plat, 5.0)
    sampler.start()
    try:
        wait_caught_up(config, timeout=300)
        backlog = _backlog(config)
        try:
            if any(backlog.get(name, 0) > 0.05 * k for name, k in sizes.items()):
                h.log(f"P9: the log holds {backlog} records the batch layer has not recomputed (P8's events): "
                      "a first run absorbs them (counted for P5 and P8, not P9)")
                runs.append(_batch_run(h, plat, client, {}, "backlog", "absorbing the backlog"))
            while (measured := sum(r["kind"] == "measured" for r in runs)) < h.repeats:
                left = BUDGET - (time.monotonic() - started)
                if measured and left < runs[-1]["cycle_seconds"] * 1.2 + 60:
                    note = (f"{measured} of {h.repeats} runs: another (~{runs[-1]['cycle_seconds']:.0f}s with its "
                            f"records and the streams' catch-up) would not fit the platform run's {BUDGET // 60} min "
                            f"budget ({left:.0f}s left)")
                    h.log("P9: " + note)
                    break
                runs.append(_batch_run(h, plat, client, sizes, "measured", f"{measured + 1}/{h.repeats}"))
        except Exception as e:  # the runs done keep their figures
            if not runs:
                raise
            traceback.print_exc()
            failed_after = f"{type(e).__name__}: {e}"
            h.log(f"P9: failed after {len(runs)} run(s): {failed_after}")
    finally:
        pss = sampler.stop()
    return {"runs": runs, "note": note, "failed_after": failed_after, "sizes": sizes, "backlog": backlog,
            "pss": pss}


def _backlog(config) -> dict[str, int]:
    """Per dataset, how many records the log holds beyond the batch watermark (``loglake status``'s figure)."""
    return {name: sum(p.batch_lag for p in dataset_status(config, ds).partitions)
            for name, ds in config.datasets.items()}


def _batch_run(h: Harness, plat: Platform, client, sizes: dict[str, int], kind: str, label: str) -> dict:
    """Produce ``sizes`` records (2 % malformed), wait until the streams caught up, trigger
    ``loglake_batch`` and wait for it; its tasks (demo.dag_run's), their timestamps, the
    per-task breakdown and when the batch watermark covered the log ends read before the trigger."""
    config = plat.config
    t0 = time.monotonic()
    produced = {}
    for name, n in sizes.items():
        res = produce(config, config.dataset(name), n, bad_fraction=0.02, progress=False)
        produced[name] = {"records": res.records, "good": res.good, "bad": res.bad}
    t_produced = time.monotonic()
    wait_caught_up(config, timeout=300)
    t_caught_up = time.monotonic()
    bounds = {name: log_bounds(config, ds.topic) for name, ds in config.datasets.items()}
    # What the watermark must cover: the new records' datasets (all with a backlog for the first run).
    names = list(sizes) or [n for n, b in _backlog(config).items() if b]
    watch = _WatermarkWatch(config, {n: {p: hi for p, (lo, hi) in bounds[n].items() if hi > lo} for n in names},
                            {n: {p: lo for p, (lo, _hi) in bounds[n].items()} for n in names})
    plat.trees()  # (remembers the processes it sees)
    streams = {n: SpeedStream(config, ds).pid() is not None for n, ds in config.datasets.items()}
    h.log(f"P9: loglake_batch run {label}: produced {sizes or 'nothing'} in {t_produced - t0:.1f}s, streams caught "
          f"up {t_caught_up - t_produced:.1f}s later (running: {streams}); triggering ...")
    watch.start()
    try:
        run = dag_run(client, "loglake_batch", scheduled=False)
    finally:
        watch.stop()
    dr = client.call("GET", f"/dags/loglake_batch/dagRuns/{run['run_id']}")
    tis = client.task_instances("loglake_batch", run["run_id"])
    spark, mean = _spark_overhead(typed_run(run))
    queued_at, start = _ts(dr.get("queued_at")), _ts(dr.get("start_date"))
    run.update(kind=kind, spark_seconds=spark, mean_overhead=mean,
               timing={_ti_key(ti): _ti_times(ti) for ti in tis}, names=_dataset_names(run, tis),
               produced=produced, produce_seconds=round(t_produced - t0, 2),
               catch_up_seconds=round(t_caught_up - t_produced, 2), streams_running=streams,
               queued_at=dr.get("queued_at"), start_date=dr.get("start_date"), end_date=dr.get("end_date"),
               trigger_to_start=round((start - queued_at).total_seconds(), 2) if start and queued_at else None,
               watermark=watch.report(queued_at), breakdown=_breakdown(run, dr, tis))
    run["cycle_seconds"] = round(time.monotonic() - t0, 1)
    wm = run["watermark"]
    h.log(f"P9: run {run['run_id']} {run['state']} in {run['wall']:.1f}s (trigger→start {run['trigger_to_start']}s; "
          f"watermark covers the records {wm['trigger_to_covered']}s after the trigger {wm['per_dataset']}); "
          f"Spark {spark:.0f}s, mean Airflow overhead per Spark task {mean if mean is None else round(mean, 2)}s")
    for row in run["breakdown"]:
        h.log("P9:   " + row_text(row))
    return run


class _WatermarkWatch(threading.Thread):
    """Polls the batch watermarks (``loglake.ledger.ranges.batch_watermarks``, delta-rs, no JVM) every
    ``interval`` seconds until they cover ``targets`` (dataset → partition → log end)."""

    def __init__(self, config, targets: dict[str, dict[int, int]], earliest: dict[str, dict[int, int]],
                 interval: float = 1.0):
        super().__init__(daemon=True)
        self.config, self.targets, self.earliest, self.interval = config, targets, earliest, interval
        self.covered: dict[str, datetime] = {}
        self.polls, self.poll_seconds, self.error = 0, 0.0, None
        self.done = threading.Event()

    def check(self) -> None:
        for name, ends in self.targets.items():
            if name in self.covered:
                continue
            marks = batch_watermarks(self.config, self.config.dataset(name), earliest=self.earliest[name])
            if all(marks.get(p, -1) >= end for p, end in ends.items()):
                self.covered[name] = datetime.now(timezone.utc)

    def run(self):
        while not self.done.is_set() and len(self.covered) < len(self.targets):
            t = time.monotonic()
            try:
                self.check()
            except Exception as e:  # a read racing a commit: the next poll
                self.error = f"{type(e).__name__}: {e}"
            self.polls += 1
            self.poll_seconds += time.monotonic() - t
            self.done.wait(max(0.0, self.interval - (time.monotonic() - t)))

    def stop(self) -> None:
        self.done.set()
        self.join(30)
        with contextlib.suppress(Exception):
            self.check()  # covered after the last poll: stamped now (an upper bound)

    def report(self, trigger: datetime | None) -> dict:
        per = {n: round((self.covered[n] - trigger).total_seconds(), 2) if trigger and n in self.covered else None
               for n in self.targets}
        done = bool(per) and all(v is not None for v in per.values())
        return {"trigger_to_covered": max(per.values()) if done else None, "per_dataset": per,
                "polls": self.polls, "poll_ms_mean": round(1000 * self.poll_seconds / self.polls) if self.polls else None,
                "poll_error": self.error}


def _ts(v: str | None) -> datetime | None:
    return datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None


def _ti_key(ti: dict) -> tuple[str, str]:
    """demo.dag_run's key of a task instance: (task id, dataset or map index)."""
    return ti["task_id"], ti.get("rendered_map_index") or str(ti["map_index"])


def _dataset_names(run: dict, tis: list[dict]) -> dict[str, str]:
    """Map index → dataset (the mapped group's tasks share an index): the name recompute and
    quality render as their map index, else the ``dataset`` their summaries (or diff's rows) name."""
    names = {str(ti["map_index"]): ti["rendered_map_index"] for ti in tis
             if ti["map_index"] >= 0 and ti.get("rendered_map_index") and not str(ti["rendered_map_index"]).isdigit()}
    for (_task_id, key), t in run["tasks"].items():
        v = t.get("value")
        v = v[0] if isinstance(v, list) and v else v
        if key.isdigit() and isinstance(v, dict) and isinstance(v.get("dataset"), str):
            names.setdefault(key, v["dataset"])
    return names


def _breakdown(run: dict, dr: dict, tis: list[dict]) -> list[dict]:
    """One row per task instance of a run, in start order: when it was scheduled, started and
    ended (seconds after the run's start), its queueing, duration and, for a Spark task, what
    its summary says of the submission (see ``_spark_parts``)."""
    t0 = _ts(dr.get("start_date"))
    names = _dataset_names(run, tis)

    def offset(v):
        t = _ts(v)
        return round((t - t0).total_seconds(), 2) if t and t0 else None

    rows = []
    for ti in tis:
        task = run["tasks"].get(_ti_key(ti), {})
        value = task.get("value")
        row = {"task": ti["task_id"].split(".")[-1],
               "dataset": names.get(str(ti["map_index"])) if ti["map_index"] >= 0 else None,
               "state": ti["state"], "scheduled": offset(ti.get("scheduled_when")), "start": offset(ti.get("start_date")),
               "end": offset(ti.get("end_date")), "duration": ti.get("duration"), **_ti_times(ti)}
        if isinstance(value, dict) and value.get("submit_seconds") is not None:
            row.update(_spark_parts(value, ti.get("duration")))
        rows.append(row)
    return sorted(rows, key=lambda r: (r["start"] is None, r["start"] or 0, r["task"], r["dataset"] or ""))


def _spark_parts(v: dict, duration: float | None) -> dict:
    """A Spark task's summary, taken apart: ``submit_seconds`` (the submission's wall, seen by the
    task), ``seconds`` (the job's own work), ``start_overhead`` = submit − work (JVM/session start
    and submit overhead); where the summary has them, ``session_seconds`` (JVM + session start;
    ``start_seconds`` in some versions) with ``submit_other`` = submit − work − session,
    ``phases`` (name → seconds) and ``shared_application``; ``airflow_overhead`` = task − submit."""
    submit, work = v["submit_seconds"], v.get("seconds")
    out = {"submit_seconds": submit, "seconds": work}
    if work is not None:
        out["start_overhead"] = round(submit - work, 3)
    session = v.get("session_seconds", v.get("start_seconds"))
    if isinstance(session, (int, float)):
        out["session_seconds"] = round(session, 3)
        if work is not None:
            out["submit_other"] = round(submit - work - session, 3)
    phases = v.get("phases")
    if isinstance(phases, dict):
        out["phases"] = {k: round(phases[k], 3) for k in phase_order(phases) if isinstance(phases[k], (int, float))}
    if "shared_application" in v:
        out["shared_application"] = bool(v["shared_application"])
    if duration is not None:
        out["airflow_overhead"] = round(duration - submit, 3)
    if v.get("records") is not None:  # recompute: records written + quarantined
        out["records"] = v["records"] + (v.get("quarantined") or 0)
    if v.get("rows") is not None:  # quality: rows of the ranges it checked
        out["rows"] = v["rows"]
    return out


def phase_order(names) -> list[str]:
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda n: (PHASE_ORDER.index(n) if n in PHASE_ORDER else len(PHASE_ORDER), names.index(n)))


def seconds_text(v: float | None) -> str:
    """Seconds, short: one decimal under 10."""
    if v is None:
        return "?"
    return f"{v:.1f}" if abs(v) < 10 else f"{v:.0f}"


def row_text(r: dict) -> str:
    """One task's line: 'recompute job_views 31 s (start 20, work 9 [read 2, write 5])'."""
    label = r["task"] + (f" {r['dataset']}" if r.get("dataset") else "")
    text = f"{label} {seconds_text(r.get('duration'))} s"
    if r.get("submit_seconds") is None:
        return text
    shared = r.get("shared_application")
    inner = (["shared app"] if shared is True else
             [f"shared app in {r.get('shared_runs')} of {r.get('runs')} runs"] if shared == "mixed" else [])
    if r.get("start_overhead") is not None:
        inner.append(f"start {seconds_text(r['start_overhead'])}"
                     + (f" (session {seconds_text(r['session_seconds'])})" if r.get("session_seconds") is not None else ""))
    if r.get("seconds") is not None:
        inner.append(f"work {seconds_text(r['seconds'])}"
                     + (" [" + ", ".join(f"{k} {seconds_text(x)}" for k, x in r["phases"].items()) + "]" if r.get("phases") else ""))
    return text + (f" ({', '.join(inner)})" if inner else "")


def _ti_times(ti: dict) -> dict:
    """Seconds from scheduled to queued, and from queued to running, of one task instance."""
    sched, queued, start = _ts(ti.get("scheduled_when")), _ts(ti.get("queued_when")), _ts(ti.get("start_date"))
    return {"scheduled_to_queued": round((queued - sched).total_seconds(), 2) if sched and queued else None,
            "queued_to_running": round((start - queued).total_seconds(), 2) if queued and start else None}
