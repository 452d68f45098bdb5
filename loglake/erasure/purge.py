"""The targeted purge of an erasure: the files of older table versions that still hold its rows.

An erasure's DELETE (``loglake.erasure.erase``) leaves the current version without the erased
rows, but the versions before it still reference the Parquet files that hold them (removed,
not vacuumed), and time travel would return the rows. A VACUUM would delete every removed
file past its retention and take the whole history with it; the purge deletes only the files
that hold an erased position, found by reading their ``_partition``, ``_offset`` (and
``_topic``) columns alone, row groups whose statistics cannot match left unread. The versions
that referenced one can no longer be read (their log still loads, a scan fails); the others can.

The log still describes a deleted file, with its statistics: the key's value as a column's
min or max. What a reader uses of it goes:

- checkpoints (single, multi-part, v2 and their sidecars) listing a deleted file as an ``add``
  (``stats``, ``stats_parsed``; Spark's also as the checkpoint's own column statistics) are
  removed. Before, delta-rs writes a checkpoint of the current version, so loading stays fast,
  and one at the first version of each run of versions that held no deleted file and were
  readable only from a removed checkpoint (the JSON commits before it cleaned up), so they stay
  readable. ``_last_checkpoint`` is left naming a checkpoint that exists: delta-rs fails to
  load a table whose hint names a missing one;
- Spark's version checksums (``N.crc``) list each file of a small snapshot with its stats
  (``allFiles``): those naming a deleted file are removed, as are log compaction files
  (``x.y.compacted.json``) naming one. Both are optional in the protocol;
- JSON commits are immutable in the protocol: the commit that added a deleted file keeps its
  ``stats`` until the log cleanup deletes it (older than ``delta.logRetentionDuration``, 30 days
  by default, at a checkpoint after that). ``Purged.commits_with_stats`` names them.

Files of the current version are never deleted, whatever they hold: a purge before the DELETE
deletes nothing of it. A file a commit still in flight wrote is not referenced yet either: run
the purge under the dataset's writer lease, as ``loglake.erasure.erase`` does.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote, urlparse

from loglake.core.objectstore import delta_location, is_remote, split

LOG = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CRC = re.compile(r"^(\d{20})\.crc$")
_COMPACTED = re.compile(r"^\d{20}\.\d{20}\.compacted\.json$")
# classic: N.checkpoint.parquet; multi-part: N.checkpoint.I.K.parquet; v2: N.checkpoint.<uuid>.(parquet|json)
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.([^.]+))?\.(parquet|json)$")


@dataclass(frozen=True)
class Purged:
    """What a purge did to the table at ``table`` (paths relative to its root)."""

    table: str
    files: list[str]                # data files deleted
    checkpoints: list[str]          # log files removed: checkpoints (parts, v2 sidecars), compaction files
    unreadable: list[int]           # versions that cannot be read now (their snapshot referenced a deleted file)
    checkpoint_written: int | None  # the current version's checkpoint, when one was written
    skipped: list[str] = field(default_factory=list)         # files not in the current version lacking the columns
    commits_with_stats: list[int] = field(default_factory=list)  # JSON commits keeping a deleted file's stats
    checksums: list[str] = field(default_factory=list)       # version checksums (N.crc) removed
    bridging: list[int] = field(default_factory=list)        # versions checkpointed to stay readable


@dataclass(frozen=True)
class _Files:
    """The table's files on a pyarrow file system (local, or the object store's S3)."""

    fs: Any
    root: str       # the table's root on ``fs``
    local: bool

    @classmethod
    def of(cls, path: str, store=None) -> _Files:
        import pyarrow.fs as pafs

        if not is_remote(path):
            return cls(pafs.LocalFileSystem(), os.path.abspath(path.removeprefix("file://").removeprefix("file:")),
                       True)
        _uri, opts = delta_location(path, store)
        endpoint = opts.get("AWS_ENDPOINT_URL")
        scheme = "https"
        if endpoint and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        fs = pafs.S3FileSystem(access_key=opts.get("AWS_ACCESS_KEY_ID"), secret_key=opts.get("AWS_SECRET_ACCESS_KEY"),
                               session_token=opts.get("AWS_SESSION_TOKEN"), region=opts.get("AWS_REGION"),
                               endpoint_override=endpoint, scheme=scheme,
                               force_virtual_addressing=opts.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true")
        bucket, key = split(path)
        return cls(fs, f"{bucket}/{key.strip('/')}".rstrip("/"), False)

    def at(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def listing(self) -> list[str]:
        """Every file under the root, relative to it."""
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True))
        start = len(self.root) + 1
        return sorted(i.path[start:] for i in infos if i.type == pafs.FileType.File)

    def text(self, rel: str) -> str:
        with self.fs.open_input_stream(self.at(rel)) as f:
            return f.read().decode()

    def write_text(self, rel: str, text: str) -> None:
        with self.fs.open_output_stream(self.at(rel)) as f:
            f.write(text.encode())

    def delete(self, rel: str) -> None:
        """Delete ``rel`` (and, on a filesystem, the Hadoop checksum ``.<name>.crc`` Spark leaves beside it)."""
        import pyarrow.fs as pafs

        self.fs.delete_file(self.at(rel))
        if self.local:
            head, _, name = rel.rpartition("/")
            sibling = f"{head}/.{name}.crc" if head else f".{name}.crc"
            if self.fs.get_file_info(self.at(sibling)).type == pafs.FileType.File:
                self.fs.delete_file(self.at(sibling))

    def exists(self, rel: str) -> bool:
        import pyarrow.fs as pafs

        return self.fs.get_file_info(self.at(rel)).type == pafs.FileType.File

    @contextmanager
    def parquet(self, rel: str) -> Iterator[Any]:
        import pyarrow.parquet as pq

        with self.fs.open_input_file(self.at(rel)) as f:
            yield pq.ParquetFile(f)


def _positions(positions) -> dict[int, Any]:
    """Per partition, the erased offsets (a sorted, distinct int64 numpy array)."""
    import numpy as np

    if isinstance(positions, Mapping):
        pairs = {int(p): list(o) for p, o in positions.items()}
    else:
        names = positions.column_names
        part, off = ("_partition", "_offset") if "_partition" in names else ("partition", "offset")
        pairs = {}
        for p, o in zip(positions.column(part).to_pylist(), positions.column(off).to_pylist()):
            pairs.setdefault(int(p), []).append(o)
    return {p: np.unique(np.asarray(o, dtype=np.int64)) for p, o in pairs.items() if len(o)}


def _may_hold(stats_p, stats_o, wanted: dict[int, Any]) -> bool:
    """Whether a row group of these ``_partition`` and ``_offset`` statistics may hold a wanted position."""
    import numpy as np

    if stats_p is None or stats_o is None or not (stats_p.has_min_max and stats_o.has_min_max):
        return True
    for p, offs in wanted.items():
        if stats_p.min <= p <= stats_p.max:
            i = np.searchsorted(offs, stats_o.min)
            if i < len(offs) and offs[i] <= stats_o.max:
                return True
    return False


def holds(files: _Files, rel: str, wanted: dict[int, Any], topic: str | None) -> bool | None:
    """Whether the Parquet file ``rel`` holds a row at a ``wanted`` position (of ``topic``, when
    given); None when it lacks the columns to tell."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = ["_partition", "_offset"] + (["_topic"] if topic is not None else [])
    with files.parquet(rel) as pf:
        if not set(cols) <= set(pf.schema_arrow.names):
            return None
        md = pf.metadata
        at = {md.schema.column(i).path: i for i in range(md.num_columns)}
        groups = [g for g in range(md.num_row_groups)
                  if _may_hold(md.row_group(g).column(at["_partition"]).statistics,
                               md.row_group(g).column(at["_offset"]).statistics, wanted)]
        if not groups:
            return False
        t = pf.read_row_groups(groups, columns=cols, use_threads=False)
    part, off = t.column("_partition"), pc.cast(t.column("_offset"), pa.int64())
    for p in pc.unique(part).to_pylist():
        if p not in wanted:
            continue
        hit = pc.and_(pc.equal(part, p), pc.is_in(off, value_set=pa.array(wanted[p], pa.int64())))
        if topic is not None:  # a file delta-rs rewrote (a DELETE) holds its strings as string_view
            hit = pc.and_(hit, pc.equal(pc.cast(t.column("_topic"), pa.string()), topic))
        if pc.any(hit).as_py():
            return True
    return False


