"""An audit's result (``AuditResult``: one ``AuditRow`` per partition, layer and point, the
totals, the recorded losses), its rows in ``_audit_results`` and the lines ``loglake audit``
prints (``format_audit``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from loglake.core.config import Config
from loglake.core.contracts import AUDIT_RESULTS
from loglake.core.objectstore import delta_location
from loglake.ops.coverage import Coverage, describe_sample
from loglake.ops.coverage import sample as first_offsets


@dataclass(frozen=True)
class AuditRow:
    """One partition's batch or speed part at one point (``served``: the versions readers are
    served; ``newest``: the tables' newest versions): the range checked, the counts, and the
    first offending offsets (as numbers, and as text for an operator)."""

    partition: int
    layer: str
    checked_from: int
    checked_to: int
    offsets_checked: int
    missing: int
    duplicated: int
    unexpected: int
    sample_missing: list[int]
    sample_duplicated: list[int]
    sample_unexpected: list[int]
    describe_missing: str
    describe_duplicated: str
    describe_unexpected: str
    ok: bool
    point: str
    table: str
    table_version: int | None
    quarantine_version: int | None
    erased: int = 0  # offsets of the range an erasure erased: accounted for, in no table


@dataclass(frozen=True)
class AuditTotals:
    """Sums over some rows of an audit (those of one point): all ok, how many, the counts."""

    ok: bool
    rows: int
    offsets_checked: int
    missing: int
    duplicated: int
    unexpected: int
    erased: int = 0

    @classmethod
    def of(cls, rows: list[AuditRow]) -> AuditTotals:
        return cls(all(r.ok for r in rows), len(rows), sum(r.offsets_checked for r in rows),
                   sum(r.missing for r in rows), sum(r.duplicated for r in rows), sum(r.unexpected for r in rows),
                   sum(r.erased for r in rows))


@dataclass(frozen=True)
class LostRange:
    """Offsets ``[start, end)`` of a partition the log lost before a layer read them, accepted
    by an operator (``loglake accept-loss``): not checked, reported."""

    partition: int
    start: int
    end: int
    reason: str
    recorded_by: str
    committed_at: str  # ISO 8601


@dataclass(frozen=True)
class AuditResult:
    """One audit of a dataset. The totals are those of what readers are served; ``newest``
    says the same of the newest versions, ``partitions`` holds the rows of both points."""

    dataset: str
    topic: str
    kind: str
    run_id: str
    audited_at: str  # ISO 8601
    ok: bool  # every row, served and newest
    offsets_checked: int
    missing: int
    duplicated: int
    unexpected: int
    versions: dict[str, dict[str, int | None]]  # point → layer (and batch_quarantine) → version
    newest: AuditTotals
    foreign_commits: dict[str, list[dict]]  # table → loglake.ledger.history.foreign_commits
    log_offsets_read: int
    log_seconds: float
    seconds: float
    partitions: list[AuditRow]
    notes: list[str]
    lost: list[LostRange]
    erased: int = 0  # offsets erased (loglake erase): accounted for, in no table

    def to_dict(self) -> dict:
        """The result as JSON carries it (the audit task's XCom)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> AuditResult:
        """Back from ``to_dict``; the audit task's XCom leaves ``partitions`` out."""
        return cls(**{**d, "newest": AuditTotals(**d["newest"]),
                      "partitions": [AuditRow(**r) for r in d.get("partitions", [])],
                      "lost": [LostRange(**r) for r in d["lost"]]})


def iso(v):
    return v.isoformat() if hasattr(v, "isoformat") else v


def row(p: int, layer: str, point: str, table: str, versions: tuple[int | None, int | None], start: int, end: int,
        cov: Coverage, n: int, erased: int = 0) -> AuditRow:
    return AuditRow(
        partition=p, layer=layer, checked_from=start, checked_to=end,
        offsets_checked=cov.checked, missing=len(cov.missing), duplicated=len(cov.duplicated),
        unexpected=len(cov.unexpected), sample_missing=first_offsets(cov.missing, n),
        sample_duplicated=first_offsets(cov.duplicated, n),
        sample_unexpected=first_offsets(cov.unexpected, n),
        describe_missing=describe_sample(cov.missing, n),
        describe_duplicated=describe_sample(cov.duplicated, n),
        describe_unexpected=describe_sample(cov.unexpected, n), ok=cov.ok,
        point=point, table=table, table_version=versions[0], quarantine_version=versions[1], erased=erased,
    )


def write_results(config: Config, result: AuditResult, audited_at: datetime) -> None:
    """Append the audit's rows to ``_audit_results`` (``loglake.core.contracts.AUDIT_RESULTS``)."""
    import pyarrow as pa
    from deltalake import write_deltalake


    rows = [{
        **{k: getattr(r, k) for k in ("partition", "layer", "checked_from", "checked_to", "offsets_checked",
                                      "missing", "duplicated", "unexpected", "ok", "point", "table_version",
                                      "quarantine_version", "erased")},
        "dataset": result.dataset, "topic": result.topic, "run_id": result.run_id, "audited_at": audited_at,
        "sample_missing": r.describe_missing, "sample_duplicated": r.describe_duplicated,
        "sample_unexpected": r.describe_unexpected,
    } for r in result.partitions]
    path, options = delta_location(config.system_table_path(AUDIT_RESULTS), config.object_store)
    # merge: a table an older loglake made gains the columns the contract added since.
    write_deltalake(path, pa.Table.from_pylist(rows, schema=AUDIT_RESULTS.contract.arrow_schema()), mode="append",
                    schema_mode="merge", storage_options=options)


def _verdict(rows: list[AuditRow]) -> str:
    bad = [f"{sum(getattr(r, k) for r in rows)} {k}" for k in ("missing", "duplicated", "unexpected")
           if any(getattr(r, k) for r in rows)]
    return ", ".join(bad) or "ok"


def format_audit(result: AuditResult) -> list[str]:
    """Lines for an operator: the verdict; per table, its served version and (where it differs)
    its newest, each ok or damaged; then per partition, layer and version the counts and the
    offending offsets (a sample, with the total, when there are many)."""
    verdict = "OK" if result.ok else "FAILED"
    newest = result.newest
    lines = [f"audit {result.dataset} ({result.topic}, {result.kind}): {verdict}: "
             f"{result.offsets_checked:,} offsets checked, {result.missing} missing, "
             f"{result.duplicated} duplicated, {result.unexpected} unexpected"
             + (f", {result.erased:,} erased" if result.erased else "")
             + (f" in the served versions; the newest: {newest.missing} missing, {newest.duplicated} "
                f"duplicated, {newest.unexpected} unexpected" if newest.rows else "")
             + f" (run {result.run_id}, {result.seconds:.1f}s)"]
    rows = result.partitions
    for layer in ("batch", "speed"):
        served = [r for r in rows if r.layer == layer and r.point == "served"]
        newest_rows = [r for r in rows if r.layer == layer and r.point == "newest"]
        if not served:
            continue
        r0 = served[0]
        same = "" if newest_rows else "; the newest versions are these"
        lines.append(f"  {r0.table} served version {r0.table_version}: {_verdict(served)} "
                     f"(with quarantine version {r0.quarantine_version}{same})")
        if newest_rows:
            verdict = _verdict(newest_rows)
            lines.append(f"  {newest_rows[0].table} newest version {newest_rows[0].table_version}: {verdict} "
                         f"(with quarantine version {newest_rows[0].quarantine_version}"
                         + ("; not served: readers stay on the served version)" if verdict != "ok" else ")"))
    for r in rows:
        lines.append(f"  [{r.partition}] {r.layer:<5} {r.point:<6} v{r.table_version} "
                     f"[{r.checked_from}, {r.checked_to})  "
                     f"{r.offsets_checked} checked  {r.missing} missing  {r.duplicated} duplicated  "
                     f"{r.unexpected} unexpected" + (f"  {r.erased} erased" if r.erased else ""))
        for kind in ("missing", "duplicated", "unexpected"):
            if getattr(r, kind):
                lines.append(f"      {kind} offsets: {getattr(r, 'describe_' + kind)}")
    lines += [f"  acknowledged loss: [{r.partition}] offsets [{r.start}, {r.end}) "
              f"({r.end - r.start:,} offsets) accepted by {r.recorded_by} at {r.committed_at}: {r.reason}"
              for r in result.lost]
    lines += [f"  note: {n}" for n in result.notes]
    return lines
