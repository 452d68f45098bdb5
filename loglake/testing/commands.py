"""The ``loglake`` command as an operator types it, on a test's config (its own conf and state
directory), in a process of its own; and that config named to code in this process that
reads it from the environment, as an Airflow task's body does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from typing import Iterator

from loglake.core.config import Config


def command_env(config: Config, **more: str) -> dict[str, str]:
    """This process's environment with ``config``'s conf and state directory (``LOGLAKE_CONF``,
    ``LOGLAKE_HOME``), then ``more``."""
    return {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home), **more}


def loglake_command(*args: str) -> list[str]:
    """``loglake ARGS`` with this interpreter (the venv's, whatever is on PATH)."""
    return [sys.executable, "-m", "loglake.cli", *args]


def run_loglake(config: Config, *args: str, timeout: float = 600,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``loglake ARGS`` on ``config`` (``env``: more variables); its exit code and output (text)."""
    return subprocess.run(loglake_command(*args), env=command_env(config, **(env or {})), capture_output=True,
                          text=True, timeout=timeout)


_HOLD_LEASE = textwrap.dedent('''
    import sys, time
    from loglake.core.config import load_config
    from loglake.leases import writer
    config = load_config(sys.argv[1], home=sys.argv[2])
    with writer(config, sys.argv[3], "maintenance", "run-7") as token:
        print(token, flush=True)
        time.sleep(float(sys.argv[4]))
''')


def hold_writer_lease(config: Config, dataset: str, seconds: float,
                      env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """Another process holding ``dataset``'s writer lease on ``config`` as maintenance run
    ``run-7`` for ``seconds``; the process and its lease token (once it holds the lease)."""
    p = subprocess.Popen([sys.executable, "-c", _HOLD_LEASE, str(config.conf_dir), str(config.home), dataset,
                          str(seconds)], stdout=subprocess.PIPE, text=True, env=env)
    return p, p.stdout.readline().strip()


_TAKE_LEASE = textwrap.dedent('''
    import sys, time
    from loglake.core.config import load_config
    from loglake.core.errors import WriterBusyError
    from loglake.leases import writer
    config = load_config(sys.argv[1], home=sys.argv[2])
    try:
        with writer(config, sys.argv[3], "maintenance", "run-7", wait_seconds=float(sys.argv[4]),
                    say=lambda m: None) as token:
            print("took", token, flush=True)
            time.sleep(float(sys.argv[5]))
    except WriterBusyError as e:
        print("busy", e, flush=True)
''')


def take_writer_lease(config: Config, dataset: str, wait_seconds: float, hold_seconds: float = 0.0,
                      env: dict[str, str] | None = None) -> subprocess.Popen:
    """Another host's writer: a process that waits up to ``wait_seconds`` for ``dataset``'s writer
    lease on ``config`` as maintenance run ``run-7``, says ``took <token>`` (then holds it for
    ``hold_seconds``) or ``busy <the error>`` on its stdout (text). No lease token is inherited
    from this process (it is no job of a holder here); ``env``: more variables."""
    base = {k: v for k, v in os.environ.items() if k != "LOGLAKE_LOCK_TOKEN"}
    return subprocess.Popen([sys.executable, "-c", _TAKE_LEASE, str(config.conf_dir), str(config.home), dataset,
                             str(wait_seconds), str(hold_seconds)], stdout=subprocess.PIPE, text=True,
                            env={**base, **(env or {})})


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment inside the block; what those variables were
    (or their absence) is restored after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def config_environment(config: Config):
    """``LOGLAKE_CONF`` and ``LOGLAKE_HOME`` name ``config`` in this process inside the block;
    what they were is restored after."""
    return environment({"LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home)})