def _relative(path: str, root: str) -> str:
    """A log action's path relative to the table's root (as the listing names it)."""
    if "://" in path or path.startswith("file:"):
        u = urlparse(path)
        loc = unquote(f"{u.netloc}{u.path}" if u.netloc else u.path)
        return loc[len(root) + 1:] if loc.startswith(root + "/") else loc
    return unquote(path)


def _current(table, root: str) -> set[str]:
    import pyarrow as pa

    return {_relative(p, root) for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()}


@dataclass
class _Described:
    """What one log file says of the deleted files."""

    adds: set[str] = field(default_factory=set)       # listed as add (a snapshot holding them)
    stats: bool = False                               # an add or remove of one carries statistics
    sidecars: set[str] = field(default_factory=set)   # the v2 sidecars it names

    @property
    def names(self) -> bool:
        return bool(self.adds) or self.stats


def _actions(text: str) -> Iterable[dict]:
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def _describe_json(text: str, deleted: set[str], root: str, names: tuple[str, ...]) -> _Described:
    out = _Described()
    if not any(n in text for n in names):
        return out
    for action in _actions(text):
        for kind in ("add", "remove"):
            a = action.get(kind)
            if a and _relative(a["path"], root) in deleted:
                if kind == "add":
                    out.adds.add(_relative(a["path"], root))
                out.stats |= bool(a.get("stats") or a.get("stats_parsed"))
        if action.get("sidecar"):
            out.sidecars.add(action["sidecar"]["path"].rsplit("/", 1)[-1])
    return out


