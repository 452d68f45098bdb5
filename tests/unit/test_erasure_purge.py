"""The targeted purge (loglake.erasure.purge) on delta-rs tables: what goes, what stays readable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from loglake.erasure.purge import purge

TOPIC = "orders"
ERASED = "acme-erased-7731"  # the key's value: the company whose rows are erased


def rows(offsets: list[int], companies: list[str], partition: int = 0) -> pa.Table:
    return pa.table({"_topic": pa.array([TOPIC] * len(offsets)),
                     "_partition": pa.array([partition] * len(offsets), pa.int32()),
                     "_offset": pa.array(offsets, pa.int64()),
                     "company_id": pa.array(companies)})


def append(path: Path, offsets: list[int], companies: list[str], partition: int = 0) -> int:
    write_deltalake(str(path), rows(offsets, companies, partition), mode="append",
                    configuration={"delta.checkpointInterval": "10"})
    return DeltaTable(str(path)).version()


def strings(value):
    """Every string in a value read from Parquet, through structs, lists and maps."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings(v)


def parquet_holding(root: Path, needle: str) -> list[str]:
    """The Parquet files under ``root`` (data and _delta_log) with ``needle`` in a cell or in
    a column's row-group statistics."""
    found = []
    for f in sorted(root.rglob("*.parquet")):
        pf = pq.ParquetFile(f)
        in_cells = any(needle in s for row in pf.read(use_threads=False).to_pylist() for s in strings(row))
        md = pf.metadata
        in_stats = any(needle in str(st.min) + str(st.max)
                       for g in range(md.num_row_groups) for c in range(md.num_columns)
                       if (st := md.row_group(g).column(c).statistics) is not None and st.has_min_max)
        if in_cells or in_stats:
            found.append(str(f.relative_to(root)))
    return found


def listing(root: Path) -> dict[str, int]:
    return {str(f.relative_to(root)): f.stat().st_mtime_ns for f in root.rglob("*") if f.is_file()}


def versions(path: Path) -> dict[int, pa.Table | Exception]:
    out = {}
    for v in range(DeltaTable(str(path)).version() + 1):
        try:
            out[v] = DeltaTable(str(path), version=v).to_pyarrow_table()
        except Exception as e:  # noqa: BLE001  (an unreadable version: its file is gone)
            out[v] = e
    return out


def positions_of(table: pa.Table) -> set[tuple[int, int]]:
    return set(zip(table.column("_partition").to_pylist(), table.column("_offset").to_pylist()))


@pytest.fixture
def erased_table(tmp_path) -> Path:
    """v0: offsets 0-1; v1: 2 (the erased company) and 3; v2: 4, then a checkpoint (it lists
    v1's file with its stats); v3: the DELETE of offset 2; v4: 5."""
    path = tmp_path / "speed"
    append(path, [0, 1], ["c0", "c1"])
    append(path, [2, 3], [ERASED, "c3"])
    append(path, [4], ["c4"])
    DeltaTable(str(path)).create_checkpoint()
    assert DeltaTable(str(path)).delete("_partition = 0 AND _offset = 2")["num_deleted_rows"] == 1
    append(path, [5], ["c5"])
    return path


def test_purge_leaves_no_erased_value_in_parquet_and_no_readable_erased_row(erased_table):
    path = erased_table
    assert parquet_holding(path, ERASED)  # before: v1's file and the checkpoint at v2
    before = listing(path)

    got = purge(str(path), {0: [2]}, topic=TOPIC)

    assert len(got.files) == 1 and got.files[0] in before and not (path / got.files[0]).exists()
    assert got.checkpoints == [f"_delta_log/{2:020d}.checkpoint.parquet"]
    assert got.checkpoint_written == 4
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 4
    assert got.unreadable == [1, 2]
    assert got.commits_with_stats == [1]  # v1's JSON commit keeps the file's stats (immutable)
    assert ERASED in (path / "_delta_log" / f"{1:020d}.json").read_text()
    assert parquet_holding(path, ERASED) == []
    read = versions(path)
    for v, table in read.items():
        if isinstance(table, Exception):
            assert v in got.unreadable, f"version {v}: {table}"
        else:
            assert (0, 2) not in positions_of(table) and ERASED not in table.column("company_id").to_pylist()
    assert set(read) - set(got.unreadable) == {0, 3, 4}
    assert positions_of(read[4]) == {(0, o) for o in (0, 1, 3, 4, 5)}
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, o) for o in (0, 1, 3, 4, 5)}


