"""The shared Spark application (``spark_jobs/server.py``) from the outside: start, stop,
state, and running a job in it.

``loglake up`` starts it (``loglake.launch.start_shared_application``) beside the speed streams (``spark.shared_application`` in the
profile, on by default) as the supervised background process ``spark-jobs``; the Airflow
operators and the CLI's jobs (``loglake.launch.run_job``) send their batch, quality,
maintenance, rebuild and replay jobs to it when it answers, and run them under their own
spark-submit when it does not (not started, stopped, or started for other settings or
code). The summary is the same either way; the job's output lines come back to the
caller (the task log, the CLI's job log).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Callable

from loglake.config import Config
from loglake.jobs import JobRequest
from loglake.processes import Managed

NAME = "spark-jobs"
# The jobs it runs (the speed stream is an application of its own).
SERVED = ("batch", "quality", "maintenance", "rebuild", "replay")


def process(config: Config) -> Managed:
    return Managed(config.home, NAME)


def address_file(config: Config) -> Path:
    return config.home / "run" / "spark-jobs.json"


def _address(config: Config) -> dict | None:
    try:
        return json.loads(address_file(config).read_text())
    except (OSError, ValueError):
        return None


def _connect(address: dict, timeout: float) -> socket.socket | None:
    try:
        return socket.create_connection((address["host"], int(address["port"])), timeout=timeout)
    except (OSError, KeyError, ValueError):
        return None


def identity(config: Config) -> dict:
    """What a request must match to run in the application: its state and conf directories,
    profile and code."""
    from loglake.paths import code_digest

    return {"home": str(config.home), "conf": str(config.conf_dir), "profile": config.profile_name,
            "code": code_digest()}


def ping(config: Config, timeout: float = 2.0, address: dict | None = None) -> dict | None:
    """The running application's answer (pid, running jobs, how many served), or None.
    ``address``: the address file's content, when the caller read it already."""
    address = address or _address(config)
    conn = _connect(address, timeout) if address else None
    if conn is None:
        return None
    with conn:
        try:
            conn.sendall((json.dumps({"token": address.get("token"), "ping": True}) + "\n").encode())
            answer = json.loads(conn.makefile("r", encoding="utf-8").readline() or "null")
        except (OSError, ValueError):
            return None
    return answer if isinstance(answer, dict) and answer.get("pong") else None


def stop(config: Config) -> bool:
    """Stop it (running jobs are cancelled: their callers see a transient failure)."""
    stopped = process(config).stop()
    address_file(config).unlink(missing_ok=True)
    return stopped


def submit(config: Config, request: JobRequest, output: Callable[[str], None] | None = None,
           lease: str | None = None, connect_timeout: float = 2.0) -> tuple[int, dict | None] | None:
    """Run ``request`` in the shared application: (exit code, summary) as a spark-submitted
    job would give them; None when it is not running or refuses the request (then run it
    under spark-submit). ``output`` gets the job's output as it comes; ``lease`` is the
    dataset lease token the caller holds (the job writes under it)."""
    address = _address(config)
    if address is None or not process(config).pid():
        return None
    conn = _connect(address, connect_timeout)
    if conn is None:
        return None
    with conn:
        conn.settimeout(None)
        body = {"token": address.get("token"), "job": request.job, "argv": request.argv(), "lease": lease,
                **identity(config)}
        try:
            conn.sendall((json.dumps(body) + "\n").encode())
            reader = conn.makefile("r", encoding="utf-8")
            for raw in reader:
                msg = json.loads(raw)
                if "refused" in msg:
                    if output:
                        output(f"loglake: the shared Spark application refused the job ({msg['refused']}); "
                               f"running it under spark-submit\n")
                    return None
                if "line" in msg:
                    if output:
                        output(msg["line"])
                    continue
                if "summary" in msg:
                    return int(msg.get("code", 1)), msg["summary"]
        except (OSError, ValueError):
            pass
    gone = {"error": "the shared Spark application went away during the job (stopped or crashed); "
                     "another attempt runs it again", "error_type": "SharedApplicationLost", "transient": True}
    return 1, gone


def state(config: Config) -> str:
    """``running (pid N), answering at HOST:PORT; J job(s) running, S served`` or ``stopped``."""
    pid = process(config).pid()
    if not pid:
        return "stopped"
    address = _address(config) or {}
    answer = ping(config, address=address) if address else None
    if answer is None:
        return f"running (pid {pid}), starting (not answering yet)"
    return (f"running (pid {pid}), answering at {address.get('host')}:{address.get('port')}; "
            f"{len(answer.get('running') or {})} job(s) running, {answer.get('served', 0)} served")


def wait_idle(config: Config, timeout: float = 60.0) -> None:
    """Until no job runs in it (tests, benchmarks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = ping(config)
        if answer is None or not answer.get("running"):
            return
        time.sleep(0.5)
