"""Schema validation and quarantine reasons, on a local Spark session (no Kafka)."""

from __future__ import annotations

import json

import pytest

from loglake.local.produce import generate
from loglake.records import validation
pytestmark = pytest.mark.integration  # a real Spark session

RAW = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
GOOD = {"view_id": "0b7e8b8e-2f7c-4a55-9d3e-3a2d5b1c9e01", "user_id": 7, "job_id": 42,
        "viewed_at": "2026-11-23T09:15:00.123Z", "source": "search", "duration_ms": 1500}


def with_(**kv):
    return json.dumps({**GOOD, **kv}).encode()


def without(field):
    return json.dumps({k: v for k, v in GOOD.items() if k != field}).encode()


CASES = [
    (json.dumps(GOOD).encode(), None, None),
    (None, "null_value", "event topics take no null values"),
    (b'{"view_id": ', "bad_json", "not valid JSON"),
    (b"\xff\xfe garbage", "bad_json", "not valid JSON"),
    (b"[1, 2]", "not_an_object", "not a JSON object"),
    (b"42", "not_an_object", "not a JSON object"),
    (without("job_id"), "missing_field", "required field 'job_id' is missing"),
    (with_(source=None), "null_field", "required field 'source' is null"),
    (with_(user_id="7"), "wrong_type", "field 'user_id' expected long, found STRING"),
    (with_(user_id=7.5), "wrong_type", "field 'user_id' expected long, found DECIMAL"),
    (with_(source=12), "wrong_type", "field 'source' expected string, found BIGINT"),
    (with_(viewed_at=1700000000), "wrong_type", "field 'viewed_at' expected timestamp, found BIGINT"),
    (with_(viewed_at="yesterday"), "wrong_type", "expected an ISO-8601 timestamp, found yesterday"),
    (with_(source="carrier_pigeon"), "out_of_domain", "field 'source' = carrier_pigeon is not one of [search"),
    (with_(duration_ms=-1), "out_of_domain", "field 'duration_ms' = -1 is below min 0"),
    (with_(duration_ms=86400001), "out_of_domain", "is above max 8.64e+07"),
    (with_(user_id=0), "out_of_domain", "field 'user_id' = 0 is below min 1"),
    (with_(view_id="not-a-uuid"), "out_of_domain", "field 'view_id' = not-a-uuid does not match"),
    (with_(extra="ignored"), None, None),  # unknown fields are allowed (forward compatible)
    (with_(extra="x" * 1_048_600), "oversized", "bytes is over max_value_bytes (1048576)"),  # valid, too big
    (b"{" * 1_048_577, "oversized", "value of 1048577 bytes"),  # the size is checked before parsing
]


@pytest.fixture(scope="module")
def cfg(spark_config):
    return spark_config


def run(spark, ds, values, keys=None):
    rows = [((keys[i] if keys else b"k"), v, ds.topic, 0, i, None) for i, v in enumerate(values)]
    validated = validation.validate(spark.createDataFrame(rows, RAW), ds)
    q = {r["_offset"]: r for r in validation.quarantine_rows(validated, "speed").collect()}
    valid = {r["_offset"]: r for r in validation.valid_rows(validated, ds).collect()}
    return valid, q


def test_reasons(spark, cfg):
    ds = cfg.dataset("job_views")
    valid, q = run(spark, ds, [c[0] for c in CASES])
    for i, (value, code, fragment) in enumerate(CASES):
        if code is None:
            assert i in valid and i not in q, (value, q.get(i))
        else:
            assert i in q and i not in valid, value
            assert q[i]["reason_code"] == code, (value, q[i]["reason"])
            assert fragment in q[i]["reason"], q[i]["reason"]
            assert q[i]["value"] == (bytearray(value) if value is not None else None)  # raw bytes kept
            assert q[i]["_layer"] == "speed" and q[i]["_topic"] == ds.topic


def test_valid_row_is_typed(spark, cfg):
    ds = cfg.dataset("job_views")
    valid, _ = run(spark, ds, [json.dumps(GOOD).encode()])
    row = valid[0]
    assert row["user_id"] == 7 and row["job_id"] == 42 and row["duration_ms"] == 1500
    assert row["viewed_at"].isoformat().startswith("2026-11-23T09:15:00.123")
    assert set(validation.PROVENANCE) <= set(row.asDict())


