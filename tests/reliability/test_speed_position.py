"""The speed driver records its position in Kafka after every micro-batch while the broker
goes away and comes back: a broker fault may delay that record, never end the driver.

The child below drives the speed job's own listener (``_PositionRecorder.onQueryProgress``,
what Spark calls after each committed micro-batch) ten times a second with a growing
position, in a process of its own as in the real driver, while the test SIGKILLs and stops
the broker under it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from loglake.core.processes import wait_for
from loglake.kafka.admin import ensure_topic, group_offsets
from loglake.testing import Lab

pytestmark = pytest.mark.reliability

CHILD = r"""
import json, sys, time
from types import SimpleNamespace
from loglake.core.config import load_config
from loglake.speed.sizing import Sizing
from loglake.kafka.admin import PositionCommitter
from loglake.speed.stream import _PositionRecorder

config = load_config(sys.argv[1], home=sys.argv[2])
ds = config.dataset("job_views")
recorder = _PositionRecorder(PositionCommitter(config, ds.consumer_group, ds.topic), None, Sizing(100))
n = 0
while True:
    n += 1
    ends = {ds.topic: {str(p): n for p in range(ds.partitions)}}
    progress = {"id": None, "sources": [{"endOffset": json.dumps(ends)}]}
    recorder.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress))))
    print(n, flush=True)
    time.sleep(0.1)
"""


@pytest.mark.long
def test_position_records_survive_broker_kills_and_stops(tmp_path, kafka_bootstrap):
    lab = Lab(tmp_path, kafka_bootstrap)
    kafka = lab.own_broker()
    kafka.start()
    config = lab.config(bootstrap=kafka.bootstrap)
    ds = config.dataset("job_views")
    ensure_topic(config, ds)
    out = tmp_path / "child.out"
    with open(out, "w") as stdout, open(tmp_path / "child.err", "w") as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(config.conf_dir), str(config.home)],
                                 stdout=stdout, stderr=stderr)
    try:
        for fault in ("kill", "stop", "kill"):
            time.sleep(3)
            kafka.kill() if fault == "kill" else kafka.stop()
            time.sleep(6)
            kafka.start(timeout=120)
            assert child.poll() is None, (f"the driver died ({child.returncode}) after a broker {fault}:\n"
                                          + (tmp_path / "child.err").read_text()[-2000:])
        # Positions submitted after the broker's last return reach Kafka.
        submitted = int(out.read_text().split()[-1])
        wait_for(lambda: all((o or 0) >= submitted
                             for o in group_offsets(config, ds.consumer_group, ds.topic, ds.partitions).values()),
                 60, f"position {submitted} to be recorded")
        assert child.poll() is None, (tmp_path / "child.err").read_text()[-2000:]
    finally:
        child.kill()
        child.wait()
        kafka.stop()


def _librdkafka_clients() -> int:
    """librdkafka clients alive in this process (each has one thread named rdk:main)."""
    return sum(1 for t in Path("/proc/self/task").iterdir() if (t / "comm").read_text().strip() == "rdk:main")


def test_a_closed_position_committer_leaves_no_client_behind(tmp_path, kafka_bootstrap):
    """Every speed run has a committer; a run that ends must not leave its Kafka client
    (and its threads, reconnecting to a broker that may be gone) in the process."""
    from loglake.kafka.admin import PositionCommitter

    config = Lab(tmp_path, kafka_bootstrap).config()
    ds = config.dataset("job_views")
    ensure_topic(config, ds)
    before = _librdkafka_clients()
    for n in (1, 2, 3):
        committer = PositionCommitter(config, ds.consumer_group, ds.topic)
        committer.submit({p: n for p in range(ds.partitions)})
        assert committer.close()
        assert group_offsets(config, ds.consumer_group, ds.topic, ds.partitions) == {p: n for p in range(ds.partitions)}
    wait_for(lambda: _librdkafka_clients() <= before, 10, "the committers' clients to be closed")
