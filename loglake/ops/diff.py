"""Explained diff: batch rows against speed rows for the same offsets, by provenance key.

For one partition and offset range ``[start, end)`` the rows of ``batch.<ds>`` and
``speed.<ds>`` are joined on ``_offset`` (topic and partition fixed) in one DataFusion
query over both Delta tables (delta-rs, no JVM), giving:

- missing in speed: batch rows without a speed row, split by whether the speed layer
  quarantined that offset (it judged the record invalid) or not;
- missing in batch: the same the other way round, split by batch quarantine;
- changed: rows in both whose values differ (``IS DISTINCT FROM``, so nulls compare),
  per column with a count and a sample (offset, batch value, speed value). Every column
  both tables share is compared except the join key and ``BOOKKEEPING``.

Offsets an erasure erased (``loglake erase``) are in neither layer by design: they are
counted as ``erased``, not as a difference.

A diff explains, it does not judge: maintenance expires speed rows below the batch
watermark, so there missing-in-speed is expected and said so in a note.

Changelog datasets: ``speed.<ds>`` keeps every change while ``batch.<ds>`` keeps only the
newest row per key, so a speed row without a batch row is normal (superseded or deleted).
Those are counted as ``superseded_in_batch``, not as missing; batch rows are still
compared with the speed row at the same offset, which must carry the same values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from loglake.core.config import Config, Dataset
from loglake.core.contracts import DELETED, PROVENANCE
from loglake.core.errors import ParamError
from loglake.kafka.admin import group_offsets, list_topics
from loglake.ledger.erasures import erased_offsets
from loglake.ledger.ranges import batch_watermarks
from loglake.tables import layer_table

JOIN_KEY = tuple(c for c in PROVENANCE.names if c != "_kafka_timestamp")  # a record's coordinates
# Columns one layer keeps for itself: the speed layer's changelog rows carry ``_deleted``
# (tombstone flag); the batch latest state drops it. No layer adds an ingestion time.
BOOKKEEPING = tuple(DELETED.names)
_EMPTY = "SELECT CAST(NULL AS BIGINT) AS \"_offset\" WHERE false"


@dataclass(frozen=True)
class OneSided:
    """Rows one layer holds and the other lacks: how many, how many of those the other layer
    quarantined and how many it did not, and the first offsets."""

    count: int
    quarantined: int
    not_quarantined: int
    sample: list[int]


@dataclass(frozen=True)
class ChangedValue:
    """One offset whose column differs: the batch and the speed value, as JSON can carry them."""

    offset: int
    batch: object
    speed: object


@dataclass(frozen=True)
class ChangedColumn:
    """A column that differs: in how many rows, and the first of them."""

    rows: int
    sample: list[ChangedValue]


@dataclass(frozen=True)
class Changed:
    """Rows in both layers whose values differ: how many, of how many in both (None: no
    column was compared, so none were counted), and per differing column."""

    rows: int
    in_both: int | None
    columns: dict[str, ChangedColumn]


@dataclass(frozen=True)
class DiffResult:
    """One explained diff of a partition's offsets ``[start, end)``. A changelog has
    ``superseded_in_batch`` instead of ``missing_in_batch`` (which is then None)."""

    dataset: str
    topic: str
    kind: str
    partition: int
    start: int
    end: int
    missing_in_speed: OneSided
    missing_in_batch: OneSided | None
    changed: Changed
    compared_columns: list[str]
    not_compared: dict[str, list[str]]  # layer → the columns only it has
    notes: list[str]
    superseded_in_batch: OneSided | None = None
    erased: int = 0  # offsets of the range an erasure erased: in neither layer

    def to_dict(self) -> dict:
        """The diff as JSON carries it (``loglake diff --json``, the diff task's XCom): keys
        that do not apply are left out, a changelog's ``missing_in_batch`` comes last."""
        d = asdict(self)
        if self.changed.in_both is None:
            del d["changed"]["in_both"]
        if self.superseded_in_batch is None:
            del d["superseded_in_batch"]
        else:
            d["missing_in_batch"] = d.pop("missing_in_batch")
        d["erased"] = d.pop("erased")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> DiffResult:
        """Back from ``to_dict``."""
        def side(v: dict | None) -> OneSided | None:
            return None if v is None else OneSided(**v)

        ch = d["changed"]
        changed = Changed(ch["rows"], ch.get("in_both"), {
            c: ChangedColumn(v["rows"], [ChangedValue(**x) for x in v["sample"]]) for c, v in ch["columns"].items()})
        return cls(**{**d, "missing_in_speed": side(d["missing_in_speed"]),
                      "missing_in_batch": side(d["missing_in_batch"]),
                      "superseded_in_batch": side(d.get("superseded_in_batch")), "changed": changed})


def check_args(partition: int, start: int, end: int, partitions: int,
               names: tuple[str, str, str] = ("partition", "start", "end")) -> None:
    """Reject a bad request naming the parameter (``names``: how the caller calls them)."""
    p_name, s_name, e_name = names
    if partition < 0 or partition >= partitions:
        raise ParamError(p_name, f"partition {partition} is not in the topic (partitions 0..{partitions - 1})")
    if start < 0:
        raise ParamError(s_name, f"must be >= 0, found {start}")
    if end < 0:
        raise ParamError(e_name, f"must be >= 0, found {end}")
    if start > end:
        raise ParamError(s_name, f"{start} is after {e_name} {end}; a range is [{s_name}, {e_name})")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(table) -> list[str]:
    return [f.name for f in table.schema().fields]


def _rows(qb, sql: str) -> list[dict]:
    import pyarrow as pa

    return pa.table(qb.execute(sql).read_all()).to_pylist()


def _shown(v):
    """A value as JSON can carry it (dates and timestamps as ISO text)."""
    return v.isoformat() if hasattr(v, "isoformat") else v


def diff_range(config: Config, ds: Dataset, partition: int, start: int, end: int, sample: int = 10,
               names: tuple[str, str, str] = ("partition", "start", "end")) -> DiffResult:
    """Compare batch and speed rows of ``ds`` for offsets ``[start, end)`` of ``partition``."""
    from deltalake import QueryBuilder


    partitions = list_topics(config).get(ds.topic, 0)
    check_args(partition, start, end, partitions, names)
    tables = {name: layer_table(config, ds, layer)
              for name, layer in (("b", "batch"), ("s", "speed"), ("q", "quarantine"))}
    qb = QueryBuilder()
    for name, t in tables.items():
        if t is not None:
            qb = qb.register(f"{name}_t", t)
    topic = ds.topic.replace("'", "''")
    where = f"\"_topic\" = '{topic}' AND \"_partition\" = {partition} AND \"_offset\" >= {start} AND \"_offset\" < {end}"
    ctes = {
        "b": f"SELECT * FROM b_t WHERE {where}" if tables["b"] else _EMPTY,
        "s": f"SELECT * FROM s_t WHERE {where}" if tables["s"] else _EMPTY,
        "qb": f"SELECT DISTINCT \"_offset\" FROM q_t WHERE {where} AND \"_layer\" = 'batch'" if tables["q"] else _EMPTY,
        "qs": f"SELECT DISTINCT \"_offset\" FROM q_t WHERE {where} AND \"_layer\" = 'speed'" if tables["q"] else _EMPTY,
    }
    with_ = "WITH " + ", ".join(f"{k} AS ({v})" for k, v in ctes.items()) + " "

    def one_sided(have: str, lack: str, quarantine: str) -> OneSided:
        sql = (f"{with_}SELECT count(*) AS n, count(q.\"_offset\") AS quarantined FROM {have} "
               f"LEFT JOIN {lack} ON {have}.\"_offset\" = {lack}.\"_offset\" "
               f"LEFT JOIN {quarantine} q ON {have}.\"_offset\" = q.\"_offset\" WHERE {lack}.\"_offset\" IS NULL")
        counts = _rows(qb, sql)[0]
        offs = _rows(qb, f"{with_}SELECT {have}.\"_offset\" AS o FROM {have} LEFT JOIN {lack} "
                         f"ON {have}.\"_offset\" = {lack}.\"_offset\" WHERE {lack}.\"_offset\" IS NULL "
                         f"ORDER BY o LIMIT {int(sample)}")
        return OneSided(counts["n"], counts["quarantined"], counts["n"] - counts["quarantined"], [r["o"] for r in offs])

    missing_in_speed = one_sided("b", "s", "qs")
    missing_in_batch = one_sided("s", "b", "qb")
    compared, only = [], {}
    if tables["b"] and tables["s"]:
        b_cols, s_cols = _columns(tables["b"]), _columns(tables["s"])
        compared = [c for c in b_cols if c in s_cols and c not in JOIN_KEY and c not in BOOKKEEPING]
        only = {"batch": [c for c in b_cols if c not in s_cols], "speed": [c for c in s_cols if c not in b_cols]}
    changed = _changed(qb, with_, compared, sample)

    changelog = ds.kind == "changelog"
    notes = []
    if changelog:
        notes.append("changelog: batch holds the newest row per key, so speed rows without a batch row "
                     "are superseded or deleted keys (superseded_in_batch), not missing")
    w = batch_watermarks(config, ds).get(partition)
    if w is not None and start < w:
        notes.append(f"offsets below the batch watermark {w}: maintenance may have expired their speed "
                     "rows, so missing-in-speed there is expected")
    pos = group_offsets(config, ds.consumer_group, ds.topic, partitions).get(partition)
    if pos is None or end > pos:
        notes.append(f"the speed layer's position is {pos if pos is not None else 'not committed yet'}: "
                     "offsets at or past it are not in speed yet")
    if w is None or end > w:
        notes.append(f"the batch watermark is {w if w is not None else 'not set yet'}: offsets at or past it "
                     "may not be in batch yet")
    for t, name in ((tables["b"], "batch"), (tables["s"], "speed")):
        if t is None:
            notes.append(f"{name}.{ds.name} does not exist yet")
    erased = erased_offsets(config, ds.topic).within(partition, start, end)
    return DiffResult(
        dataset=ds.name, topic=ds.topic, kind=ds.kind, partition=partition, start=start, end=end,
        missing_in_speed=missing_in_speed, missing_in_batch=None if changelog else missing_in_batch, changed=changed,
        compared_columns=compared, not_compared={k: v for k, v in only.items() if v}, notes=notes,
        superseded_in_batch=missing_in_batch if changelog else None, erased=erased)


def _changed(qb, with_: str, columns: list[str], sample: int) -> Changed:
    """Rows in both layers whose values differ: total, and per column a count and a sample."""
    if not columns:
        return Changed(0, None, {})
    # Parenthesised: DataFusion binds OR tighter than IS DISTINCT FROM otherwise.
    differs = {c: f"(b.{_q(c)} IS DISTINCT FROM s.{_q(c)})" for c in columns}
    sums = ", ".join(f"sum(CASE WHEN {cond} THEN 1 ELSE 0 END) AS {_q('d_' + c)}" for c, cond in differs.items())
    any_diff = " OR ".join(differs.values())
    join = 'FROM b JOIN s ON b."_offset" = s."_offset"'
    counts = _rows(qb, f"{with_}SELECT count(*) AS both_, sum(CASE WHEN {any_diff} THEN 1 ELSE 0 END) AS changed, "
                       f"{sums} {join}")[0]
    out = {}
    for c, cond in differs.items():
        n = counts[f"d_{c}"] or 0
        if n:
            rows = _rows(qb, f"{with_}SELECT b.\"_offset\" AS o, b.{_q(c)} AS bv, s.{_q(c)} AS sv {join} "
                             f"WHERE {cond} ORDER BY o LIMIT {int(sample)}")
            out[c] = ChangedColumn(n, [ChangedValue(r["o"], _shown(r["bv"]), _shown(r["sv"])) for r in rows])
    return Changed(counts["changed"] or 0, counts["both_"], out)


def diff_plan(config: Config, ds: Dataset, plan) -> list[DiffResult]:
    """One diff per range of ``plan`` (a ``loglake.core.plans.Plan``), e.g. after a batch run."""
    return [diff_range(config, ds, r.partition, r.start, r.end) for r in plan.ranges if r.size]


def format_diff(d: DiffResult) -> list[str]:
    """Lines explaining one diff: counts, split by quarantine, and per changed column a sample."""
    head = f"diff {d.dataset} ({d.topic}) [{d.partition}] [{d.start}, {d.end})"
    same = not d.missing_in_speed.count and not (d.missing_in_batch and d.missing_in_batch.count) and not d.changed.rows
    lines = [f"{head}: {'batch and speed agree' if same else 'differences'}"]

    def side(label: str, v: OneSided, other: str) -> None:
        lines.append(f"  {label}: {v.count} ({v.quarantined} quarantined by {other}, "
                     f"{v.not_quarantined} not)" + (f"; offsets {_list(v.sample, v.count)}" if v.count else ""))

    side("missing in speed", d.missing_in_speed, "speed")
    if d.missing_in_batch is not None:
        side("missing in batch", d.missing_in_batch, "batch")
    else:
        side("superseded in batch", d.superseded_in_batch, "batch")
    if d.erased:
        lines.append(f"  erased: {d.erased} (loglake erase: in neither layer, accounted for)")
    ch = d.changed
    lines.append(f"  changed rows: {ch.rows} of {ch.in_both or 0} in both layers "
                 f"(compared: {', '.join(d.compared_columns) or 'nothing'})")
    for col, v in ch.columns.items():
        lines.append(f"    {col}: {v.rows} row(s) differ")
        for x in v.sample:
            lines.append(f"      offset {x.offset}: batch {x.batch!r}  speed {x.speed!r}")
    for layer, cols in d.not_compared.items():
        lines.append(f"  not compared (only in {layer}): {', '.join(cols)}")
    lines += [f"  note: {n}" for n in d.notes]
    return lines


def _list(sample: list[int], total: int) -> str:
    shown = ", ".join(str(o) for o in sample)
    return f"{shown}, ... ({total} in total)" if total > len(sample) else shown
