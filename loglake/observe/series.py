"""A small time series per dataset under ``<state>/metrics/series/<dataset>.jsonl``.

Each line is one event, appended by whoever did the work: the speed stream after each
micro-batch (``micro_batch``), a Spark job when it ends (``job``), the exporter's sampler at
its interval (``sample``: lag and watermark lag). Counters and histograms are folded from the
events (``totals``); events older than ``metrics.keep_hours`` are folded into the file's first
line (``base``) by ``compact``, so a counter never goes back and the file stays small.

Appends and the compaction take the file's lock (``fcntl.flock``); a line is written whole in
one ``write`` (O_APPEND). Recording never raises: a stream or a job must not fail because its
metrics could not be kept (the failure is said once on stderr).

An ``s3a://`` lake keeps its series on the lake's object store instead, under
``<lake root>/_loglake_metrics/series/<dataset>/`` — the processes that write them (the speed
streams, the jobs' drivers, the exporter) run on different hosts and share no filesystem, and an
object cannot be appended to. So each process writes objects of its own: ``events/<window>-<writer>.jsonl``
holds that process's events of one ten-minute window and is rewritten whole at each event
(``WINDOW_SECONDS``; a window's object is small). Compaction folds the events older than the
cutoff into ``base.json`` (a compare-and-swap on its ETag: of two exporters compacting at once,
one wins and the other does nothing) and then deletes the windows wholly before it; readers
count an event only when it is not older than the base's cutoff, so an object folded but not
yet deleted is never counted twice.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from loglake.core import objectstore
from loglake.core.config import Config

# Upper bounds (seconds) of the duration histograms' buckets (micro-batches, jobs, freshness).
BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
LAYERS = ("speed", "batch")
# An object-store series: each process's events of one window are one object.
WINDOW_SECONDS = 600

_said: set[str] = set()


def directory(config: Config) -> Path:
    return config.home / "metrics" / "series"


def store_root(config: Config) -> str | None:
    """Where an ``s3a://`` lake keeps its series (None: under the state directory)."""
    lake = config.lake_root
    return f"{lake.rstrip('/')}/_loglake_metrics/series" if objectstore.is_remote(lake) else None


def path(config: Config, dataset: str) -> Path:
    return directory(config) / f"{dataset}.jsonl"


