"""loglake's test environment, as ``pyspark.testing`` is Spark's: what the test suite (tests/),
the benchmarks (bench/) and the soak scenarios (soak/) share.

- ``conf``: throwaway conf/ directories (``write_conf``) and configs (``make_config``); the JVM
  options of their Spark (``conf.JAVA_OPTIONS``, set there)
- ``lab``: ``Lab``, an embedded broker on free ports, a Spark session and fresh configs under
  one directory; ``start_broker``
- ``checks``: a stream caught up with the log, every offset a layer landed exactly once, a
  process crashed on purpose
- ``commands``: the ``loglake`` command on a config, as an operator types it; a writer lease
  held or taken by another process
- ``proxy``: a TCP proxy in front of a store, to cut one process off from it or hold one request
- ``workload``: sample data, the ``bench_events`` stream
- ``series``: the metrics' series written by several processes at once
- ``machine``: what figures were measured on
"""

from loglake.testing.checks import caught_up, count_exactly_once, landed, sigkill
from loglake.testing.commands import (
    command_env, config_environment, hold_writer_lease, loglake_command, run_loglake, take_writer_lease
)
from loglake.testing.conf import NO_BROKER, make_config, write_conf
from loglake.testing.lab import Lab, start_broker
from loglake.testing.machine import machine

__all__ = ["NO_BROKER", "Lab", "caught_up", "command_env", "config_environment", "count_exactly_once",
           "hold_writer_lease", "landed", "loglake_command", "machine", "make_config", "run_loglake", "sigkill",
           "start_broker", "take_writer_lease", "write_conf"]
