"""Background processes loglake starts: pid files, logs, clean stops by process group; process trees (psutil)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import psutil

from loglake.core.errors import ProcessError

T = TypeVar("T")


@dataclass(frozen=True)
class Managed:
    """A named background process under ``home``: ``run/<name>.pid``, ``logs/<name>.log``."""

    home: Path
    name: str

    @property
    def pid_file(self) -> Path:
        return self.home / "run" / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid if the process is alive; a stale pid file is removed."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self.pid_file.unlink(missing_ok=True)
            return None
        except PermissionError:
            return pid
        if _is_zombie(pid):
            self.pid_file.unlink(missing_ok=True)
            return None
        return pid

    def start(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start ``cmd`` in its own session (so a stop reaches its whole tree); idempotent."""
        existing = self.pid()
        if existing:
            return existing
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True)
        self.pid_file.write_text(str(proc.pid))
        return proc.pid

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM the process group, SIGKILL after ``timeout``; True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and group_alive(pid):
            time.sleep(0.2)
        if group_alive(pid):
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL the whole group at once (crash simulation; no chance to clean up)."""
        pid = self.pid()
        if pid is not None:
            _signal_group(pid, signal.SIGKILL)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def state_label(pid: int | None) -> str:
    """``running (pid N)`` or ``stopped``, padded for a status table's column."""
    return f"running (pid {pid})".ljust(20) if pid else "stopped".ljust(20)


def free_port() -> int:
    """A TCP port free on localhost right now (the OS picks it; racy but fine for tests)."""

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started_on_free_port(make: Callable[[int], T], start: Callable[[T], None], attempts: int = 3,
                         ports: Iterator[int] | None = None) -> T:
    """``make(port)`` on a port free right now, started with ``start``. A free port can be taken
    by another process before the server binds it (``PortInUseError``): then again on a fresh
    one, up to ``attempts`` times. ``ports`` replaces the OS's choice."""
    from loglake.core.errors import PortInUseError

    ports = ports if ports is not None else iter(free_port, None)
    for attempt in range(1, attempts + 1):
        server = make(next(ports))
        try:
            start(server)
            return server
        except PortInUseError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on localhost right now (all bound at once while chosen,
    so no two are the same; racy against other processes like ``free_port``)."""

    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on localhost:``port``."""

    try:
        with socket.create_connection(("localhost", port), timeout=timeout):
            return True
    except OSError:
        return False


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in process group ``pgid``."""
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def command_line(pid: int) -> str | None:
    """The command line of a live, non-zombie process; None if there is none."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None  # exited, not yet reaped
        return " ".join(proc.cmdline())
    except psutil.Error:
        return None


def descendants(pid: int) -> dict[int, float]:
    """``pid`` and every process below it, whatever process group they moved to
    (pid → creation time, which tells a process from a later one that reuses its pid)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return {}
    found = {}
    for proc in procs:
        try:
            found[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return found


def alive(procs: dict[int, float]) -> dict[int, float]:
    """The processes of ``procs`` (pid → creation time) still running: same pid, same
    creation time, not a zombie."""
    out = {}
    for pid, created in procs.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                out[pid] = created
        except psutil.Error:
            continue
    return out


def orphaned_sessions(sids) -> dict[int, dict[int, float]]:
    """Session id → the processes left in it (pid → creation time), for each session of
    ``sids`` whose leader has exited (or is a zombie) and that still has members.

    A background process loglake starts leads a session of its own (``Managed.start``), so
    its session id is its pid, and whatever it forked and did not move to another session
    stays in it — also after it died and its children were reparented to init. Linux does
    not hand a pid out again while a session still uses it as its id, so the members found
    under a dead leader's id are that leader's leftovers; a live process with that pid is a
    leader (or, once the session is empty, another process) and its session is not touched.
    """
    dead = set()
    for sid in sids:
        try:
            if psutil.Process(sid).status() != psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            pass
        dead.add(sid)
    found: dict[int, dict[int, float]] = {}
    if not dead:
        return found
    for proc in psutil.process_iter():
        try:
            sid = os.getsid(proc.pid)
            if sid in dead and proc.pid != sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.setdefault(sid, {})[proc.pid] = proc.create_time()
        except (OSError, psutil.Error):
            continue
    return found


def terminate(procs: dict[int, float], timeout: float) -> None:
    """SIGTERM the processes of ``procs`` still alive, SIGKILL them after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        left = alive(procs)
        if not left:
            return
        for p in left:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive(left):
            time.sleep(0.2)


def pss_bytes(pids) -> int:
    """Proportional set size of the processes ``pids`` together (0 for those gone or unreadable)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.Error:
        return 0.0


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2, log: Managed | None = None):
    """Poll ``predicate`` until truthy; raise ProcessError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    detail = f"\n--- last lines of {log.log_file} ---\n{log.tail()}" if log else ""
    raise ProcessError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
