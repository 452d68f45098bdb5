"""Background processes loglake starts: pid files, logs, clean stops by process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loglake.errors import ProcessError


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
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.2)
        if _group_alive(pid):
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


def free_port() -> int:
    """A TCP port free on localhost right now (the OS picks it; racy but fine for tests)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on localhost:``port``."""
    import socket

    try:
        with socket.create_connection(("localhost", port), timeout=timeout):
            return True
    except OSError:
        return False


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is still in process group ``pgid``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(") ", 1)[1].split()
        except (FileNotFoundError, IndexError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def supervise(argv: list[str]) -> int:
    """Run ``argv`` and restart it when it dies, with backoff, until SIGTERM.

    Used for the background speed stream: a crash (OOM, broker restart) costs a restart,
    never data, because the stream resumes from its checkpoint.
    """
    stopping = False
    child: subprocess.Popen | None = None

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    backoff = 1.0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        code = child.wait()
        if stopping or code == 0:
            return 0 if stopping else code
        if time.monotonic() - started > 60:
            backoff = 1.0
        print(f"loglake supervisor: {argv[0]} exited with {code}; restarting in {backoff:.0f}s", flush=True)
        time.sleep(backoff)
        backoff = min(backoff * 2, 60.0)
    return 0


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


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))
