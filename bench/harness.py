"""What every benchmark module shares: a lab (one broker, one Spark session, configs), repeats, results.

A benchmark module is ``bench/<name>.py`` with ``run(h: Harness, only) -> list[dict]``; each
dict is one metric (see ``result``). ``bench/run.py`` runs the modules in order, writes
``bench/results/<date>.json``, one PNG chart per metric and a markdown table
(``bench/report.py``), and prints the table. Benchmarks are programs, not tests: they measure
and report, they assert nothing.
"""

from __future__ import annotations

import collections
import shutil
import statistics
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from loglake.testing import Lab


class Harness(Lab):
    """One bench run: a ``loglake.testing.Lab`` under ``root`` holding every module's state (one
    embedded broker, started on first use; one in-process Spark session for the whole run, with
    the settings of the first config it is asked for), and the run's settings."""

    def __init__(self, root: Path, repeats: int = 3, quick: bool = False):
        # The in-process driver holds the benchmarks' data: 4 GiB (a config given ``spark``
        # settings of its own has those instead).
        super().__init__(root, heap="1g", app_name="loglake-bench", conf_defaults={"spark": {"driver_memory": "4g"}})
        self.repeats = repeats
        self.quick = quick  # smaller data, for trying a module out (figures not comparable)
        self.started = time.monotonic()
        self._once: dict[str, tuple[bool, Any]] = {}

    def log(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {msg}", flush=True)

    def repeat(self, fn: Callable[[int], Any], n: int | None = None) -> list[Any]:
        """Call ``fn(i)`` ``n`` (default ``repeats``) times; the list of its results."""
        return [fn(i) for i in range(n or self.repeats)]

    def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` the first time ``key`` is asked for in this run, its value after (or its
        exception again): a measurement several modules report on is made once."""
        if key not in self._once:
            try:
                self._once[key] = (True, fn())
            except Exception as e:  # every module that needs it fails the same way
                self._once[key] = (False, e)
        ok, value = self._once[key]
        if not ok:
            raise value
        return value


@contextmanager
def scratch(prefix: str, keep: bool = False, **kwargs) -> Iterator[Harness]:
    """A ``Harness`` (``kwargs``) on a new temporary root; closed after, and the root removed
    unless ``keep``."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    h = Harness(root, **kwargs)
    try:
        yield h
    finally:
        h.close()
        if keep:
            print(f"state kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


class PeakPss:
    """Samples the proportional set size of some process trees (``roots()``: their pids, each
    with every process below it) every ``every`` seconds, and keeps the maximum, while in its
    ``with`` block."""

    def __init__(self, roots: Callable[[], Any], every: float = 0.5):
        self.roots, self.every, self.peak, self._stop = roots, every, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from loglake.core.processes import descendants, pss_bytes

        while True:
            procs = set()
            for pid in self.roots():
                procs.update(descendants(pid))
            self.peak = max(self.peak, pss_bytes(procs))
            if self._stop.wait(self.every):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def jvm_pid(spark) -> int:
    """The process id of a Spark session's driver JVM."""
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())


def median(values) -> float:
    return statistics.median(values)


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    s = sorted(values)
    if not s:
        raise ValueError("no values")
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def result(id: str, title: str, value: float, unit: str, *, goal: str | None = None, met: bool | None = None,
           reference: dict | None = None, runs: list | None = None, detail: dict | None = None,
           chart: dict | None = None) -> dict:
    """One metric. ``goal`` is text such as ``">= 0.5"``; ``met`` whether the value reaches it.

    ``chart`` is drawn by ``bench.report.draw_chart``: ``{"kind": "bar", "labels": [...],
    "values": [...], "ylabel": ...}``, ``{"kind": "lines", "x": [...], "series": {label: [...]}, "xlabel": ...,
    "ylabel": ...}``, ``{"kind": "hbar", "labels": [...], "segments": {name: [...]}, "left": [...],
    "notes": [...], "colors": {name: color}, "xlabel": ...}`` (horizontal bars, one per label,
    its segments stacked from ``left``: a timeline when ``left`` holds start times; ``notes`` at
    the bars' ends, their lengths by default) or ``{"kind": "panels", "panels": [spec, ...]}``;
    a panel may give its ``width`` (inches, 5.5 by default), the spec its ``height`` (4).
    """
    return {"id": id, "title": title, "value": value, "unit": unit, "goal": goal, "met": met,
            "reference": reference or {}, "runs": runs or [], "detail": detail or {}, "chart": chart}


def store_requests(log_path: Path, since: int = 0) -> collections.Counter:
    """versitygw's request lines (``time | vgw | status | took | ip | METHOD | /bucket/key | - | query``)
    written to ``log_path`` after byte ``since``, counted by (operation, what the key is)."""
    with log_path.open("rb") as f:
        f.seek(since)
        log_lines = f.read().decode(errors="replace").splitlines()
    out: collections.Counter = collections.Counter()
    for line in log_lines:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 8 or parts[1] != "vgw":
            continue
        method, path, query = parts[5], parts[6], " ".join(parts[7:])
        if method not in ("GET", "PUT", "HEAD", "DELETE", "POST"):  # two lines written into each other
            continue
        op = "LIST" if method == "GET" and "list-type" in query else method
        key = path.split("/", 2)[2] if path.count("/") >= 2 else ""
        what = ("delta log: checkpoint" if "/_delta_log/" in key and ".checkpoint" in key else
                "delta log: _last_checkpoint" if key.endswith("_last_checkpoint") else
                "delta log" if "/_delta_log" in key or "_delta_log" in query else
                "stream checkpoint" if key.startswith("checkpoints/") or "checkpoints%2F" in query else
                "data file" if key.endswith(".parquet") else
                "loglake (leases, positions, series)" if key else "bucket")
        out[(op, what)] += 1
    return out
