"""The speed stream's supervisor restarts a crash but not a permanent error (issue 11, item 6)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A job in the shape of a loglake job: reports how it ended in --summary-file, exits 2 on error.
JOB = textwrap.dedent('''
    import sys
    from pathlib import Path
    from loglake.errors import ConfigError, KafkaUnavailableError
    from loglake.jobs import failure, report
    runs, plan, summary = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[4]
    n = len(runs.read_text().splitlines()) if runs.exists() else 0
    runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
    outcome = plan[min(n, len(plan) - 1)]
    if outcome == "ok":
        report({"records": 1}, summary)
        sys.exit(0)
    error = ConfigError("pattern broken", key="k") if outcome == "permanent" else KafkaUnavailableError("gone")
    report(failure(error), summary)
    sys.exit(2)
''')


def supervise(tmp_path, plan: str) -> tuple[subprocess.CompletedProcess, int]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "loglake.processes", sys.executable, str(job), str(runs), plan,
                        "--summary-file", str(tmp_path / "summary")], capture_output=True, text=True, timeout=60)
    return r, len(runs.read_text().splitlines())


def test_a_permanent_error_is_not_restarted(tmp_path):
    r, runs = supervise(tmp_path, "permanent")
    assert r.returncode == 2 and runs == 1
    assert "stopped by a permanent error, not restarting: ConfigError: k: pattern broken" in r.stdout


def test_a_transient_error_is_restarted(tmp_path):
    r, runs = supervise(tmp_path, "transient,ok")
    assert r.returncode == 0 and runs == 2
    assert "restarting in 1s" in r.stdout
