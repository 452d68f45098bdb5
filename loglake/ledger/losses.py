"""Offsets the log lost before a layer read them: found, and accepted only by an operator.

When Kafka deletes offsets (retention, DeleteRecords) that the batch layer has not
recomputed or the speed layer has not read, the pipeline stops for that dataset with a
``DataLossError`` naming topic, partition and offsets: nothing is skipped silently. An
operator who decides the data is gone for good records that decision with
``loglake accept-loss DATASET [--partition P] --reason TEXT`` (or the
``loglake_accept_loss`` DAG): one ledger row per partition, state ``lost``, with the range,
who, when and why. From then on the batch watermark continues from the earliest retained
offset (a lost range covers its offsets like a published one), the speed layer resumes
there, the audit reports the loss instead of failing on it, and the loglake page shows it.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from datetime import datetime, timezone

from loglake.core.config import Config, Dataset
from loglake.core.contracts import LEDGER
from loglake.core.errors import ParamError
from loglake.core.objectstore import delta_location
from loglake.kafka.admin import dataset_bounds, group_offsets
from loglake.leases import check_lease, writer
from loglake.ledger.ranges import batch_watermarks, ledger_path
from loglake.tables import landed_positions


@dataclass(frozen=True)
class Loss:
    """Offsets ``[start, end)`` of one partition that the log no longer holds and some layer
    still needed (``needed_by``: batch, speed or both)."""

    topic: str
    partition: int
    start: int
    end: int
    needed_by: tuple[str, ...]

    @property
    def offsets(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return (f"{self.topic}[{self.partition}] offsets [{self.start}, {self.end}) ({self.offsets:,} offsets, "
                f"needed by {' and '.join(self.needed_by)})")


def find_losses(config: Config, ds: Dataset, partition: int | None = None) -> list[Loss]:
    """Per partition, the offsets below the earliest retained one that the batch layer (from
    its watermark) or the speed layer (from its position: ``speed_positions``) has yet to read."""

    bounds = dataset_bounds(config, ds)
    if partition is not None and partition not in bounds:
        raise ParamError("partition", f"partition {partition} does not exist in {ds.topic} "
                                      f"(partitions 0..{len(bounds) - 1})")
    earliest = {p: lo for p, (lo, _hi) in bounds.items()}
    marks = batch_watermarks(config, ds, earliest)
    positions = speed_positions(config, ds, group_offsets(config, ds.consumer_group, ds.topic, len(bounds)))
    out = []
    for p, lo in sorted(earliest.items()):
        if partition is not None and p != partition:
            continue
        needs: dict[str, int] = {}
        w = marks.get(p)
        if w is not None and w < lo:
            needs["batch"] = w
        s = positions.get(p)
        if s is not None:
            s = max(s, w) if w is not None else s  # the stream resumes at the watermark at least
            if s < lo:
                needs["speed"] = s
        if needs:
            out.append(Loss(ds.topic, p, min(needs.values()), lo, tuple(sorted(needs))))
    return out


def speed_positions(config: Config, ds: Dataset, committed: dict[int, int | None]) -> dict[int, int | None]:
    """Per partition, the speed layer's position: the one its consumer group records, or one
    past the highest offset its tables landed (speed, speed quarantine) when that is further.
    The group's record follows each micro-batch asynchronously and may be missing (a run
    that ended before it was made) or a micro-batch behind; the tables are not."""

    landed = landed_positions(config, ds, ds.topic)
    out = dict(committed)
    for p, pos in landed.items():
        out[p] = pos if out.get(p) is None else max(out[p], pos)
    return out


def operator() -> str:
    """``user@host`` of whoever runs this."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def accept_loss(config: Config, ds: Dataset, reason: str, *, partition: int | None = None,
                recorded_by: str | None = None, run_id: str | None = None) -> list[Loss]:
    """Record the dataset's current losses (of ``partition``, or every partition) as lost in
    the ledger, under the dataset's single writer; returns them (empty: nothing was lost)."""

    if not reason or not reason.strip():
        raise ParamError("reason", "say why the loss is accepted (it is kept in the ledger with who and when)")
    partitions = dataset_bounds(config, ds)
    if partition is not None and partition not in partitions:
        raise ParamError("partition", f"partition {partition} does not exist in {ds.topic} "
                                      f"(partitions 0..{len(partitions) - 1})")
    recorded_by = recorded_by or operator()
    run_id = run_id or f"accept-loss-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    with writer(config, ds.name, "accept-loss", run_id):
        losses = find_losses(config, ds, partition)
        if losses:
            _append_lost(config, ds, losses, reason.strip(), recorded_by, run_id)
    return losses


def _append_lost(config: Config, ds: Dataset, losses: list[Loss], reason: str, recorded_by: str,
                 run_id: str) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake


    now = datetime.now(timezone.utc)
    rows = [{"dataset": ds.name, "topic": loss.topic, "partition": loss.partition, "start": loss.start,
             "end": loss.end, "records": 0, "quarantined": 0, "run_id": run_id, "state": "lost",
             "committed_at": now, "batch_version": None, "quarantine_version": None, "reason": reason,
             "recorded_by": recorded_by} for loss in losses]
    table = pa.Table.from_pylist(rows, schema=LEDGER.contract.arrow_schema())
    uri, options = delta_location(ledger_path(config), config.object_store)
    check_lease("record the loss in the ledger")
    write_deltalake(uri, table, mode="append", schema_mode="merge", storage_options=options)
