"""`make bench`: every loglake benchmark beside its reference, on this machine, in one run.

Runs the modules below in order (each measurement repeated, medians reported), then
writes ``bench/results/<date>.json`` (every run's raw figures and the machine),
``bench/results/<date>-<metric>.png`` (one chart per metric) and
``bench/results/<date>.md`` (the table, also printed). State lives in a temporary
directory (``--keep`` keeps it); the run starts its own broker on a free port, so it never
touches a running ``make up``.

    .venv/bin/python -m bench.run                 # everything (about 30-40 min on 2 cores)
    .venv/bin/python -m bench.run --only P1,P4    # some metrics, merged into today's file
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

from bench.harness import scratch
from bench.report import draw_chart, table, write_json
from loglake.core.paths import REPO_ROOT
from loglake.testing import machine
from loglake.testing.machine import stack_line

# module → the metrics it reports, in run order. P5, P7, P8 and P9 come from one run of the
# whole platform (bench.platform_run: Spark stopped first), made by the first of them that runs.
MODULES = {
    "bench.speed": ["P1", "P2", "P10", "S"],
    "bench.formats": ["F1"],
    "bench.cdc": ["F2"],
    "bench.erasure": ["E1", "E2"],
    "bench.microbatch": ["P11"],
    "bench.freshness": ["P3"],
    "bench.batch": ["P4", "P12"],
    "bench.compaction": ["P6"],
    "bench.overhead": ["P5"],
    "bench.startup": ["P7"],
    "bench.memory": ["P8"],
    "bench.batch_freshness": ["P9"],
    "bench.cluster": ["C1", "C2", "C3"],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated metric ids (P1..P12, S for the scaling curve, F1 Avro beside JSON, F2 Debezium JSON beside a plain changelog, E1 an erasure's cost on a 5M-row table, E2 the speed layer with 10,000 erased keys ÷ none, C1..C3 the local cluster)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--quick", action="store_true", help="small data, to try the program out (not comparable)")
    ap.add_argument("--out", default=str(REPO_ROOT / "bench" / "results"), help="results directory")
    ap.add_argument("--keep", action="store_true", help="keep the temporary state directory")
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

    wanted = set(args.only.upper().split(",")) if args.only else None
    unknown = (wanted or set()) - {m for ms in MODULES.values() for m in ms}
    if unknown:
        ap.error(f"--only: unknown metric(s) {sorted(unknown)}; expected some of P1..P11, S, F1, C1..C3")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = dt.date.today().isoformat()
    json_path = out / f"{date}.json"
    previous = json.loads(json_path.read_text()) if wanted and json_path.exists() else {}
    host = machine()
    machine_line = measured_on(host, date)

    metrics: dict[str, dict] = {m["id"]: m for m in previous.get("metrics", [])}
    failures = {}
    started = time.monotonic()
    with scratch("loglake-bench-", keep=args.keep, repeats=args.repeats, quick=args.quick) as h:
        for module, ids in MODULES.items():
            if wanted is not None and not wanted & set(ids):
                continue
            h.log(f"== {module} ({', '.join(ids)})")
            t0 = time.monotonic()
            try:
                for m in importlib.import_module(module).run(h, only=wanted):
                    # A metric of a measurement shared by modules carries that measurement's seconds.
                    m.setdefault("module_seconds", round(time.monotonic() - t0, 1))
                    m["commit"] = host["commit"]
                    metrics[m["id"]] = m
            except Exception as e:  # one module failing must not lose the others' figures
                traceback.print_exc()
                failures[module] = f"{type(e).__name__}: {e}"
            h.log(f"== {module} done in {time.monotonic() - t0:.0f}s")

    order = [m for ids in MODULES.values() for m in ids]
    ordered = sorted(metrics.values(), key=lambda m: order.index(m["id"]) if m["id"] in order else 99)
    for m in ordered:
        if m["id"] in (wanted or {m["id"]}):
            png = draw_chart(m, out / f"{date}-{m['id']}.png", machine_line)
            m["chart_file"] = png.name if png else None
    doc = merged(previous if wanted else {}, {
        "date": date, "machine": host, "quick": args.quick, "repeats": args.repeats,
        "seconds": round(time.monotonic() - started, 1), "failures": failures, "metrics": ordered})
    write_json(json_path, doc)
    md = f"Measured {date} on {header(doc)}; `make bench`, median of {args.repeats} runs.\n\n{table(ordered)}\n"
    (out / f"{date}.md").write_text(md)
    print("\n" + md)
    print(f"results: {json_path} (+ charts and {date}.md) in {time.monotonic() - started:.0f}s")
    if failures:
        print("failed modules: " + "; ".join(f"{k}: {v}" for k, v in failures.items()), file=sys.stderr)
    return 1 if failures else 0


def measured_on(host: dict, date: str) -> str:
    """The machine, the commit and the stack a run measured on, in one line."""
    return (f"{host['cores']} cores, {host['memory_gib']} GiB, {host['cpu']} · loglake {host['commit']} · "
            f"{stack_line(host)} · {date}")


def merged(previous: dict, run: dict) -> dict:
    """The day's results after a run of some metrics (``--only``) into ``previous``, the day's file
    so far: the run's metrics replace theirs, the others stay, and so does the machine (with the
    commit) the file was measured on; each metric names its own commit."""
    if not previous:
        return run
    for m in previous.get("metrics", []):
        m.setdefault("commit", previous["machine"].get("commit"))
    return {**previous, **run, "machine": previous["machine"], "seconds": previous.get("seconds", 0) + run["seconds"],
            "failures": {**previous.get("failures", {}), **run["failures"]}}


def header(doc: dict) -> str:
    """``measured_on`` of the day's file, with the metrics measured at another commit than its own."""
    base = doc["machine"]["commit"]
    others: dict[str, list[str]] = {}
    for m in doc["metrics"]:
        if m.get("commit", base) != base:
            others.setdefault(m["commit"], []).append(m["id"])
    line = measured_on(doc["machine"], doc["date"])
    if others:
        at = "; ".join(f"{', '.join(ids)}: {commit}" for commit, ids in others.items())
        line = line.replace(f"loglake {base} ·", f"loglake {base} ({at}) ·", 1)
    return line


if __name__ == "__main__":
    sys.exit(main())
