"""What an Airflow component that died leaves running is found by its session and stopped
(issue 11, R7): a SIGKILLed scheduler leaves its LocalExecutor workers and its log server
behind, reparented to init. A stand-in scheduler (plain Python processes titled like
Airflow's) shows the rule without starting Airflow: at start, idle leftovers are stopped
and a worker still running a task is kept with its task; at stop, everything goes."""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

from loglake.local.airflow_standalone import EmbeddedAirflow
from loglake.core.config import load_config
from loglake.core.processes import alive, free_port, orphaned_sessions, wait_for
from loglake.testing import write_conf

SLEEP = "import time; time.sleep(600)"
# Like Airflow's: an idle worker that ignores SIGTERM, a worker running a task process, the log server.
SCHEDULER = f'''
import subprocess, sys, time
def spawn(code, title):
    return subprocess.Popen([sys.executable, "-c", code, title]).pid
idle = spawn("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
             "airflow worker -- LocalExecutor: <idle>")
busy = spawn("import subprocess, sys, time; "
             "subprocess.Popen([sys.executable, '-c', {SLEEP!r}, 'airflow worker -- task']); time.sleep(600)",
             "airflow worker -- LocalExecutor: loglake_backfill dataset.recompute")
logs = spawn({SLEEP!r}, "airflow serve-logs")
open(sys.argv[1] + ".tmp", "w").write(f"{{idle}} {{busy}} {{logs}}")
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
'''


def _created(pid: int) -> float:
    return psutil.Process(pid).create_time()


def test_a_dead_schedulers_leftovers_are_stopped_except_a_running_task_until_stop(tmp_path):
    config = load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")
    af = EmbeddedAirflow(config, free_port())
    scheduler = af.processes["scheduler"]
    pids_file = tmp_path / "pids"
    sid = scheduler.start([sys.executable, "-c", SCHEDULER, str(pids_file)])
    everything: dict[int, float] = {}
    try:
        wait_for(pids_file.exists, 30, "the stand-in scheduler's workers")
        idle, busy, logs = map(int, pids_file.read_text().split())
        wait_for(lambda: len(alive({p: _created(p) for p in (idle, busy, logs)})) == 3, 10, "the workers")
        wait_for(lambda: len(psutil.Process(busy).children()) == 1, 10, "the worker's task process")
        task = psutil.Process(busy).children()[0].pid
        everything = {p: _created(p) for p in (idle, busy, logs, task)}
        af._save(set())  # what start() records: the session each component leads
        assert orphaned_sessions([sid]) == {}, "a live leader's session is not a leftover"

        os.kill(sid, signal.SIGKILL)  # the crash
        wait_for(lambda: scheduler.pid() is None, 10, "the stand-in scheduler to die")
        assert set(orphaned_sessions([sid]).get(sid, {})) == set(everything)

        t0 = time.monotonic()
        kept = af.clean_up_after_dead()  # what start() does first
        assert kept == {sid}
        assert set(alive(everything)) == {busy, task}, "the idle worker and the log server are stopped"
        assert time.monotonic() - t0 < 10

        af.stop()
        assert alive(everything) == {}, "stop leaves nothing of a dead component running"
        assert orphaned_sessions([sid]) == {}
    finally:
        for pid in alive(everything):
            os.kill(pid, signal.SIGKILL)
        if scheduler.pid():
            scheduler.kill()
