"""Where a data subject's records are: the positions an erasure erases.

A record names the subject when its value (or, for the dataset's key field, its record key)
holds the field with the key's text, at any depth of the JSON (a Debezium envelope's
``before``/``after``, the converter's ``payload``), whatever the field's type there: a
record quarantined for a wrong type is the subject's all the same. A record that is not JSON
at all but holds the key's text is taken too: nothing tells whose it is. Searched in the log
Kafka retains up to the request's position (read with confluent-kafka, committed records
only, as the tables' writers read it) and in every table of the dataset (delta-rs), so rows
whose records the log no longer holds (expired, compacted away) are found as well.

The key stays in this process: the ledger keeps positions and a hash, never the key.
"""

from __future__ import annotations

import json
from typing import Callable

from loglake.core.config import Config, Dataset
from loglake.core.errors import ParamError
from loglake.kafka.log import read_log
from loglake.tables import dataset_tables, open_table

Match = Callable[["bytes | None", "bytes | None"], bool]


def text_of(value) -> str | None:
    """A JSON value's text as a key is written: a string as it is, a number or boolean as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return None


def _holds(doc, field: str, key: str, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if isinstance(doc, dict):
        if field in doc and text_of(doc[field]) == key:
            return True
        return any(_holds(v, field, key, depth + 1) for v in doc.values() if isinstance(v, (dict, list)))
    if isinstance(doc, list):
        return any(_holds(v, field, key, depth + 1) for v in doc if isinstance(v, (dict, list)))
    return False


def _names(raw: bytes, field: str, key: str) -> bool:
    """Whether the bytes ``raw`` (a value or a JSON record key) name the subject."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return True  # not JSON, yet it holds the key's text: nothing tells whose it is
    if isinstance(doc, (dict, list)):
        return _holds(doc, field, key)
    return text_of(doc) == key  # a bare JSON scalar key


def matcher(ds: Dataset, field: str, key: str) -> Match:
    """Whether a record (key bytes, value bytes) names the subject ``field`` = ``key``."""
    wanted = key.encode()
    by_record_key = field in ds.keys and len(ds.keys) == 1 and not ds.debezium

    def match(k: bytes | None, v: bytes | None) -> bool:
        if by_record_key and k is not None and k == wanted:
            return True
        # A Debezium key is JSON holding the key's fields (a plain record key is text: compared above).
        for raw in ((v, k) if ds.debezium else (v,)):
            if raw is not None and wanted in raw and _names(raw, field, key):
                return True
        return False

    return match


def check(ds: Dataset, field: str | None, key: str) -> str:
    """The field an erasure of ``ds`` matches (``field``, else the dataset's key); refused with
    a message naming the parameter when it cannot be erased that way."""
    if not isinstance(key, str) or not key.strip():
        raise ParamError("key", "the data subject's key, as text (e.g. a user id: 42)")
    if ds.in_registry:
        raise ParamError("dataset", f"{ds.name} is in a Schema Registry format ({ds.format}): erasure reads JSON "
                                    "records only so far (docs/erasure.md, Limits)")
    if field is None:
        if len(ds.keys) != 1 or ds.keys[0] is None:
            raise ParamError("field", f"{ds.name} has no single key field: name the field that holds the key "
                                      f"(one of {', '.join(ds.fields)})")
        return ds.keys[0]
    if field not in ds.fields:
        raise ParamError("field", f"{field!r} is not a field of {ds.name} (one of {', '.join(ds.fields)})")
    return field


def in_log(config: Config, ds: Dataset, ranges: dict[int, tuple[int, int]], match: Match) -> dict[int, list[int]]:
    """Per partition, the offsets in ``ranges`` of the records ``match`` takes."""
    found = read_log(config, ds.topic, ranges, match=match)
    return {p: part.matched.tolist() for p, part in found.items() if part.matched is not None and len(part.matched)}


def in_tables(config: Config, ds: Dataset, field: str, key: str, match: Match,
              extra: list[str] = ()) -> dict[int, set[int]]:
    """Per partition, the offsets of ``ds.topic`` whose rows in any of the dataset's tables
    (and the ``extra`` table paths: a batch run's staged tables) name the subject."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import QueryBuilder

    quoted_topic = ds.topic.replace("'", "''")
    quoted_key = key.replace("'", "''")
    out: dict[int, set[int]] = {}
    paths = [(t.layer, t.path) for t in dataset_tables(config, ds)] + [("staged", p) for p in extra]
    for layer, path in paths:
        table = open_table(path, store=config.object_store)
        if table is None:
            continue
        columns = set(table.schema().to_arrow().names)
        if "_offset" not in columns:
            continue
        where = f"\"_topic\" = '{quoted_topic}'"
        if field in columns:
            sql = (f'SELECT "_partition", "_offset" FROM t WHERE {where} AND '
                   f"CAST(\"{field}\" AS VARCHAR) = '{quoted_key}'")
            rows = pa.table(QueryBuilder().register("t", table).execute(sql).read_all())
            for p, o in zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist()):
                out.setdefault(p, set()).add(o)
        if "value" in columns:  # the quarantine (raw bytes): its rows matched as the log's records are
            reader = QueryBuilder().register("t", table).execute(
                f'SELECT "_partition", "_offset", "key", "value" FROM t WHERE {where}')
            for batch in reader:
                b = pa.record_batch(batch) if not isinstance(batch, pa.RecordBatch) else batch
                # Only rows whose bytes hold the key's text can be the subject's (in Arrow: no row by row;
                # as binary: a file delta-rs rewrote holds binary_view, which no filter kernel takes).
                cols = [b.column(0), b.column(1)] + [pc.cast(b.column(i), pa.binary()) for i in (2, 3)]
                holds = pc.or_(*(pc.fill_null(pc.match_substring(c, key), False) for c in cols[2:]))
                ps, os_, ks, vs = (pc.filter(c, holds).to_pylist() for c in cols)
                for p, o, k, v in zip(ps, os_, ks, vs):
                    if match(k, v):
                        out.setdefault(p, set()).add(o)
    return out
