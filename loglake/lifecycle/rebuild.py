"""What rebuilding a dataset's table from the log takes, decided before anything moves.

``loglake rebuild DATASET --layer batch|speed|latest`` replaces a damaged or deleted table
by recomputing it from Kafka (``spark_jobs/rebuild.py`` does the work). Each layer needs a
part of the log:

- **batch**: every range the ledger says the batch layer published — per partition from
  the lowest published offset to the watermark W_p (ranges accepted as lost apart). It
  is recomputed as one run through the quality gate, which publishes it again.
- **speed**: the speed table holds the offsets at or above W_p (maintenance expires the
  rest): the stream starts again from W_p on a new checkpoint.
- **latest** (a changelog's latest-state table): the batch layer's state as of W_p with
  the changes at or above W_p folded on top.

When Kafka no longer holds what the table needs (retention deleted offsets the table had,
and nobody accepted their loss), the rebuild refuses with a ``DataLossError`` naming the
offsets, before anything was moved: restore the table from an older Delta version instead
(``RESTORE TABLE ... TO VERSION AS OF``, while VACUUM has kept its files).

No Spark here: the CLI calls it to say what will happen, the job to do it.
"""

from __future__ import annotations

import time
from typing import Callable

from loglake.core.config import Config, Dataset
from loglake.core.errors import DataLossError, ParamError
from loglake.core.offsets import OffsetRange
from loglake.jobs.launch import run_job
from loglake.jobs.requests import RebuildRequest
from loglake.jobs.summaries import RebuildSummary
from loglake.kafka.admin import dataset_bounds
from loglake.core.plans import Plan
from loglake.ledger.ranges import batch_watermarks, compute_watermarks, ledger_rows
from loglake.speed.control import SpeedStream

LAYERS = ("batch", "speed", "latest")


def check_layer(ds: Dataset, layer: str) -> str:
    if layer not in LAYERS:
        raise ParamError("layer", f"{layer!r} is not one of {', '.join(LAYERS)}")
    if layer == "latest" and ds.tables.latest is None:
        raise ParamError("layer", f"dataset {ds.name} is not a changelog: it has no latest-state table")
    return layer


def _lost(rows: list[dict], partition: int) -> list[tuple[int, int]]:
    return sorted((r["start"], r["end"]) for r in rows if r.get("state") == "lost" and r["partition"] == partition)


def _uncovered(start: int, end: int, lost: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[start, end)`` no lost range covers."""
    out, at = [], start
    for lo, hi in lost:
        if hi <= at or lo >= end:
            continue
        if lo > at:
            out.append((at, min(lo, end)))
        at = max(at, hi)
    if at < end:
        out.append((at, end))
    return out


def batch_plan(config: Config, ds: Dataset) -> Plan:
    """The ranges a rebuilt batch table must hold, all still in the log (else ``DataLossError``)."""

    log = dataset_bounds(config, ds)
    rows = ledger_rows(config, ds)
    earliest = {p: lo for p, (lo, _hi) in log.items()}
    marks = compute_watermarks(rows, earliest)
    ranges = []
    for p, (lo, _hi) in sorted(log.items()):
        published = [r["start"] for r in rows
                     if r["partition"] == p and r.get("state") in (None, "published", "compacted")]
        if not published or marks.get(p, lo) <= min(published):
            continue
        start, end = min(published), marks[p]
        lost = _lost(rows, p)
        gone = [g for g in _uncovered(start, min(lo, end), lost) if g[0] < g[1]]
        if gone:
            a, b = gone[0]
            raise DataLossError(ds.topic, p, a, b, f"{ds.tables.batch} holds them and the log no longer does: a "
                                f"rebuild from the log would lose them. Restore the table from an older Delta "
                                f"version instead (RESTORE TABLE delta.`{config.table_path(ds, 'batch')}` TO VERSION "
                                f"AS OF N; loglake history {ds.tables.batch}), or accept the loss first "
                                f"(loglake accept-loss {ds.name} --partition {p} --reason TEXT)")
        ranges += [OffsetRange(ds.topic, p, a, b) for a, b in _uncovered(max(start, lo), end, lost) if a < b]
    return Plan(ds.name, tuple(ranges), "rebuild", (f"rebuild of {ds.tables.batch} from the log",))


def from_watermark(config: Config, ds: Dataset) -> list[OffsetRange]:
    """Per partition ``[W_p, log end)`` — what the speed side holds — checked to be in the log."""

    log = dataset_bounds(config, ds)
    marks = batch_watermarks(config, ds, {p: lo for p, (lo, _hi) in log.items()})
    ranges = []
    for p, (lo, hi) in sorted(log.items()):
        start = marks.get(p, lo)
        if start < lo:
            raise DataLossError(ds.topic, p, start, lo, f"the speed side of {ds.name} starts at the batch watermark "
                                f"{start} and the log no longer holds it (loglake accept-loss {ds.name} "
                                f"--partition {p} --reason TEXT records the loss; then rebuild)")
        ranges.append(OffsetRange(ds.topic, p, start, hi))
    return ranges


def run_rebuild(config: Config, ds: Dataset, layers: list[str] | None, run_id: str,
                say: Callable[[str], None] = print) -> list[RebuildSummary]:
    """Rebuild ``layers`` of ``ds`` (default: every table it has) as Spark jobs; the summaries.

    What the log must hold is checked for every layer before anything is stopped or moved.
    A speed or latest rebuild stops the dataset's background stream first and starts it
    again after (also when the rebuild failed). ``say`` gets one line per step.
    """

    layers = layers or ["batch", "speed"] + (["latest"] if ds.tables.latest else [])
    for layer in layers:
        check_layer(ds, layer)
    if "batch" in layers:
        say(batch_plan(config, ds).describe())
    if {"speed", "latest"} & set(layers):
        from_watermark(config, ds)
    stream = SpeedStream(config, ds)
    restart = bool({"speed", "latest"} & set(layers)) and stream.pid() is not None
    if restart:
        stream.stop()
        say(f"speed {ds.name}: stopped for the rebuild")
    out = []
    try:
        for layer in layers:
            t0 = time.monotonic()
            outcome = run_job(config, RebuildRequest(ds.name, layer, run_id=f"{run_id}-{layer}"))
            if not outcome.ok:
                raise outcome.error(ds.name)
            s = outcome.summary
            aside = f"; the old table set aside as {s.set_aside}" if s.set_aside else ""
            say(f"rebuild {ds.name} {layer}: {s.records} rows from {s.offsets} offset(s) of the "
                f"log in {s.seconds:.1f}s; {time.monotonic() - t0:.1f}s with JVM start; run {run_id}-{layer}{aside}")
            out.append(s)
    finally:
        if restart:
            pid, _new = stream.start()
            say(f"speed {ds.name}: started again (pid {pid})")
    return out
