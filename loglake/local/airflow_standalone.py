"""Airflow 3 embedded on one machine: four processes sharing one state directory.

Everything lives under the loglake state directory ``<home>``::

    <home>/airflow/                 AIRFLOW_HOME: airflow.cfg (its generated secrets), airflow.db, task logs
    <home>/airflow/passwords.json   the admin password, generated on first start (mode 0600)
    <home>/logs/airflow-<c>.log     output of component <c>: api-server, scheduler, dag-processor, triggerer
    <home>/run/airflow-<c>.pid      its pid; each component runs in its own session (process group)
    <home>/run/airflow.json         the ports it was started on (for ``status`` and ``stop``), and the
                                    sessions its components lead (what a dead one left is found by them)

Settings come from the environment (``loglake.local.airflow_env``), not from a hand-edited
airflow.cfg.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from importlib.metadata import version

from loglake.core.config import Config
from loglake.core.errors import ProcessError
from loglake.local.airflow_env import (
    ADMIN_USER, DEFAULT_PORT, airflow_bin, airflow_env, airflow_home, dataset_names, ensure_password, resolve_port
)
from loglake.core.processes import (
    Managed, alive, command_line, descendants, free_port, orphaned_sessions, port_open, terminate
)

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# The scheduler first, so no task starts while the rest goes down.
STOP_ORDER = ("scheduler", "dag-processor", "triggerer", "api-server")


class EmbeddedAirflow:
    """The api-server, scheduler, dag-processor and triggerer of one loglake state directory."""

    def __init__(self, config: Config, port: int | None = None, *, dags_paused: bool = True):
        self.config = config
        self.home = airflow_home(config)
        self._state_file = config.home / "run" / "airflow.json"
        saved = self._saved()
        self.port = resolve_port(port) if port or os.environ.get("LOGLAKE_AIRFLOW_PORT") else (
            saved.get("port", DEFAULT_PORT))
        self.log_ports = tuple(saved.get("log_ports", (8793, 8794)))
        self.dags_paused = dags_paused

    def _saved(self) -> dict:
        try:
            return json.loads(self._state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def processes(self) -> dict[str, Managed]:
        return {c: Managed(self.config.home, f"airflow-{c}") for c in COMPONENTS}

    def env(self) -> dict[str, str]:
        return airflow_env(self.config, self.port, dags_paused=self.dags_paused, log_ports=self.log_ports)

    def password(self) -> str:
        return ensure_password(self.home)

    def datasets_changed(self) -> bool:
        """Whether the running Airflow was started with another dataset list than conf/ has now."""
        return self._saved().get("datasets", dataset_names(self.config)) != dataset_names(self.config)

    # --- lifecycle --------------------------------------------------------------------

    def migrate(self) -> bool:
        """``airflow db migrate`` once per Airflow version; True if it ran."""

        stamp = self.home / f".migrated-{version('apache-airflow-core')}"
        if stamp.exists():
            return False
        self.home.mkdir(parents=True, exist_ok=True)
        log = self.config.home / "logs" / "airflow-migrate.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.run([airflow_bin(), "db", "migrate"], env=self.env(), cwd=self.home,
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise ProcessError(f"airflow db migrate failed with exit code {proc.returncode}; "
                               f"--- last lines of {log} ---\n{tail}")
        stamp.touch()
        return True

    def start(self, timeout: float = 120.0) -> float:
        """Start whatever is not running and wait until the health check passes; return seconds.

        Healthy means the processes this call started have heartbeated since (a component
        that died a moment ago still looks healthy for up to 30 s by its last heartbeat).
        What a component that died left behind is stopped first (``clean_up_after_dead``).
        If a fresh start fails, whatever it started is stopped again before the error.
        """
        t0, since = time.monotonic(), time.time()
        procs = self.processes
        fresh = not any(p.pid() for p in procs.values())
        if not fresh and self.datasets_changed():
            # A dataset file was added or removed: Airflow's processes carry the list in their
            # environment (the backfill form), so they start again with the new one.
            self.stop()
            procs, fresh = self.processes, True
        saved = self._saved().get("port")
        if not fresh and saved and saved != self.port:
            raise ProcessError(f"Airflow already runs with its api-server on port {saved}, not {self.port}: "
                               "stop it first (`loglake down`) to move it")
        kept = self.clean_up_after_dead()  # first: a dead scheduler's log server holds a port
        if not procs["api-server"].pid() and port_open(self.port):
            raise ProcessError(f"port {self.port} is already in use: stop what listens there or choose another "
                               "port with LOGLAKE_AIRFLOW_PORT")
        if fresh:
            # The log servers listen on every interface: take the usual ports if free.
            self.log_ports = tuple(p if not port_open(p) else free_port() for p in (8793, 8794))
        self.password()
        self.migrate()
        env = self.env()
        self._save(kept)
        started = []
        try:
            for c, proc in procs.items():
                if not proc.pid():
                    proc.start([airflow_bin(), c], env=env, cwd=self.home)
                    started.append(c)
                    if c == "api-server":
                        # Task processes report to the api-server's execution API: a task the
                        # scheduler starts before it listens fails its first attempt (seen: a due
                        # scheduled run's first task, retried only after the retry delay).
                        self._wait_listening(proc, timeout)
            self._save(kept)
            self._wait_healthy(timeout, since, started)
        except BaseException:
            if fresh:
                self.stop()
            raise
        return time.monotonic() - t0

    def _save(self, sessions) -> None:
        """The state file: ports, datasets, and the sessions of the components started (each
        leads one), with ``sessions``: those of dead ones whose leftovers still run."""
        live = [p.pid() for p in self.processes.values()]
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(json.dumps({
            "port": self.port, "log_ports": list(self.log_ports), "datasets": dataset_names(self.config),
            "sessions": sorted({*sessions, *(p for p in live if p)})}))

    def clean_up_after_dead(self, *, keep_busy: bool = True) -> set[int]:
        """Stop what Airflow components that died (a SIGKILL, the OOM killer) left running;
        return the sessions whose leftovers were kept.

        A scheduler that dies leaves its LocalExecutor workers and its log server behind,
        reparented to init: the idle workers wait for ever on its task queue, the log
        server keeps the worker log port (the next scheduler's own cannot bind it), and
        stopping the running components does not reach them. They are found by the dead
        component's session and stopped. A worker still running a task is kept with its
        task (``keep_busy``): the task reports to the api-server, not the scheduler, so it
        finishes and its state counts (Airflow resets it and runs it again if it outlives
        the restarted scheduler's orphan check); a later start stops it once idle, ``stop``
        in any case.
        """
        leftovers = orphaned_sessions(self._saved().get("sessions", []))
        doomed: dict[int, float] = {}
        kept = set()
        for sid, procs in leftovers.items():
            busy = _busy_workers(procs) if keep_busy else {}
            if busy:
                kept.add(sid)
            doomed.update({p: c for p, c in procs.items() if p not in busy})
        # An idle worker ignores SIGTERM (the dead scheduler's handler, inherited by the fork): it
        # waits on a queue nobody writes to any more, so SIGKILL follows at once.
        terminate(doomed, timeout=1.0)
        return kept

    def _wait_listening(self, proc, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if not proc.pid():
                raise ProcessError(f"the Airflow api-server ended while starting; see {proc.log_file}")
            if time.monotonic() > deadline:
                raise ProcessError(f"the Airflow api-server did not listen on port {self.port} within "
                                   f"{timeout:.0f}s; see {proc.log_file}")
            time.sleep(0.5)

    def _wait_healthy(self, timeout: float, since: float = 0.0, started=()) -> None:
        procs = self.processes
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [c for c, p in procs.items() if not p.pid()]
            if dead:
                p = procs[dead[0]]
                raise ProcessError(f"airflow {dead[0]} exited during start\n--- last lines of {p.log_file} ---\n"
                                   f"{p.tail()}")
            health = self.health()
            if _all_healthy(health) and all(_heartbeat(health, c) > since for c in started if c in HEARTBEATS):
                return
            time.sleep(0.5)
        raise ProcessError(f"Airflow at {self.url} was not healthy after {timeout:.0f}s: {self.health()}; "
                           f"logs: {self.config.home / 'logs'}/airflow-*.log")

    def stop(self, timeout: float = 30.0) -> list[str]:
        """Stop every component and everything it started; return the components stopped.

        The scheduler gets SIGTERM on its main process only and shuts its LocalExecutor
        workers down itself (a SIGTERM to its whole group makes the workers miss that
        protocol, and the stop waits for the timeout); the other components get it on
        the whole tree (the triggerer otherwise waits 10 s for its trigger runner), all
        three at once after the scheduler.
        Task processes put themselves in process groups of their own, so the tree is
        taken before the stop, and whatever is left of it afterwards is terminated. Last,
        what components that died earlier left running is stopped, tasks included.
        """
        first, *rest = STOP_ORDER
        stopped = [c for c in [self._stop_one(first, timeout)] if c]
        with ThreadPoolExecutor(len(rest)) as pool:  # independent of one another once no task starts
            stopped += [c for c in pool.map(lambda c: self._stop_one(c, timeout), rest) if c]
        self.clean_up_after_dead(keep_busy=False)  # and what components that died left running
        self._state_file.unlink(missing_ok=True)
        return stopped

    def _stop_one(self, component: str, timeout: float) -> str | None:
        proc = self.processes[component]
        pid = proc.pid()
        if pid is None:
            return None
        tree = descendants(pid)
        if component == "scheduler" and pid in tree:
            terminate({pid: tree[pid]}, timeout=timeout)
        terminate(tree, timeout=timeout)
        proc.stop(timeout=5.0)  # whatever is left in its group; removes the pid file
        return component

    # --- state ------------------------------------------------------------------------

    def health(self, timeout: float = 2.0) -> dict | None:
        """The api-server's ``/api/v2/monitor/health`` answer, or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/monitor/health",
                                        timeout=timeout) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def status(self, timeout: float = 15.0) -> dict:
        """Per component pid and liveness, plus the health answer and the URL.

        The api-server answers slowly while the speed layer's JVMs start on a small
        machine (CI saw no answer within 2 s right after ``up``), so status waits longer
        than the start loop's quick polls do.
        """
        health = self.health(timeout)
        comps = {}
        for c, proc in self.processes.items():
            pid = proc.pid()
            key = c.replace("-", "_")
            state = (health or {}).get("metadatabase" if c == "api-server" else key, {}) or {}
            comps[c] = {"pid": pid, "alive": pid is not None, "health": state.get("status")}
        return {"url": self.url, "components": comps, "healthy": _all_healthy(health), "health": health}

    def token(self, wait: float = 120.0) -> str:
        """A REST API bearer token for the admin user (``POST /auth/token``).

        A loaded machine can leave the api-server silent for longer than one read's timeout
        (CI saw a 10-s read time out while a batch run's JVMs started), so a timed-out or
        refused attempt is tried again until ``wait`` seconds have passed.
        """
        body = json.dumps({"username": ADMIN_USER, "password": self.password()}).encode()
        deadline = time.monotonic() + wait
        while True:
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/auth/token", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return json.loads(r.read())["access_token"]
            except urllib.error.HTTPError:
                raise
            except (urllib.error.URLError, OSError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(2)


# Component → its entry in the health answer and that entry's heartbeat field.
HEARTBEATS = {"scheduler": ("scheduler", "latest_scheduler_heartbeat"),
              "triggerer": ("triggerer", "latest_triggerer_heartbeat"),
              "dag-processor": ("dag_processor", "latest_dag_processor_heartbeat")}


def _heartbeat(health: dict, component: str) -> float:
    """The latest heartbeat of ``component``'s newest job, in epoch seconds (0: none)."""

    entry, field = HEARTBEATS[component]
    value = (health.get(entry) or {}).get(field)
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else 0.0
    except ValueError:
        return 0.0


def _busy_workers(procs: dict[int, float]) -> dict[int, float]:
    """Of a dead scheduler's leftover processes, the LocalExecutor workers running a task,
    each with everything below it (the task process, its spark-submit, the job's driver)."""
    busy: dict[int, float] = {}
    for pid in procs:
        if "LocalExecutor" in (command_line(pid) or ""):
            tree = descendants(pid)
            if len(alive(tree)) > 1:
                busy.update(tree)
    return busy


def _all_healthy(health: dict | None) -> bool:
    if not health:
        return False
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((health.get(p) or {}).get("status") == "healthy" for p in parts)
