"""The metrics' time series (``loglake.observe.series``) written by several processes at once,
as a speed stream, the jobs and the exporter write one dataset's series."""

from __future__ import annotations

import multiprocessing
from pathlib import Path


def _record_micro_batches(root: str, dataset: str, each: int, worker: int, pad: int) -> None:
    from loglake.core.config import load_config
    from loglake.observe import series

    config = load_config(Path(root) / "conf", home=Path(root) / "state")
    extra = {"pad": "x" * pad} if pad else {}
    for i in range(each):
        series.record(config, dataset, "micro_batch", batch=worker * 10_000 + i, records=3,
                      quarantined={"bad_json": 1}, seconds=0.7, **extra)


def micro_batches_from_processes(root: Path, dataset: str, processes: int, each: int, pad: int = 0,
                                 timeout: float = 120.0) -> None:
    """``processes`` spawned processes, each recording ``each`` micro-batch events at once in
    ``dataset``'s series of the config under ``root`` (``make_config(root, …)``): 3 records, 1
    quarantined for ``bad_json``, 0.7 s, batch ids ``worker * 10_000 + i``; ``pad`` characters of
    filler each (longer lines). Raises when a process fails."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_record_micro_batches, args=(str(root), dataset, each, w, pad)) for w in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        if p.exitcode != 0:
            raise RuntimeError(f"a process recording metrics ended with {p.exitcode}")
