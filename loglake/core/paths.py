"""Where loglake keeps things: the repo, the state directory and the jar cache."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from loglake.core.errors import SetupError

REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_PACKAGES = ("loglake", "spark_jobs")


def code_files() -> list[Path]:
    """The project's Python code that Spark jobs run: ``loglake/`` and ``spark_jobs/``."""
    return sorted(f for pkg in CODE_PACKAGES for f in (REPO_ROOT / pkg).rglob("*.py"))


def code_digest() -> str:
    """A hash of ``code_files``: which code a process runs (the shared Spark application
    refuses jobs of other code; a cluster's code archive is named by it)."""

    digest = hashlib.sha256()
    for f in code_files():
        digest.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


def state_home() -> Path:
    """The state directory: ``$LOGLAKE_HOME`` or ``.loglake/`` in the repo."""
    env = os.environ.get("LOGLAKE_HOME")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / ".loglake"


def cache_home() -> Path:
    """The jar cache, outside the repo: ``$LOGLAKE_CACHE`` or ``~/.cache/loglake``."""
    env = os.environ.get("LOGLAKE_CACHE")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "loglake"


# loglake's own Delta log store for s3a:// tables (jvm/s3-logstore's <finalName>), in the s3 set.
LOGSTORE_JAR = "loglake-s3-logstore.jar"
# loglake's Spark extension (jvm/spark-ext's <finalName>), in the spark set.
SPARK_EXT_JAR = "loglake-spark-ext.jar"


def jar_dir(kind: str) -> Path:
    """Directory of resolved jars for ``kind`` (``kafka``, ``spark``, ``s3``, ``registry``)."""
    return cache_home() / "jars" / kind


def jars(kind: str) -> list[Path]:
    """The resolved jars of ``kind``; a clear error when setup has not run."""
    d = jar_dir(kind)
    found = sorted(d.glob("*.jar")) if d.is_dir() else []
    if not found:
        raise SetupError(f"no {kind} jars under {d}: run `make setup` (the broker's and Spark's) or `make setup-test` "
                         f"(all; a `loglake` command on an s3a:// lake fetches the s3 set itself), or "
                         f"`python -m loglake.local.jars {kind}`")
    return found


def conf_dir() -> Path:
    """The configuration directory: ``$LOGLAKE_CONF`` or ``conf/`` in the repo."""
    env = os.environ.get("LOGLAKE_CONF")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / "conf"


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SetupError("no Java: set JAVA_HOME or put `java` (17+) on PATH")
    return found


def pyspark_home() -> Path | None:
    """The installed pyspark's directory, which holds Spark's launcher (``bin/``) and jars
    (``jars/``); None when pyspark is not installed here.

    Not simply where ``import pyspark`` came from: in a Python driver spark-submit started,
    ``$SPARK_HOME/python/lib/pyspark.zip`` is first on the path (the wheel ships it), and the
    package imported from the zip has no jars beside it. Then ``$SPARK_HOME`` (spark-submit sets
    it), else the path's own ``pyspark/`` directory that has them."""

    import importlib.util

    def holds_jars(d: Path) -> bool:
        return (d / "jars").is_dir()

    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        for location in spec.submodule_search_locations or []:
            if holds_jars(Path(location)):
                return Path(location)
    env = os.environ.get("SPARK_HOME")
    if env and holds_jars(Path(env)):
        return Path(env)
    for entry in sys.path:
        if entry and holds_jars(Path(entry) / "pyspark"):
            return Path(entry) / "pyspark"
    return None


@functools.lru_cache(maxsize=1)
def java_version() -> str:
    """What ``java -version`` says (a class-data archive serves only the JVM that made it)."""

    try:
        return subprocess.run([java_executable(), "-version"], capture_output=True, text=True).stderr
    except (SetupError, OSError):  # no Java here (a machine that only submits to a cluster): no archive either
        return "none"


# Java's CDS lines (an archive made by another build, a class path that differs): never on a
# process's output; the JVM then simply starts without the archive.
CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
