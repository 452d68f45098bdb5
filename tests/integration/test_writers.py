"""One writer per dataset through loglake's own commands (issue 11, item 5)."""

from __future__ import annotations

import os

import pytest

from loglake.local.produce import produce
from loglake.testing import hold_writer_lease, run_loglake

pytestmark = pytest.mark.integration


def test_maintenance_waits_for_the_holder_names_it_and_runs_once_it_is_gone(spark, make_config):
    from loglake.speed.stream import run_speed

    config = make_config()
    ds = config.dataset("job_views")
    produce(config, ds, 100, seed=5)
    run_speed(spark, config, ds, available_now=True)  # tables to maintain (the command is tested elsewhere)
    holder, _token = hold_writer_lease(config, "job_views", 600)
    try:
        os.environ["LOGLAKE_WRITER_WAIT_SECONDS"] = "3"
        r = run_loglake(config, "maintain", "job_views")
        assert r.returncode != 0
        assert f"dataset job_views is being written by maintenance run run-7 (pid {holder.pid} on" in r.stderr
        assert "Traceback" not in r.stderr + r.stdout
        status = run_loglake(config, "speed", "status", "job_views")
        assert f"writer: maintenance run run-7 (pid {holder.pid} on" in status.stdout
    finally:
        os.environ.pop("LOGLAKE_WRITER_WAIT_SECONDS", None)
        holder.kill()
        holder.wait()
    # The holder crashed (killed): its lease never blocks the next writer.
    r = run_loglake(config, "maintain", "job_views")
    assert r.returncode == 0, r.stderr
    assert "writer: none (free)" in run_loglake(config, "speed", "status", "job_views").stdout
