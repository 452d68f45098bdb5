"""How long a job waits for a starting shared Spark application (``loglake.jobs.shared_app``): no
JVM, no broker; the "application" is a process that runs and never answers."""

from __future__ import annotations

import sys
import time

import pytest

from loglake.jobs import shared_app
from loglake.core.config import load_config
from loglake.core.errors import ParamError
from loglake.jobs.requests import MaintenanceRequest
from loglake.testing import write_conf


def test_the_start_wait_is_read_from_the_environment_and_checked(monkeypatch):
    monkeypatch.delenv(shared_app.START_WAIT_ENV, raising=False)
    assert shared_app.start_wait() == shared_app.START_WAIT_DEFAULT
    monkeypatch.setenv(shared_app.START_WAIT_ENV, "0")
    assert shared_app.start_wait() == 0
    for bad in ("soon", "-5"):
        monkeypatch.setenv(shared_app.START_WAIT_ENV, bad)
        with pytest.raises(ParamError, match=f"{shared_app.START_WAIT_ENV}: must be a number of seconds >= 0"):
            shared_app.start_wait()


def test_a_job_waits_for_an_application_that_never_answers_only_up_to_the_bound(tmp_path):
    config = load_config(write_conf(tmp_path, "localhost:1"), home=tmp_path / "state")
    request = MaintenanceRequest("job_views", run_id="wait")
    # Not started: spark-submit at once, nothing said.
    lines: list[str] = []
    assert shared_app.submit(config, request, output=lines.append, wait=30) is None and lines == []

    # Its process runs, it never writes its address: a start that never ends.
    managed = shared_app.process(config)
    managed.start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.monotonic()
        assert shared_app.submit(config, request, output=lines.append, wait=1.5) is None
        waited = time.monotonic() - t0
        assert 1.5 <= waited < 10, waited
        assert [line.split(";")[0] for line in lines] == [
            "loglake: the shared Spark application is starting",
            "loglake: the shared Spark application did not answer within 1.5s (LOGLAKE_SPARK_JOBS_START_WAIT)"], lines
        lines.clear()
        assert shared_app.submit(config, request, output=lines.append, wait=0) is None and lines == []
    finally:
        managed.stop()
