"""Before → after: the same harness (this tree's ``bench/`` and ``loglake/testing/``) on an older
commit, then on this one.

    .venv/bin/python -m bench.compare BEFORE [--only P1,P9] [--repeats 3] [--quick] [--side before|after|table]

Clones the repository at ``BEFORE`` into a temporary directory, puts this tree's ``bench/``
and ``loglake/testing/`` there (so both runs measure with one harness; ``BEFORE`` must have
``loglake/`` in packages, issue 23), and runs ``python -m bench.run`` in it with
that directory first on ``PYTHONPATH`` (the old ``loglake``/``spark_jobs`` are what its
CLI, jobs and streams import: ``loglake.core.paths.REPO_ROOT`` is the clone); then runs the
same command here. The venv, the jar cache and the machine are the same. Each run writes
its own results directory under ``bench/results/compare-<date>/`` (``before``, ``after``:
JSON, charts and table as ``make bench`` writes them) and ``before-after.md``: one row per
metric, the value before, after, and the ratio. The two runs go one after the other: start
it on a quiet machine. ``--side before`` (or ``after``) makes only that run, ``--side table``
only the table from the two runs already there (the runs may then be hours apart in one
session; the harness is whatever ``bench/`` and ``loglake/testing/`` hold at each run, so keep
them unchanged between).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.report import fmt
from loglake.core.paths import REPO_ROOT
from loglake.testing.machine import stack_line

# The harness both runs measure with: the benchmarks and the test environment they stand on.
HARNESS = ("bench", "loglake/testing")


def _run(tree: Path, out: Path, args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "bench.run", "--out", str(out), "--repeats", str(args.repeats)]
    if args.only:
        cmd += ["--only", args.only]
    if args.quick:
        cmd.append("--quick")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    print(f"bench.compare: {' '.join(cmd)} in {tree}", flush=True)
    return subprocess.run(cmd, cwd=tree, env=env).returncode


def _metrics(out: Path) -> tuple[dict, dict]:
    files = sorted(out.glob("*.json"))
    if not files:
        return {}, {}
    doc = json.loads(files[-1].read_text())
    return doc.get("machine", {}), {m["id"]: m for m in doc.get("metrics", [])}


def table(before: Path, after: Path) -> str:
    mb, b = _metrics(before)
    ma, a = _metrics(after)
    lines = [f"Before: loglake {mb.get('commit')} ({stack_line(mb)}) · after: loglake {ma.get('commit')} "
             f"({stack_line(ma)}) · {ma.get('cores')} cores, "
             f"{ma.get('memory_gib')} GiB, {ma.get('cpu')} · the same harness (bench/ of {ma.get('commit')})", "",
             "| Metric | Before | After | After ÷ before | Goal | Met after |", "|---|---|---|---|---|---|"]
    for mid in sorted(set(b) | set(a), key=lambda m: (m[0], int(m[1:]) if m[1:].isdigit() else 99)):
        x, y = b.get(mid, {}), a.get(mid, {})
        unit = y.get("unit") or x.get("unit") or ""
        vb, va = x.get("value"), y.get("value")
        ratio = f"{va / vb:.2f}" if isinstance(vb, (int, float)) and isinstance(va, (int, float)) and vb else "—"
        met = {True: "yes", False: "**no**", None: "—"}[y.get("met")]
        lines.append(f"| {mid} {y.get('title') or x.get('title', '')} | {fmt(vb, unit)} | {fmt(va, unit)} | {ratio} "
                     f"| {y.get('goal') or x.get('goal') or '—'} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="the older commit (any git revision)")
    ap.add_argument("--only", help="comma-separated metric ids, as bench.run takes them")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--side", choices=["both", "before", "after", "table"], default="both",
                    help="run only the 'before' or the 'after' run, or only write the table of both")
    ap.add_argument("--out", default=str(REPO_ROOT / "bench" / "results" / f"compare-{dt.date.today().isoformat()}"))
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()  # the runs go on in other directories (the clone)
    codes = [0]
    if args.side in ("both", "before"):
        tmp = Path(tempfile.mkdtemp(prefix="loglake-before-"))
        try:
            old = tmp / "loglake"
            subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(old)], check=True)
            subprocess.run(["git", "checkout", "-q", args.before], cwd=old, check=True)
            for part in HARNESS:
                shutil.rmtree(old / part, ignore_errors=True)
                (old / f"{part}.py").unlink(missing_ok=True)  # a module there before it was a package
                shutil.copytree(REPO_ROOT / part, old / part, ignore=shutil.ignore_patterns("results", "__pycache__"))
            codes.append(_run(old, out / "before", args))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.side in ("both", "after"):
        codes.append(_run(REPO_ROOT, out / "after", args))
    md = table(out / "before", out / "after")
    (out / "before-after.md").write_text(md)
    print("\n" + md)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
