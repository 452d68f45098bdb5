"""The speed stream's supervisor restarts a crash but not a permanent error (issue 11, item 6)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import time

from loglake.jobs.requests import SpeedRequest

# A job in the shape of a loglake job: reports how it ended in its request's summary_file, exits 2
# on error.
JOB = textwrap.dedent('''
    import json
    import sys
    from pathlib import Path
    from loglake.core.errors import ConfigError, JobFailure, KafkaUnavailableError
    from loglake.jobs.protocol import report
    from loglake.jobs.summaries import SpeedSummary
    runs, plan, request = Path(sys.argv[1]), sys.argv[2].split(","), json.loads(sys.argv[4])
    summary, progress = request["summary_file"], Path(request["progress_file"])
    n = len(runs.read_text().splitlines()) if runs.exists() else 0
    runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
    outcome = plan[min(n, len(plan) - 1)]
    if outcome == "ok":
        report(SpeedSummary(dataset="job_views", records=1), summary)
        sys.exit(0)
    if outcome == "progress":  # ran healthy (committed a micro-batch), then crashed
        progress.write_text("{}")
    error = ConfigError("pattern broken", key="k") if outcome == "permanent" else KafkaUnavailableError("gone")
    report(JobFailure.of(error), summary)
    sys.exit(2)
''')


def command(tmp_path, plan: str) -> list[str]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    request = SpeedRequest("job_views", progress_file=str(tmp_path / "progress"), summary_file=str(tmp_path / "summary"))
    return [sys.executable, "-m", "loglake.jobs.supervisor", sys.executable, str(job), str(tmp_path / "runs"), plan,
            *request.argv()]


def supervise(tmp_path, plan: str) -> tuple[subprocess.CompletedProcess, int]:
    r = subprocess.run(command(tmp_path, plan), capture_output=True, text=True, timeout=60)
    return r, len((tmp_path / "runs").read_text().splitlines())


def test_a_permanent_error_is_not_restarted(tmp_path):
    r, runs = supervise(tmp_path, "permanent")
    assert r.returncode == 2 and runs == 1
    assert "stopped by a permanent error, not restarting: ConfigError: k: pattern broken" in r.stdout


def test_a_transient_error_is_restarted(tmp_path):
    r, runs = supervise(tmp_path, "transient,ok")
    assert r.returncode == 0 and runs == 2
    assert "restarting in 1s" in r.stdout


def test_a_crash_after_progress_restarts_at_the_first_backoff_again(tmp_path):
    # A stream that recovered and committed again is healthy: its next crash is a new
    # incident, not the next step of a crash loop (R1 found the backoff climbing to 60 s
    # when kills came less than a minute apart).
    r, runs = supervise(tmp_path, "progress,progress,progress,progress,progress,ok")
    assert r.returncode == 0 and runs == 6
    waits = re.findall(r"restarting in (\d+)s", r.stdout)
    assert waits == ["1"] * 5, r.stdout


def test_a_crash_loop_backs_off_and_sigterm_ends_the_wait_at_once(tmp_path):
    proc = subprocess.Popen(command(tmp_path, "transient"), stdout=subprocess.PIPE, text=True)
    runs = tmp_path / "runs"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (runs.exists() and len(runs.read_text().splitlines()) >= 4):
        time.sleep(0.05)
    time.sleep(0.5)  # the 4th crash reported: the supervisor now waits 8 s
    proc.send_signal(signal.SIGTERM)
    t = time.monotonic()
    out, _ = proc.communicate(timeout=30)
    assert time.monotonic() - t < 3, out
    assert re.findall(r"restarting in (\d+)s", out) == ["1", "2", "4", "8"], out
