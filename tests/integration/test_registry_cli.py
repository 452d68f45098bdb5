"""The schema registry from the command line, as an operator runs it: ``loglake registry
start|status|stop`` with its state under the state directory, ``loglake produce`` through
confluent-kafka's serializer, and the speed job under spark-submit reading the topic, with a
second version ``loglake status`` and the job refuse by Avro's rules."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from loglake.core.processes import free_port
from loglake.local.apicurio import EmbeddedRegistry
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

CLICKS = {"type": "record", "name": "Click", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "referrer", "type": ["null", "string"], "default": None}]}
# A field added as a union with null but no default: Avro cannot read version 1's records with it.
CAMPAIGN = {**CLICKS, "fields": [*CLICKS["fields"], {"name": "campaign", "type": ["null", "string"]}]}


def test_registry_start_status_stop_then_an_avro_topic_produced_and_streamed(make_config, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/apis/ccompat/v7"
    config = make_config(registry={"url": url, "embedded": True}, extra_datasets={
        "clicks": {"kind": "events", "partitions": 2, "key": "user_id", "format": "avro"}})
    try:
        r = run_loglake(config, "registry", "status")
        assert r.returncode == 1 and f"registry: {url} (not running)" in r.stdout, r.stdout + r.stderr
        r = run_loglake(config, "registry", "start")
        assert r.returncode == 0 and "registry: started in " in r.stdout and url in r.stdout, r.stdout + r.stderr
        r = run_loglake(config, "registry", "status")
        assert r.returncode == 0 and r.stdout.strip() == f"registry: {url} (answers)", r.stdout + r.stderr
        assert (config.home / "registry").is_dir()

        schema = tmp_path / "click.avsc"
        schema.write_text(json.dumps(CLICKS))
        r = run_loglake(config, "produce", "clicks", "--format", "json", "--count", "1")
        assert r.returncode == 2 and "dataset clicks is format avro" in r.stderr, r.stderr
        r = run_loglake(config, "produce", "clicks", "--count", "200", "--bad-fraction", "0.05", "--seed", "3",
                        "--schema", str(schema), "--quiet")
        assert r.returncode == 0 and "produced 200 records" in r.stdout and "(190 good, 10 malformed" in r.stdout, (
            r.stdout + r.stderr)
        # A second version Avro cannot read the first's records with: status (no Spark in the CLI:
        # a JVM of its own asks Avro) and the speed job (spark-submit's JVM asks it before the
        # session starts) refuse it by name; its records are quarantined, the first's all land.
        campaign = tmp_path / "campaign.avsc"
        campaign.write_text(json.dumps(CAMPAIGN))
        r = run_loglake(config, "produce", "clicks", "--count", "20", "--seed", "4", "--schema", str(campaign),
                        "--quiet")
        assert r.returncode == 0 and "produced 20 records" in r.stdout, r.stdout + r.stderr
        r = run_loglake(config, "status")
        shown = next((line for line in r.stdout.splitlines() if "subject clicks" in line), r.stdout + r.stderr)
        assert "version 1 (schema id" in shown and "REFUSED" in shown and "version 2 is refused" in shown, shown
        assert "field 'campaign': READER_FIELD_MISSING_DEFAULT_VALUE" in shown, shown
        r = run_loglake(config, "speed", "run", "clicks", "--available-now")
        assert r.returncode == 0, r.stdout + r.stderr
        ds = config.dataset("clicks")
        speed = DeltaTable(config.table_path(ds, "speed")).to_pyarrow_table()
        quarantine = DeltaTable(config.table_path(ds, "quarantine")).to_pyarrow_table()
        assert speed.num_rows == 190 and quarantine.num_rows == 30
        assert set(speed.column_names) >= {"user_id", "url", "at", "referrer", "_offset"}
        assert "campaign" not in speed.column_names
        reasons = quarantine.column("reason_code").to_pylist()
        assert reasons.count("incompatible_schema") == 20
        assert set(reasons) - {"incompatible_schema"} <= {"no_magic_byte", "unknown_schema_id", "undecodable"}
    finally:
        r = run_loglake(config, "registry", "stop")
    assert r.returncode == 0 and "registry: stopped" in r.stdout
    assert not EmbeddedRegistry(config.home, port=port).is_running()
    r = run_loglake(config, "registry", "status")
    assert r.returncode == 1 and f"registry: {url} (not running)" in r.stdout, r.stdout + r.stderr


def test_registry_commands_of_a_profile_without_one_and_of_an_external_one(make_config, tmp_path):
    """No JVM: a profile with no registry has nothing to start and says so (status exit 0); one
    with an external registry starts nothing, and its status asks that URL (nobody there: 1)."""
    config = make_config()
    for action in ("start", "stop", "status"):
        r = run_loglake(config, "registry", action, timeout=60)
        assert r.returncode == 0 and "has no schema registry" in r.stdout, action + r.stdout + r.stderr
    assert not (config.home / "registry").exists()

    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"  # free: nothing answers there
    config = make_config(registry={"url": url, "embedded": False, "retry_seconds": 1})
    for action in ("start", "stop"):
        r = run_loglake(config, "registry", action, timeout=60)
        assert r.returncode == 0 and f"uses the external registry {url}; nothing to {action}" in r.stdout, (
            r.stdout + r.stderr)
    r = run_loglake(config, "registry", "status", timeout=60)
    assert r.returncode == 1 and r.stdout.strip() == f"registry: {url} (not answering)", r.stdout + r.stderr
    assert not (config.home / "registry").exists()
