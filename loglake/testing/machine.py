"""What figures were measured on: the results files of ``make bench`` and ``make soak`` carry it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

from loglake.core.paths import REPO_ROOT


def machine() -> dict:
    """CPU, cores, memory, OS, Python, Java and the commit of this checkout."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # the CPU's name is in /proc/cpuinfo only (psutil has counts, not names)
    mem_kb = psutil.virtual_memory().total // 1024
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "os": platform.platform(), "python": sys.version.split()[0], "java": java[0] if java else "",
            "commit": commit}