def test_changelog_tombstones_and_key_mismatch(spark, cfg):
    ds = cfg.dataset("company_ceos")
    good = {"company_id": "c1", "company": "Acme", "ceo": "Ada", "since": "2020-01-01T00:00:00Z"}
    values = [json.dumps(good).encode(), None, None, json.dumps(good).encode()]
    keys = [b"c1", b"c1", None, b"c2"]
    valid, q = run(spark, ds, values, keys)
    assert valid[0]["_deleted"] is False and valid[0]["company_id"] == "c1"
    assert valid[1]["_deleted"] is True and valid[1]["company_id"] == "c1"  # tombstone keeps its key
    assert q[2]["reason_code"] == "null_key"
    assert q[3]["reason_code"] == "key_mismatch" and "record key c2 differs" in q[3]["reason"]


@pytest.mark.parametrize("name", ["job_views", "company_ceos"])
def test_generator_labels_agree_with_validation(spark, cfg, name):
    ds = cfg.dataset(name)
    records = list(generate(ds, 400, bad_fraction=0.25, seed=3))
    valid, q = run(spark, ds, [v for (k, v), ok in records], [k for (k, v), ok in records])
    assert len(q) == 100 and len(valid) == 300
    assert all((i in valid) == ok for i, (_, ok) in enumerate(records))


# Well-formed in odd ways, or malformed in ways the fast path must not let through.
EDGE = [
    b'  {"view_id": "0b7e8b8e-2f7c-4a55-9d3e-3a2d5b1c9e01", "user_id": 7, "job_id": 42, '
    b'"viewed_at": "2026-11-23T09:15:00Z", "source": "email", "duration_ms": 1}',  # leading blanks
    with_(user_id=7, job_id=42).replace(b'"job_id": 42', b'"job_id": 41, "job_id": 42'),  # repeated key
    with_(job_id=1).replace(b'"job_id": 1', b'"job_id": "x", "job_id": 1'),
    with_(source="search").replace(b'"search"', b"'search'"),  # single quotes are not JSON
    with_(duration_ms=1).replace(b'"duration_ms": 1', b'"duration_ms": NaN'),
    with_(duration_ms=1).replace(b'"duration_ms": 1', b'"duration_ms": 007'),
    with_(user_id=1) + b" trailing",
    with_(viewed_at="2026-02-30T00:00:00Z"), with_(viewed_at=""), with_(viewed_at=None),
    with_(view_id=None), with_(view_id={"a": 1}), with_(view_id=["x"]), with_(view_id=True),
    with_(user_id=True), with_(user_id=None), with_(user_id=1e3), with_(user_id=2**63),
    with_(duration_ms=86400000), with_(duration_ms=0),
    with_(source="Search"), with_(source=""), with_(view_id="0B7E8B8E-2F7C-4A55-9D3E-3A2D5B1C9E01"),
    with_(source="search\u00e9"), with_(view_id="0b7e8b8e-2f7c-4a55-9d3e-3a2d5b1c9e01\n"),
    b'{"view_id": "0b7e8b8e-2f7c-4a55-9d3e-3a2d5b1c9e01"}', b"{}", b"{", b"", b"null", b'"str"', b"[{}]",
    with_(extra="y" * 1_048_576),
]


@pytest.mark.parametrize("name", ["job_views", "company_ceos"])
def test_fast_path_agrees_with_the_exact_rules(spark, cfg, name):
    """Every record gets the same reason and the same values with and without the fast path."""
    ds = cfg.dataset(name)
    records = [r for r, _ok in generate(ds, 300, bad_fraction=0.5, seed=11)]
    values = [v for _k, v in records] + (EDGE if name == "job_views" else [
        b'{"company_id": "c1", "company": "A", "ceo": "B", "since": "2020-01-01T00:00:00Z"}',
        b'{"company_id": 1, "company": "A", "ceo": "B", "since": "2020-01-01T00:00:00Z"}', None])
    keys = [k for k, _v in records] + [b"c1"] * (len(values) - len(records))
    rows = [(keys[i], v, ds.topic, 0, i, None) for i, v in enumerate(values)]
    raw = spark.createDataFrame(rows, RAW)

    def collect(df):  # as strings: a malformed timestamp may lie beyond Python's datetime range
        return {r["_offset"]: r.asDict(recursive=True) for r in df.select(
            "_offset", "_reason", *[df[c].cast("string").alias(c) for c in df.columns if c not in (
                "_offset", "_reason", "key", "value")]).collect()}

    fast = collect(validation.validate(raw, ds))
    exact = collect(validation.validate(raw, ds, fast_path=False))
    assert len(fast) == len(values)
    diff = {i: (values[i], fast[i], exact[i]) for i in fast if fast[i] != exact[i]}
    assert not diff
    assert sum(1 for r in fast.values() if r["_reason"] is None) > 100  # both kinds are in the corpus
    assert sum(1 for r in fast.values() if r["_reason"] is not None) > 100