def test_positions_as_a_table_and_topic_filter(erased_table):
    path = erased_table
    other_topic = purge(str(path), pa.table({"_partition": pa.array([0], pa.int32()),
                                             "_offset": pa.array([2], pa.int64())}), topic="elsewhere")
    assert other_topic.files == [] and other_topic.checkpoints == []
    other_partition = purge(str(path), {1: [2]}, topic=TOPIC)
    assert other_partition.files == []
    got = purge(str(path), pa.table({"partition": pa.array([0], pa.int32()), "offset": pa.array([2], pa.int64())}))
    assert len(got.files) == 1 and got.unreadable == [1, 2]


def test_a_second_purge_deletes_nothing(erased_table):
    path = erased_table
    first = purge(str(path), {0: [2]}, topic=TOPIC)
    assert first.files
    after_first = listing(path)

    second = purge(str(path), {0: [2]}, topic=TOPIC)

    assert (second.files, second.checkpoints, second.unreadable, second.checkpoint_written, second.checksums) == \
        ([], [], [], None, [])
    assert listing(path) == after_first


def test_a_file_of_the_current_version_is_never_deleted(tmp_path):
    """Purging before the DELETE deletes nothing of the current version: the rows stay until the
    DELETE removes them, and a purge after it deletes their file."""
    path = tmp_path / "speed"
    append(path, [0, 1], ["c0", "c1"])
    append(path, [2, 3], [ERASED, "c3"])
    DeltaTable(str(path)).create_checkpoint()
    before = listing(path)

    early = purge(str(path), {0: [0, 2, 3]}, topic=TOPIC)

    assert (early.files, early.checkpoints, early.unreadable, early.checkpoint_written) == ([], [], [], None)
    assert listing(path) == before
    assert all(not isinstance(t, Exception) for t in versions(path).values())
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, o) for o in range(4)}

    DeltaTable(str(path)).delete("_offset = 2")
    late = purge(str(path), {0: [0, 2, 3]}, topic=TOPIC)
    assert len(late.files) == 1 and late.unreadable == [1]
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, 0), (0, 1), (0, 3)}


def test_orphans_holding_a_position_go_and_files_without_the_columns_are_skipped(erased_table):
    path = erased_table
    pq.write_table(rows([2], [ERASED]), path / "orphan.parquet")  # a failed write's leftover
    pq.write_table(pa.table({"x": [1]}), path / "foreign.parquet")

    got = purge(str(path), {0: [2]}, topic=TOPIC)

    assert "orphan.parquet" in got.files and not (path / "orphan.parquet").exists()
    assert got.skipped == ["foreign.parquet"] and (path / "foreign.parquet").exists()


def test_versions_readable_only_from_a_removed_checkpoint_get_one_of_their_own(tmp_path):
    """The log before the checkpoint at v2 was cleaned up: v3 and after were read from it. The purge
    removes it (it lists the erased file), and checkpoints v3 so that v3 to v5 stay readable."""
    path = tmp_path / "speed"
    append(path, [0], ["c0"])
    append(path, [1], [ERASED])
    append(path, [2], ["c2"])
    DeltaTable(str(path)).create_checkpoint()
    DeltaTable(str(path)).delete("_offset = 1")  # v3
    append(path, [3], ["c3"])
    append(path, [4], ["c4"])
    for v in range(3):
        (path / "_delta_log" / f"{v:020d}.json").unlink()

    got = purge(str(path), {0: [1]}, topic=TOPIC)

    assert got.checkpoints == [f"_delta_log/{2:020d}.checkpoint.parquet"]
    assert got.bridging == [3] and got.checkpoint_written == 5 and got.unreadable == [2]
    assert parquet_holding(path, ERASED) == []
    for v in (3, 4, 5):
        assert (0, 1) not in positions_of(DeltaTable(str(path), version=v).to_pyarrow_table())
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, o) for o in (0, 2, 3, 4)}


