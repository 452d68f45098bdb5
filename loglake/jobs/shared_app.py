"""The shared Spark application (``spark_jobs/server.py``) from the outside: start, stop,
state, and running a job in it.

``loglake up`` starts it (``loglake.jobs.launch.start_shared_application``) beside the speed streams
(``spark.shared_application`` in the profile, on by default) as the supervised background process
``spark-jobs``; the Airflow operators and the CLI's jobs (``loglake.jobs.launch.run_job``) send
their batch, quality, maintenance, rebuild and replay jobs to it when it answers, and run them under
their own spark-submit when it does not (not started, stopped, or started for other settings or
code). A job sent while it is starting (its process runs, it does not answer yet: just started by
``loglake up``, or restarted by its supervisor) waits for it, up to
``LOGLAKE_SPARK_JOBS_START_WAIT`` seconds, then runs under spark-submit. The summary is the same
either way; the job's output lines come back to the caller (the task log, the CLI's job log). """

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Callable

from loglake.core.config import Config
from loglake.core.errors import ParamError
from loglake.core.paths import code_digest
from loglake.core.processes import Managed
from loglake.jobs import registry
from loglake.jobs.requests import JobRequest

NAME = "spark-jobs"
# The jobs it runs (the speed stream is an application of its own).
SERVED = registry.served()
# How long a job waits for the application while it starts before it runs under
# spark-submit instead. A spark-submit started then pays a JVM and a session of its own,
# longer than what is left of the application's start, and slows that start on a small
# machine; the bound keeps a task from waiting on one that never comes up.
START_WAIT_ENV = "LOGLAKE_SPARK_JOBS_START_WAIT"
START_WAIT_DEFAULT = 120.0


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


def start_wait() -> float:
    """Seconds a job waits for a starting application (``LOGLAKE_SPARK_JOBS_START_WAIT``, 0: never)."""
    raw = os.environ.get(START_WAIT_ENV)
    if raw is None:
        return START_WAIT_DEFAULT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ParamError(START_WAIT_ENV, f"must be a number of seconds >= 0, not {raw!r}")
    return seconds


def _connection(config: Config, connect_timeout: float, wait: float,
                output: Callable[[str], None] | None) -> tuple[dict, socket.socket, float] | None:
    """(address, connection, seconds waited for it to start), waiting up to ``wait`` seconds
    while it starts; None when it does not run, or did not answer in time."""
    t0 = time.monotonic()
    deadline = t0 + wait
    said = False
    while process(config).pid():
        address = _address(config)
        conn = _connect(address, connect_timeout) if address else None
        if conn is not None:
            return address, conn, (time.monotonic() - t0 if said else 0.0)
        # Its process runs but it does not listen yet: starting (its address is written
        # once its Spark session is up), or restarting after its driver died.
        left = deadline - time.monotonic()
        if left <= 0:
            if said and output:
                output(f"loglake: the shared Spark application did not answer within {wait:g}s "
                       f"({START_WAIT_ENV}); running the job under spark-submit\n")
            return None
        if not said and output:
            output(f"loglake: the shared Spark application is starting; waiting for it (up to {wait:g}s, "
                   f"{START_WAIT_ENV}) rather than starting a JVM of its own\n")
            said = True
        time.sleep(min(0.5, left))
    return None


def submit(config: Config, request: JobRequest, output: Callable[[str], None] | None = None,
           lease: str | None = None, connect_timeout: float = 2.0,
           wait: float | None = None) -> tuple[int, dict | None] | None:
    """Run ``request`` in the shared application: (exit code, summary) as a spark-submitted
    job would give them; None when it is not running, did not answer within ``wait``
    seconds of starting (``start_wait()`` by default), or refuses the request (then run it
    under spark-submit). ``output`` gets the job's output as it comes; ``lease`` is the
    dataset lease token the caller holds (the job writes under it). The summary of a job
    that waited for the application to start says how long (``start_wait_seconds``)."""
    found = _connection(config, connect_timeout, start_wait() if wait is None else wait, output)
    if found is None:
        return None
    address, conn, waited = found
    with conn:
        conn.settimeout(None)
        body = {"token": address.get("token"), "request": request.to_dict(), "lease": lease,
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
                    summary = msg["summary"]
                    if isinstance(summary, dict) and waited and "error" not in summary:
                        summary = {**summary, "start_wait_seconds": round(waited, 3)}
                    return int(msg.get("code", 1)), summary
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