def _describe_parquet(files: _Files, rel: str, deleted: set[str], root: str) -> _Described:
    import pyarrow.compute as pc

    wanted = {"add": ("path",), "remove": ("path", "stats", "stats_parsed"), "sidecar": ("path",)}
    with files.parquet(rel) as pf:
        schema = pf.schema_arrow
        cols = [f"{kind}.{name}" for kind, names in wanted.items() if kind in schema.names
                for name in names if name in schema.field(kind).type.names]
        t = pf.read(columns=cols, use_threads=False)
    out = _Described()
    for kind in ("add", "remove"):
        if kind not in t.column_names:
            continue
        col = t.column(kind).combine_chunks()
        paths = col.field("path").to_pylist()
        names = col.type.names
        with_stats = [False] * len(paths)
        for s in ("stats", "stats_parsed"):
            if s in names:
                with_stats = [a or b for a, b in zip(with_stats, pc.is_valid(col.field(s)).to_pylist())]
        for p, st in zip(paths, with_stats):
            if p is not None and _relative(p, root) in deleted:
                if kind == "add":
                    out.adds.add(_relative(p, root))
                out.stats |= st
    if "sidecar" in t.column_names:
        out.sidecars = {p.rsplit("/", 1)[-1] for p in t.column("sidecar").combine_chunks().field("path").to_pylist()
                        if p is not None}
    return out


@dataclass
class _Log:
    """The table's ``_delta_log`` as it concerns the deleted files."""

    commits: dict[int, str]                          # version → JSON commit
    events: dict[int, list[tuple[str, bool]]]        # version → (deleted file, added?) of its commit
    commits_with_stats: list[int]
    groups: dict[tuple, list[str]]                   # checkpoint (version, kind...) → its files
    stale: set[tuple]                                # checkpoints describing a deleted file
    group_adds: dict[tuple, set[str]]                # deleted files a checkpoint lists as added
    sidecars: list[str]                              # stale sidecars
    crcs: list[str]                                  # stale version checksums
    compacted: list[str]                             # stale log compaction files

    def checkpointed(self, dropped: set[tuple] = frozenset()) -> set[int]:
        """Versions with a complete checkpoint (``dropped`` left out)."""
        out = set()
        for key, parts in self.groups.items():
            if key not in dropped and (key[1] != "multi" or len(parts) == key[2]):
                out.add(key[0])
        return out

    def readable(self, checkpoints: set[int], upto: int) -> list[bool]:
        """Per version, whether its snapshot can be reconstructed: a checkpoint at it, or a
        commit at it after a readable version (version 0: its commit alone)."""
        out: list[bool] = []
        for v in range(upto + 1):
            out.append(v in checkpoints or (v in self.commits and (v == 0 or out[v - 1])))
        return out

    def referencing(self, upto: int) -> set[int]:
        """Versions whose snapshot holds a deleted file."""
        at_checkpoint: dict[int, set[str]] = {}
        for key, adds in self.group_adds.items():
            if key[1] != "multi" or len(self.groups[key]) == key[2]:
                at_checkpoint.setdefault(key[0], set()).update(adds)
        out, state = set(), None
        for v in range(upto + 1):
            if v in self.commits and (v == 0 or state is not None):
                state = set() if v == 0 else set(state)
                for path, added in self.events.get(v, ()):
                    (state.add if added else state.discard)(path)
            elif v in at_checkpoint:
                state = set(at_checkpoint[v])
            else:
                state = None
            if state:
                out.add(v)
        return out


