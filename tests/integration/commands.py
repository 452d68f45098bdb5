"""The ``loglake`` command as an operator types it, for the integration tests."""

from __future__ import annotations

import os
import subprocess
import sys


def loglake(config, *args, timeout=600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``loglake ARGS`` on ``config``'s conf and state directory (``env``: more variables);
    its exit code and output."""
    env = {**os.environ, "LOGLAKE_CONF": str(config.conf_dir), "LOGLAKE_HOME": str(config.home), **(env or {})}
    return subprocess.run([sys.executable, "-m", "loglake.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