@contextmanager
def _locked(file: Path):
    file.parent.mkdir(parents=True, exist_ok=True)
    with open(file.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record(config: Config, dataset: str, kind: str, at: float | None = None, **fields) -> dict:
    """Append one event (``kind``, the time ``at`` or now, ``fields``) to ``dataset``'s series;
    the event."""
    event = {"t": round(time.time() if at is None else at, 3), "kind": kind, **fields}
    root = store_root(config)
    where = f"{root}/{dataset}" if root else str(path(config, dataset))
    try:
        if root:
            _STORE.record(config.object_store, f"{root}/{dataset}", event)
        else:
            _append(path(config, dataset), _line(event))
    except Exception as e:  # noqa: BLE001 - never the stream's or the job's failure
        if where not in _said:
            _said.add(where)
            print(f"loglake: could not keep metrics in {where}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return event


def _line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"), default=str) + "\n"


def _append(file: Path, line: str) -> None:
    with _locked(file):
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _parse_lines(text: str):
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:  # a line cut short by a crash
            continue


def events(config: Config, dataset: str, since: float | None = None) -> list[dict]:
    """The events of ``dataset``'s series, oldest first (the ``base`` line first when there is
    one, whatever ``since``); a line cut short by a crash is skipped."""
    root = store_root(config)
    if root:
        base, _etag, every = _STORE.read(config.object_store, f"{root}/{dataset}", since)
    else:
        try:
            every = list(_parse_lines(path(config, dataset).read_text()))
        except FileNotFoundError:
            every = []
        base = next((e for e in every if e.get("kind") == "base"), None)
        every = [e for e in every if e.get("kind") != "base"]
    return _with_base(base, [e for e in every if since is None or e.get("t", 0) >= since])


def _with_base(base: dict | None, every: list[dict]) -> list[dict]:
    """The base, then the events it has not folded (an object folded but not yet deleted)."""
    if base is None:
        return every
    return [base] + [e for e in every if e.get("t", 0) >= base["t"]]


def compact(config: Config, dataset: str, keep_seconds: float, now: float | None = None) -> int:
    """Fold the events older than ``keep_seconds`` into the base line; returns how many were folded."""
    cutoff = (time.time() if now is None else now) - keep_seconds
    root = store_root(config)
    if root:
        return _STORE.compact(config.object_store, f"{root}/{dataset}", cutoff)
    file = path(config, dataset)
    with _locked(file):
        every = events(config, dataset)
        base, old, kept = _split(every, cutoff)
        if not old:
            return 0
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(_line(e) for e in [base, *kept]))
        tmp.replace(file)
        return len(old)


def _split(every: list[dict], cutoff: float) -> tuple[dict, list[dict], list[dict]]:
    """(the new base at ``cutoff``, the events it folds, the events kept) of a series' events."""
    old = [e for e in every if e.get("kind") != "base" and e.get("t", 0) < cutoff]
    kept = [e for e in every if e.get("kind") != "base" and e.get("t", 0) >= cutoff]
    base = {"t": cutoff, "kind": "base", "totals": totals(e for e in every if e.get("t", 0) < cutoff
                                                           or e.get("kind") == "base")}
    return base, old, kept


class _ObjectSeries:
    """The series of an ``s3a://`` lake (the module's docstring): this process's windows it
    writes, and the objects it has read, by ETag (a sample reads only what changed). Each call
    is given the store (the config's ``object_store``) its series is on."""

    def __init__(self):
        self.lock = threading.Lock()
        self.writer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.windows: dict[str, dict[int, list[dict]]] = {}  # series → window → this process's events
        self.cache: dict[str, tuple[str, list[dict]]] = {}    # object → (ETag, events)

    @staticmethod
    def _window_of(uri: str) -> int:
        return int(uri.rsplit("/", 1)[1].split("-", 1)[0])

    def record(self, store, series_uri: str, event: dict) -> None:
        window = int(event["t"] // WINDOW_SECONDS * WINDOW_SECONDS)
        with self.lock:
            mine = self.windows.setdefault(series_uri, {})
            mine.setdefault(window, []).append(event)
            for old in [w for w in mine if w < window - 6 * WINDOW_SECONDS]:  # never written again
                del mine[old]
            text = "".join(_line(e) for e in mine[window])
            objectstore.put_text(store, f"{series_uri}/events/{window:010d}-{self.writer}.jsonl", text)

    def read(self, store, series_uri: str, since: float | None) -> tuple[dict | None, str | None, list[dict]]:
        """(the base, its ETag, the events of the windows not wholly before ``since``).

        The windows first, the base last: a compaction writes its base before it deletes the
        windows it folded, so a window this read missed (deleted meanwhile) is in the base it
        reads after, and an event in both is counted once (``_with_base``). Read the other way
        round, a compaction between the two dropped the events it folded (a counter dipped)."""
        listed = objectstore.listing(store, f"{series_uri}/events/")
        every = []
        with self.lock:
            for uri in [u for u in self.cache if u.startswith(f"{series_uri}/") and u not in listed]:
                del self.cache[uri]
        for uri, tag in sorted(listed.items()):
            if since is not None and self._window_of(uri) + WINDOW_SECONDS <= since:
                continue
            cached = self.cache.get(uri)
            if cached is None or cached[0] != tag:
                try:
                    cached = (tag, list(_parse_lines(objectstore.read_text(store, uri))))
                except FileNotFoundError:  # deleted by a compaction since the listing
                    continue
                with self.lock:
                    self.cache[uri] = cached
            every.extend(cached[1])
        every.sort(key=lambda e: e.get("t", 0))
        base, etag = objectstore.get_json(store, f"{series_uri}/base.json")
        return base, etag, every

    def compact(self, store, series_uri: str, cutoff: float) -> int:
        base, etag, every = self.read(store, series_uri, None)
        new_base, old, _kept = _split(_with_base(base, every), cutoff)
        if not old:
            return 0
        if objectstore.put_json(store, f"{series_uri}/base.json", new_base, etag) is None:
            return 0  # another exporter compacted first: its base holds these events
        for uri in objectstore.listing(store, f"{series_uri}/events/"):
            if self._window_of(uri) + WINDOW_SECONDS <= cutoff:
                objectstore.delete(store, uri)
        return len(old)


_STORE = _ObjectSeries()


def empty_histogram() -> dict:
    return {"buckets": [0] * len(BUCKETS), "count": 0, "sum": 0.0}


def observe(histogram: dict, value: float) -> None:
    """Count ``value`` in ``histogram`` (cumulative buckets are made when exported)."""
    for i, bound in enumerate(BUCKETS):
        if value <= bound:
            histogram["buckets"][i] += 1
            break
    histogram["count"] += 1
    histogram["sum"] = round(histogram["sum"] + value, 6)


def empty_totals() -> dict:
    return {
        "records": {layer: 0 for layer in LAYERS},       # valid records each layer took in, each offset once
        "quarantined": {layer: {} for layer in LAYERS},  # per reason code
        "micro_batches": 0,
        "micro_batch_seconds": empty_histogram(),
        "freshness_seconds": empty_histogram(),          # the serving view's age at each sample
        "jobs": {},                                      # job → {"runs", "failed", "seconds": histogram}
        "last_job": {},                                  # job → its last event (run, seconds, phases)
        "last_publish": None,                            # when a batch run last published (epoch s)
    }


def fold(t: dict, e: dict) -> None:
    """Add event ``e`` to the totals ``t``."""
    kind = e.get("kind")
    if kind == "base":
        _merge(t, e["totals"])
    elif kind == "micro_batch":
        t["records"]["speed"] += int(e.get("records", 0))
        _add_reasons(t["quarantined"]["speed"], e.get("quarantined") or {})
        t["micro_batches"] += 1
        observe(t["micro_batch_seconds"], float(e.get("seconds", 0.0)))
    elif kind == "sample":
        if e.get("speed_lag_seconds") is not None:
            observe(t["freshness_seconds"], float(e["speed_lag_seconds"]))
    elif kind == "job":
        job = e["job"]
        j = t["jobs"].setdefault(job, {"runs": 0, "failed": 0, "seconds": empty_histogram()})
        j["runs"] += 1
        j["failed"] += 0 if e.get("ok", True) else 1
        observe(j["seconds"], float(e.get("seconds", 0.0)))
        t["last_job"][job] = {k: e.get(k) for k in ("t", "run_id", "ok", "seconds", "phases")}
        if e.get("ok", True) and job == "batch":
            _add_reasons(t["quarantined"]["batch"], e.get("quarantined") or {})
        if e.get("ok", True) and e.get("published_records") is not None:
            # Each offset once: a publish counts the valid records of offsets none had published before.
            t["records"]["batch"] += int(e["published_records"])
        if e.get("published"):
            t["last_publish"] = max(t["last_publish"] or 0, e["t"])


def totals(evts) -> dict:
    t = empty_totals()
    for e in evts:
        fold(t, e)
    return t


def _add_reasons(into: dict, reasons: dict) -> None:
    for reason, n in reasons.items():
        into[reason] = into.get(reason, 0) + int(n)


def _merge(t: dict, base: dict) -> None:
    """Add the folded totals ``base`` to ``t``."""
    for layer in LAYERS:
        t["records"][layer] += base["records"].get(layer, 0)
        _add_reasons(t["quarantined"][layer], base["quarantined"].get(layer, {}))
    t["micro_batches"] += base["micro_batches"]
    for name in ("micro_batch_seconds", "freshness_seconds"):
        _merge_histogram(t[name], base[name])
    for job, j in base["jobs"].items():
        mine = t["jobs"].setdefault(job, {"runs": 0, "failed": 0, "seconds": empty_histogram()})
        mine["runs"] += j["runs"]
        mine["failed"] += j["failed"]
        _merge_histogram(mine["seconds"], j["seconds"])
    for job, last in base["last_job"].items():
        if job not in t["last_job"] or (t["last_job"][job].get("t") or 0) < (last.get("t") or 0):
            t["last_job"][job] = last
    if base.get("last_publish"):
        t["last_publish"] = max(t["last_publish"] or 0, base["last_publish"])


def _merge_histogram(into: dict, other: dict) -> None:
    into["buckets"] = [a + b for a, b in zip(into["buckets"], other["buckets"])]
    into["count"] += other["count"]
    into["sum"] = round(into["sum"] + other["sum"], 6)


def rate_per_minute(evts: list[dict], kind: str, value, since: float, now: float) -> list[tuple[float, float]]:
    """``value(event)`` summed per minute over [since, now): (minute start, sum) for the charts."""
    start = math.floor(since / 60) * 60
    sums: dict[float, float] = {}
    for e in evts:
        if e.get("kind") == kind and since <= e.get("t", 0) < now:
            minute = math.floor(e["t"] / 60) * 60
            sums[minute] = sums.get(minute, 0.0) + value(e)
    return [(m, sums.get(m, 0.0)) for m in range(int(start), int(now), 60)]
