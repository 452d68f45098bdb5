"""The speed application (``spark_jobs/speed_app.py``): every dataset's background stream in one
Spark application, each dataset started, stopped and failing on its own, a crash of the whole
resumed by its supervisor, every offset landed once."""

from __future__ import annotations

import pytest

from loglake.core.processes import wait_for
from loglake.kafka.admin import end_offsets
from loglake.local import stack
from loglake.local.produce import produce
from loglake.speed.control import SpeedStream, application, streams
from loglake.testing.checks import caught_up, count_exactly_once, sigkill, spark_drivers
from tests.integration.test_schema_evolution import evolved

pytestmark = pytest.mark.integration


def test_one_application_streams_every_dataset_each_stopped_and_failing_on_its_own(make_config):
    config = make_config(topic_suffix="app", datasets=evolved())
    jv, ceos = config.dataset("job_views"), config.dataset("company_ceos")
    jv_stream, ceos_stream = SpeedStream(config, jv), SpeedStream(config, ceos)
    app = application(config)
    produce(config, jv, 300, seed=1, bad_fraction=0.1)
    produce(config, ceos, 100, seed=2)

    def wait_caught_up(ds, stream):
        ends = end_offsets(config, ds.topic)
        wait_for(lambda: caught_up(config, ds, ends), 180, f"speed {ds.name} to reach the log end", log=stream.process)

    stack.start_streams(config, wait=180)
    try:
        pid = app.pid()
        # Both streams in one application: one driver JVM.
        assert pid and {s.pid() for s in streams(config)} == {pid}
        assert len(spark_drivers(pid)) == 1, spark_drivers(pid)
        wait_caught_up(jv, jv_stream)
        wait_caught_up(ceos, ceos_stream)

        # One dataset stopped: the other streams on in the same application.
        assert jv_stream.stop() and jv_stream.pid() is None and jv_stream.state() == "stopped"
        assert app.pid() == pid and ceos_stream.pid() == pid
        held = end_offsets(config, jv.topic)
        produce(config, jv, 100, seed=3)
        produce(config, ceos, 50, seed=4)
        wait_caught_up(ceos, ceos_stream)
        assert not caught_up(config, jv, end_offsets(config, jv.topic)) and caught_up(config, jv, held)

        # Started again, it resumes in the same application.
        assert jv_stream.start() == (pid, True)
        wait_caught_up(jv, jv_stream)

        # A permanent error (a breaking schema change) stops only that dataset, until it is started again.
        make_config(topic_suffix="app", datasets=evolved(duration_ms={"type": "string"}))
        jv_stream.stop()
        jv_stream.start()
        wait_for(lambda: jv_stream.failure() is not None, 60, "job_views to stop on the schema change",
                 log=app)
        assert jv_stream.pid() is None and jv_stream.state().startswith(
            "stopped by a permanent error (not restarted): SchemaChangeError: "), jv_stream.state()
        produce(config, ceos, 50, seed=5)
        wait_caught_up(ceos, ceos_stream)
        assert app.pid() == pid and ceos_stream.pid() == pid
        make_config(topic_suffix="app", datasets=evolved())
        assert jv_stream.start()[1] and jv_stream.failure() is None

        # The application's JVM killed: its supervisor starts it again, and both streams resume.
        produce(config, jv, 200, seed=6, bad_fraction=0.1)
        assert sigkill(spark_drivers(pid)) == 1
        produce(config, ceos, 50, seed=7)
        wait_caught_up(jv, jv_stream)
        wait_caught_up(ceos, ceos_stream)
        assert app.pid() == pid and len(spark_drivers(pid)) == 1
    finally:
        stack.stop_streams(config)
    assert app.pid() is None and not any(s.pid() for s in streams(config))
    for ds in (jv, ceos):
        assert count_exactly_once(config, ds, end_offsets(config, ds.topic)) == (0, 0)