def _read_log(files: _Files, listing: list[str], deleted: set[str]) -> _Log:
    names = tuple({n for rel in deleted for n in (rel.rsplit("/", 1)[-1], quote(rel.rsplit("/", 1)[-1]))})
    commits, events, with_stats = {}, {}, []
    groups: dict[tuple, list[str]] = {}
    described: dict[tuple, list[_Described]] = {}
    sidecars: dict[str, tuple[str, _Described]] = {}
    crcs, compacted = [], []
    for rel in listing:
        if not rel.startswith(LOG + "/"):
            continue
        name = rel[len(LOG) + 1:]
        if name.startswith("_sidecars/") and name.endswith(".parquet"):
            sidecars[name.rsplit("/", 1)[-1]] = (rel, _describe_parquet(files, rel, deleted, files.root))
        elif "/" in name:
            continue
        elif m := _COMMIT.match(name):
            v = int(m.group(1))
            commits[v] = rel
            text = files.text(rel)
            if any(n in text for n in names):
                for action in _actions(text):
                    for kind in ("add", "remove"):
                        a = action.get(kind)
                        if a and _relative(a["path"], files.root) in deleted:
                            events.setdefault(v, []).append((_relative(a["path"], files.root), kind == "add"))
                            if a.get("stats") and v not in with_stats:
                                with_stats.append(v)
        elif m := _CHECKPOINT.match(name):
            v, part, parts, uid, ext = m.groups()
            key = (int(v), "multi", int(parts)) if parts else (int(v), "v2", uid) if uid else (int(v), "classic")
            groups.setdefault(key, []).append(rel)
            d = (_describe_parquet(files, rel, deleted, files.root) if ext == "parquet"
                 else _describe_json(files.text(rel), deleted, files.root, names))
            described.setdefault(key, []).append(d)
        elif _CRC.match(name):
            text = files.text(rel)
            if any(n in text for n in names):
                listed = {_relative(f["path"], files.root) for f in json.loads(text).get("allFiles") or ()}
                if listed & deleted:
                    crcs.append(rel)
        elif _COMPACTED.match(name) and _describe_json(files.text(rel), deleted, files.root, names).names:
            compacted.append(rel)
    bad_sidecars = {n for n, (_rel, d) in sidecars.items() if d.names}
    stale, group_adds = set(), {}
    for key, ds in described.items():
        adds = set().union(*(d.adds for d in ds))
        named = set().union(*(d.sidecars for d in ds))
        adds |= set().union(set(), *(sidecars[n][1].adds for n in named if n in sidecars))
        group_adds[key] = adds
        if any(d.names for d in ds) or named & bad_sidecars:
            stale.add(key)
    return _Log(commits, events, sorted(with_stats), groups, stale, group_adds,
                sorted(sidecars[n][0] for n in bad_sidecars), crcs, compacted)


def _checkpoint(uri: str, options: dict | None, version: int | None, files: _Files, deleted: set[str]) -> int:
    """Write a checkpoint (delta-rs) of ``version`` (the current one: None), check it names no
    deleted file; its version."""
    from deltalake import DeltaTable

    table = DeltaTable(uri, version=version, storage_options=options)
    table.create_checkpoint()
    rel = f"{LOG}/{table.version():020d}.checkpoint.parquet"
    if files.exists(rel) and _describe_parquet(files, rel, deleted, files.root).names:
        raise RuntimeError(f"the checkpoint delta-rs wrote ({rel}) describes a file the purge deletes: nothing "
                           "was deleted")
    return table.version()


