"""``loglake replay``: quarantined records that a loosened rule now accepts move into their
layer exactly once (issue 12)."""

from __future__ import annotations

import re

import pytest

from loglake.ops.audit import audit_dataset
from loglake.ledger.history import table_history
from loglake.batch.planning import plan_batch
from loglake.local.produce import produce
from loglake.lifecycle.replay import replay_lines
from loglake.tables import open_table
from loglake.batch.recompute import recompute_from_log
from loglake.quality.pipeline import recompute_and_publish
from loglake.lifecycle.replay_job import replay, revalidated
from loglake.serving.spark import query, serving_view
from loglake.speed.stream import run_speed
from loglake.testing import run_loglake
from tests.integration.test_cli import noise
from tests.integration.test_schema_evolution import JOB_VIEWS_FIELDS, evolved

pytestmark = pytest.mark.integration

# The loosened rules: a new enum value (the producer's out-of-domain "carrier_pigeon") and a
# field that becomes optional.
LOOSENED = evolved(source={"type": "string", "enum": [*JOB_VIEWS_FIELDS["source"]["enum"], "carrier_pigeon"]},
                   duration_ms={**JOB_VIEWS_FIELDS["duration_ms"], "required": False})


def versions(config, ds) -> dict[str, int]:
    return {layer: open_table(config.table_path(ds, layer)).version() for layer in ("speed", "batch", "quarantine")}


def quarantined(spark, config, layer: str) -> set[tuple[int, int]]:
    return {(r[0], r[1]) for r in query(spark, config, "SELECT _partition, _offset FROM quarantine.job_views "
                                                       f"WHERE _layer = '{layer}'").collect()}


def reasons(spark, config, layer: str, offsets: set[tuple[int, int]]) -> str:
    """How many of ``offsets`` the layer's quarantine holds per reason, as replay says it."""
    rows = query(spark, config, f"SELECT _partition, _offset, reason_code FROM quarantine.job_views "
                                f"WHERE _layer = '{layer}'").collect()
    counts: dict[str, int] = {}
    for p, o, code in rows:
        if (p, o) in offsets:
            counts[code] = counts.get(code, 0) + 1
    return ", ".join(f"{code} {n}" for code, n in sorted(counts.items())) or "none"


def test_replay_moves_what_a_loosened_rule_accepts_once_in_both_layers(spark, make_config):
    config = make_config(topic_suffix="replay", datasets=evolved())
    ds = config.dataset("job_views")
    produce(config, ds, 600, bad_fraction=0.4, seed=5)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "v1")
    produce(config, ds, 300, bad_fraction=0.4, seed=6)  # above the watermark: the speed side's
    run_speed(spark, config, ds, available_now=True)
    before = {layer: quarantined(spark, config, layer) for layer in ("speed", "batch")}

    config = make_config(topic_suffix="replay", datasets=LOOSENED)
    ds = config.dataset("job_views")
    # What the loosened rules accept now, by the test's own reading of the quarantine.
    accepted = {layer: {(r[0], r[1]) for r in revalidated(spark, config, ds, layer, None)
                        .where("_reason IS NULL").select("_partition", "_offset").collect()} for layer in before}
    assert accepted["speed"] and accepted["batch"]
    assert accepted["batch"] <= before["batch"] and accepted["speed"] <= before["speed"]

    # A dry run counts and writes nothing.
    untouched = versions(config, ds)
    dry = replay(spark, config, ds, "dry", dry_run=True)
    assert versions(config, ds) == untouched
    assert sum(dry.speed["valid"].values()) == len(accepted["speed"])
    assert sum(dry.batch["valid"].values()) == len(accepted["batch"])
    assert set(dry.speed["valid"]) <= {"out_of_domain", "missing_field"}
    lines = replay_lines(dry)
    assert lines[0].startswith(f"replay job_views speed: would move {len(accepted['speed'])} (")
    assert "stay quarantined" in lines[0] and "would recompute" in lines[2]

    # The replay itself as an operator types it: the command, its replay job under spark-submit.
    said = []
    for layer in ("speed", "batch"):
        stay = before[layer] - accepted[layer]
        said.append(f"replay job_views {layer}: moved {len(accepted[layer])} "
                    f"({reasons(spark, config, layer, accepted[layer])}); {len(stay)} stay quarantined "
                    f"({reasons(spark, config, layer, stay)})")
    r = run_loglake(config, "replay", "job_views", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not noise(r.stdout + r.stderr), r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == said, r.stdout
    published = re.fullmatch(r"replay job_views batch: recomputed .*; the quality gate published it \(run (\S+)\)",
                             lines[2])
    assert published, r.stdout
    run_id = published[1]
    # Out of the quarantine, into the tables; what stays is still invalid.
    for layer in ("speed", "batch"):
        assert quarantined(spark, config, layer) == before[layer] - accepted[layer]
        assert revalidated(spark, config, ds, layer, None).where("_reason IS NULL").count() == 0
    speed = {(r[0], r[1]) for r in query(spark, config, "SELECT _partition, _offset FROM speed.job_views").collect()}
    assert accepted["speed"] <= speed

    # The serving view equals a full recompute of the log under the loosened rules, row for row.
    cols = ["_partition", "_offset", "view_id", "source", "duration_ms", "duration_s"]
    served = sorted(tuple(r) for r in serving_view(spark, config, ds).select(*cols).collect())
    truth = sorted(tuple(r) for r in recompute_from_log(spark, config, ds).select(*cols).collect())
    assert served == truth and len(truth) > 540
    assert audit_dataset(config, ds, record=False).ok
    assert any(f"replay {run_id}" in e["meaning"] for e in table_history(config, "speed.job_views", 5))

    # Twice is once: nothing moves and no table changes.
    settled = versions(config, ds)
    again = replay(spark, config, ds, "replay-2")
    assert not any(again.speed["valid"].values()) and not any(again.batch["valid"].values())
    assert versions(config, ds) == settled
    assert replay_lines(again)[0].startswith("replay job_views speed: moved 0 (none)")


def test_a_replayed_change_sets_the_latest_state_the_serving_view_has(spark, make_config):
    ceos = {"company_id": {"type": "string", "pattern": "^c[0-9]+$"}, "company": {"type": "string"},
            "ceo": {"type": "string"}, "since": {"type": "timestamp"}}
    config = make_config(topic_suffix="replay-cl", datasets={"company_ceos": {"schema": ceos}})
    ds = config.dataset("company_ceos")
    produce(config, ds, 300, bad_fraction=0.4, seed=7)
    run_speed(spark, config, ds, available_now=True)

    optional = {**ceos, "company": {"type": "string", "required": False}, "ceo": {"type": "string", "required": False}}
    config = make_config(topic_suffix="replay-cl", datasets={"company_ceos": {"schema": optional}})
    ds = config.dataset("company_ceos")
    summary = replay(spark, config, ds, "replay-cl", reason_code="missing_field")
    assert summary.speed["valid"].get("missing_field"), summary
    assert set(summary.speed["valid"]) | set(summary.speed["invalid"]) == {"missing_field"}

    latest = sorted(tuple(r) for r in query(spark, config, "SELECT company_id, company, ceo FROM "
                                                           "speed.company_ceos_latest").collect())
    view = sorted(tuple(r) for r in serving_view(spark, config, ds).select("company_id", "company", "ceo").collect())
    truth = sorted(tuple(r) for r in recompute_from_log(spark, config, ds).select("company_id", "company", "ceo")
                   .collect())
    assert latest == view == truth
    assert audit_dataset(config, ds, record=False).ok
