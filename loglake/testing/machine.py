"""What figures were measured on: the results files of ``make bench`` and ``make soak`` carry it."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

from loglake.core.paths import REPO_ROOT, jar_dir
from loglake.local.jars import jar_versions

# The stack's parts: (name in the results, PyPI distribution) and (name, jar set, artifact).
_PACKAGES = [("pyspark", "pyspark"), ("delta-spark", "delta-spark"), ("airflow", "apache-airflow"),
             ("confluent-kafka", "confluent-kafka"), ("deltalake", "deltalake")]
_JARS = [("spark-sql-kafka", "spark", "spark-sql-kafka-0-10_2.13"), ("delta-spark jar", "spark", "delta-spark_2.13"),
         ("kafka broker", "kafka", "kafka_2.13")]


def stack() -> dict:
    """The versions of the stack this checkout runs on: its Python packages and its jars
    (``-`` for one not installed)."""
    out = {}
    for name, dist in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "-"
    for name, kind, artifact in _JARS:
        out[name] = jar_versions(jar_dir(kind)).get(artifact, "-")
    return out


def machine() -> dict:
    """CPU, cores, memory, OS, Python, Java, the commit of this checkout and its stack's versions."""
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
            "commit": commit, "stack": stack()}


def stack_line(host: dict) -> str:
    """``Spark 4.1.1, Delta 4.3.0, Kafka 4.1.1`` from a ``machine()`` block (an older results
    file, without the stack: ``stack not recorded``)."""
    st = host.get("stack")
    if not st:
        return "stack not recorded"
    return f"Spark {st.get('pyspark', '-')}, Delta {st.get('delta-spark jar', '-')}, Kafka {st.get('kafka broker', '-')}"