def test_last_checkpoint_naming_a_removed_checkpoint_is_repaired(tmp_path):
    """The current version has a checkpoint already, but ``_last_checkpoint`` names the older one
    the purge removes: delta-rs could not load the table if the hint stayed."""
    path = tmp_path / "speed"
    append(path, [0], ["c0"])
    append(path, [1], [ERASED])
    DeltaTable(str(path)).create_checkpoint()  # v1, lists the erased file
    hint = (path / "_delta_log" / "_last_checkpoint").read_text()
    DeltaTable(str(path)).delete("_offset = 1")  # v2
    DeltaTable(str(path)).create_checkpoint()
    (path / "_delta_log" / "_last_checkpoint").write_text(hint)  # a writer that did not update it

    got = purge(str(path), {0: [1]}, topic=TOPIC)

    assert got.checkpoints == [f"_delta_log/{1:020d}.checkpoint.parquet"] and got.checkpoint_written is None
    assert json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"] == 2
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, 0)}
    assert sorted(f for f in os.listdir(path / "_delta_log") if "checkpoint." in f) == [
        f"{2:020d}.checkpoint.parquet"]


def test_a_file_committed_while_the_purge_reads_is_not_deleted(erased_table, monkeypatch):
    """A file no version referenced when the purge listed the table, committed before it deletes
    (a writer outside the lease): it is the current version's now, and stays."""
    import time

    from deltalake.transaction import AddAction

    import loglake.erasure.purge as purging

    path = erased_table
    pq.write_table(rows([2], ["c2-again"]), path / "late.parquet")
    read = purging.holds

    def holds_then_commit(files, rel, wanted, topic):
        if rel == "late.parquet":
            table = DeltaTable(str(path))
            add = AddAction("late.parquet", (path / rel).stat().st_size, {}, int(time.time() * 1000), True, "{}")
            table.create_write_transaction([add], "append", table.schema())
        return read(files, rel, wanted, topic)

    monkeypatch.setattr(purging, "holds", holds_then_commit)
    got = purge(str(path), {0: [2]}, topic=TOPIC)

    assert "late.parquet" not in got.files and (path / "late.parquet").exists()
    assert len(got.files) == 1
    assert (0, 2) in positions_of(DeltaTable(str(path)).to_pyarrow_table())


def test_a_second_erasure_purges_the_file_the_first_ones_delete_rewrote(tmp_path):
    # delta-rs' DELETE writes the rows it keeps with their strings as string_view: the purge
    # of a later erasure reads such a file (its offsets span the new position) and must tell.
    path, second = tmp_path / "speed", "globex-erased-4410"
    append(path, [0, 1, 2, 3], ["c0", ERASED, second, "c3"])
    assert DeltaTable(str(path)).delete("_partition = 0 AND _offset = 1")["num_deleted_rows"] == 1
    purge(str(path), {0: [1]}, topic=TOPIC)
    rewritten = [f for f in DeltaTable(str(path)).file_uris() if pa.types.is_string_view(
        pq.read_schema(f).field("_topic").type)]
    assert rewritten  # the case: the first DELETE's file, which the second one removes
    assert DeltaTable(str(path)).delete("_partition = 0 AND _offset = 2")["num_deleted_rows"] == 1
    got = purge(str(path), {0: [1, 2]}, topic=TOPIC)
    assert got.files and not (path / got.files[0]).exists()
    assert parquet_holding(path, second) == [] and parquet_holding(path, ERASED) == []
    assert positions_of(DeltaTable(str(path)).to_pyarrow_table()) == {(0, 0), (0, 3)}
