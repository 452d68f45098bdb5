"""What every benchmark module shares: a state directory, one broker, configs, results, charts.

A benchmark module is ``bench/<name>.py`` with ``run(h: Harness) -> list[dict]``; each dict
is one metric (see ``result``). ``bench/run.py`` runs the modules in order, writes
``bench/results/<date>.json``, one PNG chart per metric and a markdown table, and prints
the table. Benchmarks are programs, not tests: they measure and report, they assert nothing.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import psutil

REPO = Path(__file__).resolve().parent.parent


class Harness:
    """One bench run: ``root`` holds every module's state; one embedded broker, started lazily."""

    def __init__(self, root: Path, repeats: int = 3, quick: bool = False):
        self.root = root
        self.repeats = repeats
        self.quick = quick  # smaller data, for trying a module out (figures not comparable)
        self._kafka = None
        self._spark = None
        self.started = time.monotonic()

    # -- services -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        if self._kafka is None:
            from loglake.local.broker import EmbeddedKafka

            self._kafka = EmbeddedKafka.on_free_ports(self.root / "kafka-home", heap="1g")
        return self._kafka.bootstrap

    def config(self, name: str, bootstrap: str | None = None, **conf_kwargs):
        """A Config of its own (conf dir, topics, state dir) on the shared broker (or on
        ``bootstrap``); see sandbox.write_conf."""
        from loglake.core.config import load_config
        from loglake.testing import write_conf

        base = self.root / name
        # No console progress bars: they would bury the bench's own log lines.
        conf_kwargs.setdefault("spark", {"driver_memory": "4g", "conf": {"spark.ui.showConsoleProgress": "false"}})
        return load_config(write_conf(base, bootstrap or self.bootstrap, **conf_kwargs), home=base / "state")

    def spark(self, config):
        """One in-process Spark session for the whole run (settings of the first config)."""
        if self._spark is None:
            from loglake.jobs.session import get_spark

            self._spark = get_spark(config, "loglake-bench")
        return self._spark

    def stop_spark(self) -> None:
        """Stop the shared session (a module that needs the cores for something else)."""
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def close(self) -> None:
        self.stop_spark()
        if self._kafka is not None:
            self._kafka.stop()
            self._kafka = None

    # -- helpers --------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.started:7.1f}s] {msg}", flush=True)

    def repeat(self, fn: Callable[[int], Any], n: int | None = None) -> list[Any]:
        """Call ``fn(i)`` ``n`` (default ``repeats``) times; the list of its results."""
        return [fn(i) for i in range(n or self.repeats)]


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

    ``chart`` is drawn by ``draw_chart``: ``{"kind": "bar", "labels": [...], "values": [...],
    "ylabel": ...}``, ``{"kind": "lines", "x": [...], "series": {label: [...]}, "xlabel": ...,
    "ylabel": ...}``, ``{"kind": "hbar", "labels": [...], "segments": {name: [...]}, "left": [...],
    "notes": [...], "colors": {name: color}, "xlabel": ...}`` (horizontal bars, one per label,
    its segments stacked from ``left``: a timeline when ``left`` holds start times; ``notes`` at
    the bars' ends, their lengths by default) or ``{"kind": "panels", "panels": [spec, ...]}``;
    a panel may give its ``width`` (inches, 5.5 by default), the spec its ``height`` (4).
    """
    return {"id": id, "title": title, "value": value, "unit": unit, "goal": goal, "met": met,
            "reference": reference or {}, "runs": runs or [], "detail": detail or {}, "chart": chart}


def machine() -> dict:
    """What the figures were measured on."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # the CPU's name is in /proc/cpuinfo only (psutil has counts, not names)
    mem_kb = psutil.virtual_memory().total // 1024
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "os": platform.platform(), "python": sys.version.split()[0], "java": java[0] if java else "",
            "commit": commit}


