"""`make soak`: the fault scenarios at full scale, on this machine, with figures.

Writes ``soak/results/<date>.json`` (per scenario: id, records, faults injected, lost,
duplicated, recovery seconds, command) and ``soak/results/<date>.png`` (recovery time per
fault, per scenario). Starts its own broker on a free port, state in a temporary directory.

    .venv/bin/python -m soak.run                # every scenario at full scale
    .venv/bin/python -m soak.run --only R1 --small
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from loglake.core.paths import REPO_ROOT
from loglake.testing import Lab, machine

# id → (module:function, full-scale arguments, CI-scale arguments); tests/reliability runs the CI scale.
SCENARIOS = {
    "R1": ("soak.scenarios:speed_kills", {"records": 1_000_000, "kills": 50}, {"records": 6000, "kills": 2}),
    "R2": ("soak.scenarios:broker_faults", {"records": 200_000, "kills": 5, "stops": 5},
           {"records": 5000, "kills": 1, "stops": 1, "down": (2.0, 5.0)}),
    "R3": ("soak.scenarios:retention_loss", {"records": 300_000}, {"records": 900}),
    "R4": ("soak.busy:busy_platform", {"minutes": 30, "maintain_every": 120, "batch_every": 300, "rate": 500},
           {"minutes": 0.5, "maintain_every": 20, "batch_every": 10, "rate": 100, "query_pause": 6.0}),
    "R5": ("soak.scenarios:malformed_kinds", {"records": 500_000, "per_kind": 5000, "flood": 10_000_000},
           {"records": 3000, "per_kind": 25}),
    "R6": ("soak.scenarios:recompute_killed", {"records": 1_000_000}, {"records": 3000}),
    "R7": ("soak.airflow_faults:scheduler_kills", {"kills": 5, "records": 1_000_000, "ranges": 24,
                                                   "restart_after": (0.0, 45.0)},
           {"kills": 1, "records": 600, "ranges": 4}),
    "R8": ("soak.scenarios:bad_input", {}, {}),
}


def scenario(ref: str):
    import importlib

    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help=f"comma-separated scenario ids ({', '.join(SCENARIOS)})")
    ap.add_argument("--small", action="store_true", help="CI scale (to try the program out)")
    ap.add_argument("--out", default=str(REPO_ROOT / "soak" / "results"))
    args = ap.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # The scenarios import Airflow's modules (plans, DAG params), whose logging set-up lets every
    # logger through at INFO: py4j's and Great Expectations' chatter would flood the console.
    import logging

    import airflow  # noqa: F401  (its logging set-up first, then these levels over it)

    for name in ("py4j", "great_expectations"):
        logging.getLogger(name).setLevel(logging.WARNING)
    sys.path.insert(0, str(REPO_ROOT / "plugins"))
    wanted = args.only.upper().split(",") if args.only else list(SCENARIOS)
    unknown = set(wanted) - set(SCENARIOS)
    if unknown:
        ap.error(f"--only: unknown scenario(s) {sorted(unknown)}; expected some of {', '.join(SCENARIOS)}")
    from soak import scenarios

    path = Path(args.out) / f"{dt.date.today().isoformat()}{'-small' if args.small else ''}.json"
    root = Path(tempfile.mkdtemp(prefix="loglake-soak-"))
    os.environ.setdefault("AIRFLOW_HOME", str(root / "airflow"))
    # One broker for every scenario (one that kills a broker starts its own), before the first.
    lab = Lab(root, heap="1g", app_name="loglake-soak", spark_log=root / "spark-session.log")
    results = []
    try:
        print(f"soak: broker at {lab.bootstrap}, state in {root}", flush=True)
        for sid in wanted:
            ref, full, small = SCENARIOS[sid]
            kwargs = small if args.small else full
            print(f"soak {sid}: {ref} {kwargs}", flush=True)
            t0 = time.monotonic()
            try:
                out = scenario(ref)(lab, **kwargs)
            except Exception as e:  # one scenario's failure is a result, not the end of the soak
                out = scenarios.Outcome(sid, ref, notes=[f"raised {type(e).__name__}: {e}"[:2000]])
            out.seconds = out.seconds or time.monotonic() - t0
            out.command = f"make soak SOAK_ARGS=\"--only {sid}{' --small' if args.small else ''}\""
            results.append(out.to_dict())
            print(f"soak {sid}: {'passed' if out.passed else 'FAILED'}: {out.records:,} records, {out.faults} faults, "
                  f"{out.lost} lost, {out.duplicated} duplicated, recovery max "
                  f"{max(out.recovery_seconds) if out.recovery_seconds else '-'} s, {time.monotonic() - t0:.0f} s",
                  flush=True)
            for note in out.notes:
                print(f"  {sid}: {note}", flush=True)
            for line in out.info:
                print(f"  {sid} info: {line}", flush=True)
            _write(results, args, path)  # after each scenario: a soak cut short keeps what it measured
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)
    _chart(results, path.with_suffix(".png"))
    print(f"soak: results in {path}")
    return 0 if all(r["passed"] for r in results) else 1


def _write(results: list[dict], args, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), "small": args.small, "only": args.only,
                                "scenarios": results}, indent=2, default=str))


def _chart(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in results if r["recovery_seconds"]["each"]]
    if not timed:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in timed:
        ys = r["recovery_seconds"]["each"]
        ax.plot(range(1, len(ys) + 1), ys, marker="o", label=f"{r['id']} ({r['lost']} lost, {r['duplicated']} dup)")
    ax.set_xlabel("fault #")
    ax.set_ylabel("recovery seconds")
    ax.set_title("loglake soak: recovery per fault")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
