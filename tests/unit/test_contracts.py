"""Table contracts: one definition gives the Spark DDL, the Arrow schema and the column list."""

from __future__ import annotations

import pyarrow as pa
import pytest

from loglake.core import contracts
from loglake.core.config import load_config
from loglake.core import paths


@pytest.mark.parametrize("table", contracts.SYSTEM_TABLES, ids=lambda t: t.name)
def test_spark_ddl_and_arrow_schema_name_the_same_columns(table):
    schema = table.contract.arrow_schema()
    assert schema.names == table.contract.names
    ddl_names = [part.split("`")[1] for part in table.contract.ddl.split(", ")]
    assert ddl_names == table.contract.names
    assert len(set(table.contract.names)) == len(table.contract.names)


def test_types_map_one_to_one():
    c = contracts.contract(("a", "string"), ("b", "int"), ("c", "bigint"), ("d", "double"), ("e", "boolean"),
                           ("f", "timestamp"), ("g", "binary"))
    assert c.ddl == "`a` string, `b` int, `c` bigint, `d` double, `e` boolean, `f` timestamp, `g` binary"
    assert c.arrow_schema() == pa.schema([("a", pa.string()), ("b", pa.int32()), ("c", pa.int64()),
                                          ("d", pa.float64()), ("e", pa.bool_()),
                                          ("f", pa.timestamp("us", tz="UTC")), ("g", pa.binary())])


def test_system_tables_live_under_the_lake_root():
    assert contracts.LEDGER.path("/lake/") == "/lake/_ledger/offsets"
    assert [t.relative_path for t in contracts.SYSTEM_TABLES] == [
        "_ledger/offsets", "_ledger/schemas", "_quality_results", "_audit_results", "_maintenance_log",
        "_ledger/erasures", "_ledger/erased_offsets"]


def test_valid_rows_are_fields_then_provenance():
    config = load_config(paths.REPO_ROOT / "conf", profile="local")
    jv, ceos = config.dataset("job_views"), config.dataset("company_ceos")
    assert contracts.valid_rows(jv).names == [*jv.fields, "_topic", "_partition", "_offset", "_kafka_timestamp"]
    assert contracts.valid_rows(ceos).names == [*ceos.fields, "_deleted", *contracts.PROVENANCE.names]
    types = dict(c[:2] for c in ((col.name, col.type) for col in contracts.valid_rows(jv).columns))
    assert types["user_id"] == "bigint" and types["viewed_at"] == "timestamp" and types["_partition"] == "int"
    assert contracts.QUARANTINE.names[:4] == contracts.PROVENANCE.names