def _repair_hint(files: _Files, log: _Log, kept: set[int]) -> None:
    """Make ``_last_checkpoint`` name a checkpoint that exists (the newest), or remove it when none does."""
    rel = f"{LOG}/_last_checkpoint"
    if not files.exists(rel):
        return
    try:
        named = int(json.loads(files.text(rel))["version"])
    except (ValueError, KeyError, TypeError):
        named = None
    if named in kept:
        return
    if not kept:
        files.delete(rel)
        return
    newest = max(kept)
    keys = [k for k in log.groups if k[0] == newest and k not in log.stale
            and (k[1] != "multi" or len(log.groups[k]) == k[2])]
    key = max(keys, key=lambda k: k[1] == "classic") if keys else (newest, "classic")  # else: one written here
    parts = log.groups.get(key, [f"{LOG}/{newest:020d}.checkpoint.parquet"])
    size = 0
    for part in parts:
        if part.endswith(".parquet"):
            with files.parquet(part) as pf:
                size += pf.metadata.num_rows
        else:
            size += len(list(_actions(files.text(part))))
    files.write_text(rel, json.dumps({"version": newest, "size": size,
                                      **({"parts": key[2]} if key[1] == "multi" else {})}))


def purge(path: str, positions: "pyarrow.Table" | Mapping[int, Iterable[int]], *, topic: str | None = None,
          store=None) -> Purged:
    """Delete every Parquet data file under the Delta table at ``path`` that its current version
    does not reference and that holds a row at one of ``positions`` (per partition, the erased
    offsets: a dict, or a pyarrow table of ``_partition``/``_offset`` or ``partition``/``offset``),
    of ``topic`` when given; then leave no checkpoint, sidecar, version checksum or log
    compaction file describing a deleted file (the module's docstring says how). ``store``: the
    object store the table is on (the config's ``object_store``; its files are reached through
    pyarrow's S3 file system). Idempotent: a second call deletes nothing."""
    from deltalake import DeltaTable

    wanted = _positions(positions)
    files = _Files.of(path, store)
    uri, options = delta_location(path, store)
    table = DeltaTable(uri, storage_options=options)
    current = _current(table, files.root)
    listing = files.listing()
    hits, skipped = [], []
    if wanted:
        for rel in listing:
            if rel.endswith(".parquet") and not rel.startswith(LOG + "/") and rel not in current:
                held = holds(files, rel, wanted, topic)
                if held is None:
                    skipped.append(rel)
                elif held:
                    hits.append(rel)
    if hits:  # a commit since may have added one (a writer outside the lease): never delete a current file
        hits = [rel for rel in hits if rel not in _current(DeltaTable(uri, storage_options=options), files.root)]
    if not hits:
        return Purged(path, [], [], [], None, skipped)
    deleted = set(hits)
    log = _read_log(files, listing, deleted)
    latest = max([table.version(), *log.commits, *(k[0] for k in log.groups)])
    before = log.readable(log.checkpointed(), latest)
    refs = log.referencing(latest)
    kept = log.checkpointed(log.stale)
    bridging, written = [], None
    if log.stale:
        readable = False
        for v in range(latest + 1):  # the first of each run of versions only a removed checkpoint made readable
            readable = v in kept or (v in log.commits and (v == 0 or readable))
            if before[v] and v not in refs and not readable:
                _checkpoint(uri, options, v, files, deleted)
                kept.add(v)
                bridging.append(v)
                readable = True
        if DeltaTable(uri, storage_options=options).version() not in kept:
            written = _checkpoint(uri, options, None, files, deleted)
            kept.add(written)
    removed = sorted(p for key in log.stale for p in log.groups[key]) + log.sidecars + log.compacted
    for rel in removed + log.crcs:
        files.delete(rel)
    _repair_hint(files, log, kept)
    for rel in hits:
        files.delete(rel)
    after = log.readable(kept, latest)
    unreadable = [v for v in range(latest + 1) if before[v] and (v in refs or not after[v])]
    return Purged(path, hits, removed, unreadable, written, skipped, log.commits_with_stats, log.crcs, bridging)