def draw_chart(metric: dict, path: Path, machine_line: str) -> Path | None:
    """A PNG for one metric's ``chart`` spec; None when it has none."""
    spec = metric.get("chart")
    if not spec:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = spec["panels"] if spec["kind"] == "panels" else [spec]
    widths = [p.get("width", 5.5) for p in panels]  # inches; a panel may ask for more
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(widths), spec.get("height", 4)), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, p in zip(axes[0], panels):
        if p["kind"] == "hbar":
            _hbar(ax, p)
            continue
        if p["kind"] == "bar":
            bars = ax.bar(p["labels"], p["values"], color=p.get("colors"))
            ax.bar_label(bars, labels=[_short(v) for v in p["values"]], fontsize=8)
            ax.tick_params(axis="x", labelrotation=p.get("rotate", 0), labelsize=8)
        else:
            for label, ys in p["series"].items():
                ax.plot(p["x"], ys, marker="o", label=label)
                for x, y in zip(p["x"], ys):
                    ax.annotate(_short(y), (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
            if p.get("logx"):
                ax.set_xscale("log")
            ax.set_xticks(p["x"], [str(x) for x in p.get("xticklabels", p["x"])])
            ax.set_xlabel(p.get("xlabel", ""))
            ax.legend(fontsize=8)
        if p.get("goal") is not None:
            ax.axhline(p["goal"], color="grey", linestyle="--", linewidth=1, label="goal")
        ax.set_ylabel(p.get("ylabel", ""))
        ax.set_title(p.get("title", ""), fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{metric['id']} {metric['title']}\n{machine_line}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _hbar(ax, p: dict) -> None:
    """Horizontal bars, one per label, each a stack of segments starting at ``left`` (0 by default)."""
    y = list(range(len(p["labels"])))
    start = [v or 0 for v in p.get("left") or [0] * len(y)]
    left = list(start)
    colors = p.get("colors") or {}
    for name, values in p["segments"].items():
        values = [v or 0 for v in values]
        if any(values):
            ax.barh(y, values, left=left, label=name, height=0.7, color=colors.get(name))
        left = [a + b for a, b in zip(left, values)]
    notes = p.get("notes") or [_short(end - s) for s, end in zip(start, left)]  # by default each bar's length
    for yi, end, note in zip(y, left, notes):
        ax.annotate(note, (end, yi), textcoords="offset points", xytext=(3, -3), fontsize=7)
    ax.set_yticks(y, p["labels"], fontsize=7)
    ax.invert_yaxis()
    if p.get("goal") is not None:
        ax.axvline(p["goal"], color="grey", linestyle="--", linewidth=1, label="goal")
    ax.set_xlabel(p.get("xlabel", ""))
    ax.set_title(p.get("title", ""), fontsize=9)
    ax.set_xlim(0, max(left, default=0) * 1.12 or None)  # room for the notes
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, frameon=False)


def _short(v: float) -> str:
    if v is None:
        return ""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.2f}M"
    if a >= 1e4:
        return f"{v / 1e3:.0f}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def fmt(v, unit: str) -> str:
    if v is None:
        return "—"
    if unit in ("records/s",):
        return f"{v:,.0f} {unit}"
    if unit in ("ratio", "x"):
        return f"{v:.2f}{'×' if unit == 'x' else ''}"
    return f"{v:,.2f} {unit}" if isinstance(v, float) else f"{v:,} {unit}"


def table(metrics: list[dict]) -> str:
    """The markdown table of a run (also what ``make bench`` prints)."""
    lines = ["| Metric | Value | Goal | Met | Reference / detail |", "|---|---|---|---|---|"]
    for m in metrics:
        met = {True: "yes", False: "**no**", None: "—"}[m.get("met")]
        ref = m.get("summary") or ", ".join(f"{k}: {v}" for k, v in m.get("reference", {}).items())
        lines.append(f"| {m['id']} {m['title']} | {fmt(m['value'], m['unit'])} | {m.get('goal') or '—'} | {met} | {ref} |")
    return "\n".join(lines)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)
