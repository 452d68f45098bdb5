"""Which records name a data subject (``loglake.erasure.search``), the erasure's parameters
refused at the edge, and ``erasure.purge_after``'s forms."""

from __future__ import annotations

import json

import pytest

from loglake.core import paths
from loglake.core.config import load_config
from loglake.core.config.settings import ErasureSettings
from loglake.core.errors import ParamError
from loglake.erasure import search
from loglake.ledger.erasures import positions_sql, subject


@pytest.fixture(scope="module")
def config():
    return load_config(paths.REPO_ROOT / "conf", profile="local")


def test_a_record_names_the_subject_by_its_field_at_any_depth_whatever_its_type(config):
    views = config.dataset("job_views")
    match = search.matcher(views, "user_id", "42")
    row = {"view_id": "v", "user_id": 42, "job_id": 7}
    assert match(b"42", json.dumps(row).encode())
    assert match(None, json.dumps(row).encode())                                   # no record key
    assert match(b"x", json.dumps({**row, "user_id": "42"}).encode())             # a wrong type: theirs all the same
    assert match(b"x", json.dumps({"payload": {"after": row}}).encode())          # an envelope, the wrapper
    assert match(b"x", b'{"user_id": 42, "view_id": "trunc')                      # not JSON, holds the text
    assert not match(b"7", json.dumps({**row, "user_id": 7, "job_id": 42}).encode())  # 42 in another field
    assert not match(b"7", json.dumps({**row, "user_id": 420}).encode())
    assert not match(b"7", b'{"user_id": 7, "note": "trunc')                     # not JSON, without the text
    assert match(b"42", None)                                                     # the key's tombstone


def test_a_changelogs_record_key_names_the_subject_and_a_debezium_key_by_its_fields(config):
    ceos = config.dataset("company_ceos")
    match = search.matcher(ceos, "company_id", "c7")
    assert match(b"c7", None)
    assert not match(b"c70", None)
    assert not match(b"c8", json.dumps({"company_id": "c8", "company": "c7 holdings"}).encode())
    debezium = ceos.model_copy(update={"envelope": "debezium"})
    m = search.matcher(debezium, "company_id", "c7")
    assert m(json.dumps({"company_id": "c7"}).encode(), None)                     # a Debezium delete's tombstone
    assert m(b"{}", json.dumps({"before": {"company_id": "c7"}, "after": None, "op": "d"}).encode())


def test_the_erasures_parameters_are_refused_naming_the_key(config):
    views = config.dataset("job_views")
    assert search.check(views, None, "42") == "user_id"
    for field, key, named in ((None, "", "key"), (None, "  ", "key"), ("nope", "42", "field")):
        with pytest.raises(ParamError) as e:
            search.check(views, field, key)
        assert e.value.field == named
    avro = views.model_copy(update={"format": "avro"})
    with pytest.raises(ParamError) as e:
        search.check(avro, None, "42")
    assert e.value.field == "dataset"


def test_the_ledger_keeps_a_hash_of_the_subject_and_positions_as_a_predicate():
    a = subject("job_views", "user_id", "42")
    assert a == subject("job_views", "user_id", "42") and a != subject("job_views", "user_id", "43")
    assert "42" not in a and len(a) == 64
    assert positions_sql("t'x", {1: [5, 3], 0: []}) == (
        "\"_topic\" = 't''x' AND ((\"_partition\" = 1 AND \"_offset\" IN (3, 5)))")
    assert positions_sql("t", {}).endswith("(FALSE)")


@pytest.mark.parametrize("value, seconds", [("24h", 86400), ("0", 0), ("90m", 5400), ("30 minutes", 1800),
                                            ("3600s", 3600), ("7d", 604800), ("1.5 hours", 5400)])
def test_purge_after_takes_a_duration(value, seconds):
    assert ErasureSettings(purge_after=value).purge_after_seconds == seconds


def test_purge_after_refuses_what_is_no_duration():
    with pytest.raises(ValueError, match="not a duration"):
        ErasureSettings(purge_after="soon")
