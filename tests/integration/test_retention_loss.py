"""Retention loss (issue 11, item 3): loud, local to its dataset, and recoverable only by
an operator's explicit record — after which every layer continues from the earliest
retained offset and the audit passes, reporting the loss."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from loglake.audit import audit_dataset, format_audit
from loglake.errors import DataLossError, ParamError
from loglake.kafka_admin import admin, log_bounds
from loglake.ledger import batch_watermarks
from loglake.losses import accept_loss, find_losses
from loglake.planning import plan_batch
from loglake.produce import produce
from loglake.status import dataset_status, format_status
from spark_jobs.pipeline import recompute_and_publish
from spark_jobs.speed import run_speed
from tests.integration.test_cli import loglake

pytestmark = pytest.mark.integration


def delete_oldest(config, topic: str, fraction: float) -> dict[int, int]:
    """DeleteRecords below ``fraction`` of each partition, as retention would; the new earliest offsets."""
    bounds = log_bounds(config, topic)
    cut = [TopicPartition(topic, p, int(hi * fraction)) for p, (_lo, hi) in bounds.items() if hi]
    client = admin(config)  # keep a reference: a collected client cancels its futures
    for fut in client.delete_records(cut).values():
        fut.result(timeout=30)
    return {p: lo for p, (lo, _hi) in log_bounds(config, topic).items()}


def test_retention_loss_stops_only_its_dataset_until_accepted(spark, make_config, monkeypatch, tmp_path):
    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 300, seed=61)
    run_speed(spark, config, ds, available_now=True)
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "before")
    produce(config, ds, 600, seed=62)  # neither layer reads these before Kafka deletes most
    earliest = delete_oldest(config, ds.topic, 0.9)
    marks = batch_watermarks(config, ds)

    # Loud, naming topic, partition and offsets, on both sides; no stack trace.
    with pytest.raises(DataLossError) as e:
        plan_batch(config, ds)
    p = e.value.partition
    assert (e.value.topic, e.value.missing_start, e.value.missing_end) == (ds.topic, marks[p], earliest[p])
    assert "loglake accept-loss" in str(e.value)
    r = loglake(config, "speed", "run", "job_views", "--available-now")
    assert r.returncode == 2 and "DataLossError" in r.stderr and "accept-loss" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "at org.apache" not in r.stderr

    # Only this dataset stops: the batch DAG's plan plans the others and names this one.
    from loglake import paths
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "plugins"))  # as Airflow's plugins folder
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    from loglake_airflow.plans import batch_args
    monkeypatch.setenv("LOGLAKE_CONF", str(config.conf_dir))
    monkeypatch.setenv("LOGLAKE_HOME", str(config.home))
    ceos = config.dataset("company_ceos")
    produce(config, ceos, 50, seed=63)
    planned = batch_args("test/run")
    assert [a[a.index("--dataset") + 1] for a in planned["args"]] == ["company_ceos"]
    assert len(planned["losses"]) == 1 and planned["losses"][0].startswith(f"job_views: data loss: {ds.topic}[")

    # Nothing is skipped without a record: a backfill from the earliest offset does not move W.
    with pytest.raises(ParamError):
        accept_loss(config, ds, "  ")
    losses = find_losses(config, ds)
    assert {(x.partition, x.start, x.end) for x in losses} == {
        (q, marks[q], earliest[q]) for q in earliest if marks.get(q, 0) < earliest[q]}
    assert all(x.needed_by == ("batch", "speed") for x in losses)
    accepted = accept_loss(config, ds, "weekend outage, retention ran", partition=p)
    assert [(x.partition, x.start, x.end) for x in accepted] == [(p, marks[p], earliest[p])]
    r = loglake(config, "accept-loss", "job_views", "--reason", "weekend outage, retention ran")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("accepted as lost:") == len(losses) - 1
    assert find_losses(config, ds) == []

    # Every layer continues from the earliest retained offset.
    assert {r.partition: r.start for r in plan_batch(config, ds).ranges} == {
        q: earliest[q] for q in earliest if earliest[q] < log_bounds(config, ds.topic)[q][1]}
    recompute_and_publish(spark, config, ds, plan_batch(config, ds), "after")
    run_speed(spark, config, ds, available_now=True)
    result = audit_dataset(config, ds)
    assert result["ok"], format_audit(result)
    assert {(x["partition"], x["start"], x["end"]) for x in result["lost"]} == {
        (x.partition, x.start, x.end) for x in losses}
    assert "acknowledged loss" in "\n".join(format_audit(result))
    lines = "\n".join(format_status(ds, dataset_status(config, ds)))
    assert f"accepted loss: [{p}] offsets [{marks[p]}, {earliest[p]})" in lines and "weekend outage" in lines
