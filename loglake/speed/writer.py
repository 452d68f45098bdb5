"""The speed layer's micro-batch writer: one micro-batch of Kafka records into the speed
table, the quarantine and (a changelog) the latest state, each commit tied to the stream's
transaction id and the micro-batch's id, so a micro-batch lands once whoever commits it
(``loglake.speed.stream`` says why that is exact).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession

from loglake.core.config import Config, Dataset
from loglake.lake import delta_io
from loglake.leases import StreamLease, wait_while_paused
from loglake.ledger import erasures
from loglake.ledger.erasures import ErasedOffsets
from loglake.records import counting, validation
from loglake.records.kafka_source import without_erased
def process_batch(spark: SparkSession, config: Config, ds: Dataset, batch: DataFrame, app_id: str,
                  batch_id: int, schema_version: int | None = None, topic: str | None = None,
                  replay_possible: bool = True, small: bool = False, max_offsets: int | None = None,
                  lease: StreamLease | None = None, first: bool = True) -> dict | None:
    """Write one micro-batch: valid rows, quarantined rows, and (changelog) the latest state.
    Returns what it wrote (``records`` valid, ``quarantined`` per reason code), None for a
    replayed micro-batch whose rows had landed (its first run counted them).

    Events: one pass reads the batch, validates it and appends the valid rows while
    counting the quarantined ones and carrying them to the driver while they are few
    (``counting.counted``); those are then appended to quarantine by delta-rs (a Spark commit
    costs a few hundred milliseconds more). A ``small`` micro-batch's valid rows go the same
    way: the pass collects them to the driver (``collected``) and delta-rs appends them, with
    the same transaction id and metadata as Spark's commit (the driver's side of a Spark Delta
    commit was most of a small micro-batch's time: bench/results). Only beyond that bound does a
    second pass (which re-reads the batch but validates only the quarantined offsets the
    first one noted) append them. No cache: a micro-batch never sits in memory twice. Changelogs
    use the valid rows twice (append, MERGE), so they cache them. A batch replayed after
    a crash whose valid rows had landed skips the count (the append would be skipped, so
    nothing would be counted) and appends its quarantine unless that landed too. Only a
    query's first micro-batch can be such a replay (``replay_possible``; Spark runs each later
    one once, in order, and one query runs per checkpoint: ``run_speed`` holds the dataset's
    ``stream_lease``): the others neither read the tables' logs for it nor ask Delta to check
    their transaction id, which costs a reconstruction of the table's state per commit
    (``delta_io.append_idempotent``) — except on an object store, where the lease is no fence
    and every micro-batch is checked (``leases.StreamLease.checked``; the module's docstring
    says why that is exact). Each commit records (stream, batch) and
    ``schema_version`` (the version of the dataset's schema it validated under). ``lease``: the
    stream's, renewed (or found lost: ``StreamRunningError``) once the batch may commit. ``first``:
    the query's first micro-batch, which checks the tables against every erased position
    (``erased_since``); the others only against what the erasure ledger gained meanwhile.
    """
    # A writer whose next commit would fail on any append (a DELETE, a replaceWhere) asks the
    # stream to hold its appends meanwhile (loglake.leases.appends_paused): hold this batch.
    waited, request = wait_while_paused(config, ds.name)
    if request is not None:
        print(f"loglake: speed {ds.name}: batch {batch_id} held its appends {waited:.1f}s for {request['what']}",
              file=sys.stderr, flush=True)
    if lease is not None:
        lease.check()  # after a wait of any length: a stream whose lease was taken meanwhile stops here
    speed_path, quarantine_path = config.table_path(ds, "speed"), config.table_path(ds, "quarantine")
    store = config.object_store
    # One Spark partition per Kafka partition: more write tasks (and files) than cores, each
    # paying its fixed part, for a ``small`` micro-batch. Coalesced to the cores (no shuffle),
    # it writes fewer files sooner (a big one keeps a task per Kafka partition: there the
    # tasks' fetches overlap the others' work).
    if small:
        batch = batch.coalesce(max(1, spark.sparkContext.defaultParallelism))
    # Erased records are skipped (the erasure ledger, read again only when it moved); one the
    # ledger gained while this micro-batch ran is deleted after its commits (``erased_since``).
    erased = erasures.erased_offsets(config, topic or ds.topic)
    batch = without_erased(spark, batch, erased)
    validated = validation.validate(batch, ds)
    meta = None if schema_version is None else {"loglake_schema_version": schema_version}
    if ds.kind == "changelog":
        validated = validated.persist()
    # Delta checks (app_id, batch_id) only where a replay is possible: at a cost (delta_io).
    checked = replay_possible
    wrote = None
    try:
        landed = delta_io.committed_version(speed_path, app_id, store) if replay_possible else None
        if landed is not None and landed >= batch_id:
            in_quarantine = delta_io.committed_version(quarantine_path, app_id, store)
            if in_quarantine is None or in_quarantine < batch_id:
                delta_io.append_idempotent(validation.quarantine_rows(validated, "speed"), quarantine_path, app_id,
                                           batch_id, meta, ds.stats_columns)
        else:
            # A micro-batch holds at most ``max_offsets`` offsets (the stream's cap, sized at its
            # start; else speed.max_offsets_per_trigger): note bad ones one by one below the
            # limit, else a window per partition (bounded either way).
            cap = max_offsets if max_offsets is not None else config.profile.speed.max_offsets_per_trigger
            exact = cap <= counting.EXACT_BAD_LIMIT
            observed, observation = counting.counted(validated, partitions=range(ds.partitions), exact=exact)
            valid = validation.apply_transform(validation.valid_rows(observed, ds), ds)
            rows = collected(valid) if small and ds.kind == "events" else None
            if rows is None or not delta_io.append_arrow(rows, speed_path, app_id, batch_id, meta, checked=checked,
                                                         store=store):
                delta_io.append_idempotent(valid, speed_path, app_id, batch_id, meta, ds.stats_columns,
                                           checked=checked)
            counts = observation.get
            wrote = {"records": counts["records"], "quarantined": {}}
            if counts["quarantined"]:
                # The few carried rows go in by delta-rs (no Spark job: this commit is a micro-batch's
                # second); more, or no table yet, by Spark.
                carried = counting.carried_arrow(counts, "speed")
                wrote["quarantined"] = counting.reason_counts(counts)
                if carried is None or not delta_io.append_arrow(carried, quarantine_path, app_id, batch_id, meta,
                                                                checked=checked, store=store):
                    bad = counting.quarantined(batch, counts, ds, "speed", config, topic or ds.topic)
                    bad, reasons = counting.observe_reasons(bad, counts["codes"])
                    delta_io.append_idempotent(bad, quarantine_path, app_id, batch_id, meta, ds.stats_columns,
                                               checked=checked)
                    if wrote["quarantined"] is None:
                        wrote["quarantined"] = reasons()
        if ds.kind == "changelog":  # from the cache, not through the observation (one action reports it)
            changes = validation.apply_transform(validation.valid_rows(validated, ds), ds)
            delta_io.merge_latest(spark, changes, config.table_path(ds, "latest"), ds.keys, app_id, batch_id,
                                  ds.stats_columns, checked=checked, store=store)
        erased_since(config, ds, topic or ds.topic, None if first else erased, f"batch {batch_id}")
    finally:
        if ds.kind == "changelog":
            validated.unpersist()
    return wrote


def erased_since(config: Config, ds: Dataset, topic: str, seen: ErasedOffsets | None, what: str) -> int:
    """Delete from the stream's tables (speed, quarantine, latest state) the rows at positions the
    erasure ledger gained since ``seen`` (None: every erased position: a query's first
    micro-batch, which may follow a run that stopped between its commit and this check). An
    erasure recorded while a micro-batch ran finds its rows gone once the micro-batch returns,
    before the stream's position moves past it (``loglake.erasure.erase``). Returns the rows."""
    now = erasures.erased_offsets(config, topic)
    if now.empty or (seen is not None and now.version == seen.version):
        return 0
    new = now.per_partition()
    if seen is not None and not seen.empty:
        import numpy as np

        old = seen.per_partition()
        new = {p: o[~np.isin(o, old[p])] if p in old else o for p, o in new.items()}
    deleted = 0
    meta = {"loglake_job": "speed", "loglake_step": f"erased rows of {what}"}
    for layer in ("speed", "quarantine", "latest"):
        if getattr(ds.tables, layer, None):
            deleted += erasures.remove_rows(config.table_path(ds, layer), topic, new, meta, config.object_store).rows
    if deleted:
        print(f"loglake: speed {ds.name}: {what}: {deleted} row(s) of records erased meanwhile deleted",
              file=sys.stderr, flush=True)
    return deleted


def collected(valid: DataFrame):
    """A small micro-batch's valid rows in the driver, as a pyarrow Table (the one Spark job of
    the micro-batch: it reads, validates and counts); None when they are more than the driver
    takes back (``spark.driver.maxResultSize``): the rows are then written by Spark."""
    try:
        return valid.toArrow()
    except Exception as e:  # noqa: BLE001 — only the driver's result bound is ours to handle
        if "maxResultSize" not in str(e):
            raise
        return None
