"""Resolve the JVM jars loglake needs from Maven Central: ``python -m loglake.local.jars``.

Sets, each described by a POM in ``setup/`` and copied into ``jar_dir(kind)`` (under
the cache, outside the repo):

- ``kafka``: the embedded KRaft broker (``loglake.local.broker``);
- ``spark``: what PySpark lacks for Kafka -> Delta, and loglake's Spark extension
  (``io.loglake.spark.BoundedCollect``) built from ``jvm/spark-ext`` (passed as ``spark.jars``);
- ``registry``: the embedded schema registry (Apicurio Registry, ``loglake.local.apicurio``),
  a Quarkus application built from its Maven Central jars into ``quarkus-app/``;
- ``s3``: an ``s3a://`` lake's: hadoop-aws and the AWS SDK bundle it calls, and loglake's Delta
  log store (``io.loglake.storage.S3ConditionalLogStore``) built from ``jvm/s3-logstore``
  (on the drivers' and executors' class path, ``loglake.jobs.launch.spark_conf``).

Stdlib only, so it runs before (or without) the venv. Repeated runs are no-ops: a stamp
in the jar dir holds a hash of the POM, the Maven arguments and the sources built. Jars are
copied into a temporary directory that is renamed into place only when complete, so a failed
or interrupted run never leaves a jar dir that looks usable.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from loglake.core.errors import SetupError
from loglake.core.paths import LOGSTORE_JAR, REPO_ROOT, SPARK_EXT_JAR, cache_home, jar_dir, pyspark_home

KINDS = ("kafka", "spark", "registry", "s3")
CENTRAL = "https://repo.maven.apache.org/maven2"
STAMP = ".loglake-stamp"  # not *.jar, so paths.jars() never lists it

# loglake's own jars, each built by Maven from its project into a set: the Delta log store for
# s3a:// tables into the s3 set, the Spark extension into the spark set.
LOGSTORE_PROJECT = REPO_ROOT / "jvm" / "s3-logstore"
SPARK_EXT_PROJECT = REPO_ROOT / "jvm" / "spark-ext"
_BUILD = ".build"  # an own jar's Maven build dir, inside the temporary jar dir


def own_jar(kind: str) -> tuple[Path, str] | None:
    """The project and jar name of loglake's own jar in set ``kind`` (None: the set is only resolved)."""
    return {"s3": (LOGSTORE_PROJECT, LOGSTORE_JAR), "spark": (SPARK_EXT_PROJECT, SPARK_EXT_JAR)}.get(kind)

# Spark's parent POM declares a repository unreachable from here; mirroring every
# repository to Central avoids slow failed look-ups (FIELD-NOTES.md).
SETTINGS_XML = f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by loglake.local.jars: every repository is fetched from Maven Central. -->
<settings>
  <mirrors>
    <mirror>
      <id>loglake-central</id>
      <mirrorOf>*</mirrorOf>
      <url>{CENTRAL}</url>
    </mirror>
  </mirrors>
</settings>
"""

# Maven's ways of saying which artifact failed, most specific first. Each captures a
# G:A[:type]:V coordinate (or, for the last one, the whole detail).
_FAILURE_PATTERNS = [
    re.compile(r"Could not find artifact (\S+)"),
    re.compile(r"Failed to read artifact descriptor for (\S+)"),
    re.compile(r"Could not transfer artifact (\S+)"),
    re.compile(r"Plugin (\S+) or one of its dependencies could not be resolved"),
    re.compile(r"Failed to collect dependencies at (.+?)(?::\s|$)"),
    re.compile(r"Could not resolve dependencies for project \S+: (.+?)(?: -> \[Help|$)"),
]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Jars pyspark ships itself: a second copy in the spark set would shadow or clash.
_JAR_NAME = re.compile(r"^(?P<name>.+?)-(?P<version>\d+\.\d+[^_]*)\.jar$")


def pom_path(kind: str) -> Path:
    return REPO_ROOT / "setup" / f"pom-{kind}.xml"


def settings_path() -> Path:
    return cache_home() / "maven-settings.xml"


def log_path(kind: str) -> Path:
    return cache_home() / "logs" / f"mvn-{kind}.log"


def _mvn(settings: Path, pom: Path) -> list[str]:
    # -U: re-check artifacts a previous failed run marked missing in ~/.m2 (else Maven
    # refuses to retry until the "update interval" elapses). style.color: plain log.
    return ["-B", "-q", "-U", "-Dstyle.color=never", "-s", str(settings), "-f", str(pom)]


def mvn_args(kind: str, settings: Path, out: Path) -> list[str]:
    common = _mvn(settings, pom_path(kind))
    if kind == "registry":  # built, not copied: Quarkus' plugin makes the runnable app under ``out``
        return [*common, "package", f"-Dbuild.dir={out}"]
    return [*common, "dependency:copy-dependencies", f"-DoutputDirectory={out}", "-DincludeScope=runtime"]


def build_args(kind: str, settings: Path, out: Path) -> list[str] | None:
    """The Maven run that builds loglake's own jar of ``kind`` under ``out`` (None: the set has none)."""
    own = own_jar(kind)
    if own is None:
        return None
    return [*_mvn(settings, own[0] / "pom.xml"), "package", f"-Dbuild.dir={out / _BUILD}"]


def own_sources(kind: str) -> list[Path]:
    """The files of loglake's own jar in ``kind`` (its project's POM and sources); [] for a set
    only resolved."""
    own = own_jar(kind)
    if own is None:
        return []
    project = own[0]
    return [project / "pom.xml", *sorted(p for p in (project / "src").rglob("*") if p.is_file())]


def built(kind: str, d: Path) -> list[Path]:
    """What a finished run leaves in ``d``: the jars (the registry: its runnable jar)."""
    if kind == "registry":
        return [p for p in [d / "quarkus-app" / "quarkus-run.jar"] if p.is_file()]
    return sorted(d.glob("*.jar"))


def stamp_value(kind: str) -> str:
    """Hash of what decides the jar set: the POM, the fixed Maven arguments and, for a set with a
    jar of loglake's own, its sources and build arguments (an edit of the log store's Java
    rebuilds it)."""
    h = hashlib.sha256(pom_path(kind).read_bytes())
    # Paths under the repo as the repo names them: a fresh clone elsewhere finds its sets current
    # (its POMs' contents are hashed), not re-run Maven for each.
    h.update(" ".join(mvn_args(kind, Path("S"), Path("O"))).replace(str(REPO_ROOT), "<repo>").encode())
    own = own_jar(kind)
    for f in own_sources(kind):
        h.update(b"\0" + str(f.relative_to(own[0])).encode() + b"\0" + f.read_bytes())
    build = build_args(kind, Path("S"), Path("O"))
    if build:
        h.update(b"\0" + " ".join(build).replace(str(REPO_ROOT), "<repo>").encode())
    return h.hexdigest()


def is_current(kind: str) -> bool:
    """True when the jar dir is complete and was made from the current POM."""
    d = jar_dir(kind)
    stamp = d / STAMP
    try:
        return stamp.read_text().strip() == stamp_value(kind) and bool(built(kind, d))
    except OSError:
        return False


def maven_error(output: str) -> str:
    """Maven's first non-empty [ERROR] line, without the boilerplate around it."""
    for line in _ANSI.sub("", output).splitlines():
        line = line.strip()
        if line.startswith("[ERROR]") and line.removeprefix("[ERROR]").strip():
            line = line.removeprefix("[ERROR]").strip()
            return re.sub(r"^Failed to execute goal on project \S+: | -> \[Help \d+\]$", "", line)
    return ""


def failed_artifact(output: str) -> str:
    """The artifact (or failure detail) Maven names in ``output``; '' if none."""
    text = _ANSI.sub("", output)
    for pattern in _FAILURE_PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1).strip().rstrip(":")
    return maven_error(text)


def pyspark_jars() -> tuple[Path | None, dict[str, str]]:
    """The installed pyspark's jars dir and its jars (name -> version); (None, {}) when pyspark
    is not importable here."""
    home = pyspark_home()
    if home is None:
        return None, {}
    shipped_dir = home / "jars"
    return shipped_dir, jar_versions(shipped_dir)


def jar_versions(d: Path) -> dict[str, str]:
    """The jars in ``d``, name -> version (``kafka_2.13-4.1.1.jar``: ``kafka_2.13`` -> ``4.1.1``)."""
    out = {}
    for p in d.glob("*.jar"):
        m = _JAR_NAME.match(p.name)
        if m:
            out[m["name"]] = m["version"]
    return out


def check_spark_set(jar_names: list[str]) -> list[str]:
    """Problems with the spark set against the installed pyspark's own jars.

    Returns messages for jars that pyspark already ships in another version (a
    conflicting duplicate on the classpath); [] when pyspark is not importable here.
    """
    shipped_dir, shipped = pyspark_jars()
    problems = []
    for name in jar_names:
        m = _JAR_NAME.match(name)
        if m and m["name"] in shipped:
            problems.append(f"{name} duplicates pyspark's {m['name']}-{shipped[m['name']]}.jar ({shipped_dir})")
    return problems


def check_s3_set(jar_names: list[str]) -> list[str]:
    """Problems with the s3 set: ``check_spark_set``'s, and a hadoop-aws of another version than
    the Hadoop client pyspark ships (S3A calls Hadoop's internals: the two move together)."""
    problems = check_spark_set(jar_names)
    shipped_dir, shipped = pyspark_jars()
    hadoop = shipped.get("hadoop-client-api")
    for name in jar_names:
        m = _JAR_NAME.match(name)
        if m and m["name"] == "hadoop-aws" and hadoop and m["version"] != hadoop:
            problems.append(f"{name} is not of the version of pyspark's hadoop-client-api-{hadoop}.jar ({shipped_dir})")
    return problems


_CHECKS = {"spark": check_spark_set, "s3": check_s3_set}


def resolve(kind: str, force: bool = False) -> tuple[list[Path], bool]:
    """Make ``jar_dir(kind)`` hold the resolved jars; returns (jars, from_cache)."""
    if kind not in KINDS:
        raise SetupError(f"unknown jar set {kind!r}; expected one of {', '.join(KINDS)}")
    final = jar_dir(kind)
    if not force and is_current(kind):
        return built(kind, final), True
    cache_home().mkdir(parents=True, exist_ok=True)
    # One resolver at a time: concurrent runs would race on the temp dirs and the rename.
    with (cache_home() / ".setup_jvm.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and is_current(kind):  # another run finished it while we waited
            return built(kind, final), True
        return _resolve_locked(kind, final), False


def _resolve_locked(kind: str, final: Path) -> list[Path]:
    """Run Maven into a temp dir, check the result, then rename it over ``final``."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("`mvn` not found on PATH: install Maven 3.8+ (and a JDK 17) to resolve the jars")
    settings = settings_path()
    settings.parent.mkdir(parents=True, exist_ok=True)
    if not settings.exists() or settings.read_text() != SETTINGS_XML:
        settings.write_text(SETTINGS_XML)

    final.parent.mkdir(parents=True, exist_ok=True)
    for leftover in final.parent.glob(f".{kind}.*-*"):  # from a run that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = final.parent / f".{kind}.tmp-{os.getpid()}"
    log = log_path(kind)
    log.parent.mkdir(parents=True, exist_ok=True)
    stamp = stamp_value(kind)  # of the sources as Maven is about to read them
    try:
        log.write_text("")
        rc = _run_maven([mvn, *mvn_args(kind, settings, tmp)], log)
        if rc != 0:
            output = log.read_text(errors="replace")
            what = failed_artifact(output) or f"mvn exited with {rc}"
            raise SetupError(
                f"Maven could not resolve {what} (for the {kind} jar set)\n"
                f"  Maven said: {maven_error(output) or '(nothing; see the log)'}\n"
                f"  POM: {pom_path(kind)}\n  Maven log: {log}\n"
                f"  (check the version exists on {CENTRAL}: mvn dependency:get -Dartifact=G:A:V)"
            )
        build = build_args(kind, settings, tmp)
        if build:
            _build_own_jar(kind, [mvn, *build], tmp, log)
        got = [p.name for p in built(kind, tmp)]
        if not got:
            raise SetupError(f"Maven resolved no jars for {kind} from {pom_path(kind)}; log: {log}")
        problems = _CHECKS[kind](got) if kind in _CHECKS else []
        if problems:
            raise SetupError(
                f"the {kind} jar set clashes with the jars pyspark ships; change "
                f"{pom_path(kind)}:\n  " + "\n  ".join(problems)
            )
        (tmp / STAMP).write_text(stamp + "\n")  # written last: marks completeness
        # Swap in: the old dir (if any) moves aside first, so `final` is never half-filled.
        old = final.parent / f".{kind}.old-{os.getpid()}"
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return built(kind, final)


def _run_maven(cmd: list[str], log: Path) -> int:
    """Run ``cmd``, its output appended to ``log``; its exit code."""
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode


def _build_own_jar(kind: str, cmd: list[str], tmp: Path, log: Path) -> None:
    """Build loglake's jar of ``kind`` (``own_jar``) and move it beside the resolved jars."""
    project, name = own_jar(kind)
    start = log.stat().st_size
    rc = _run_maven(cmd, log)
    jar = tmp / _BUILD / name
    if rc != 0 or not jar.is_file():
        with log.open(errors="replace") as fh:
            fh.seek(start)
            output = _ANSI.sub("", fh.read())
        # javac's first complaint (file, line and what), else Maven's first error
        said = next((line.removeprefix("[ERROR]").strip() for line in output.splitlines()
                     if line.startswith("[ERROR]") and ".java:[" in line), "") or maven_error(output)
        raise SetupError(
            f"Maven could not build {project} (for the {kind} jar set)\n"
            f"  Maven said: {said or f'(nothing; mvn exited with {rc})'}\n  Maven log: {log}"
        )
    jar.rename(tmp / name)
    shutil.rmtree(tmp / _BUILD)


# What each set is, for the line said when one is fetched on first use.
FIRST_USE = {
    "registry": "the schema registry (Apicurio Registry, built from Maven Central's jars)",
    "s3": "an s3a:// lake's jars (hadoop-aws, the AWS SDK bundle, loglake's Delta log store; ~650 MB)",
}


def ensure(kind: str, say=print) -> list[Path]:
    """The jars of ``kind``, fetched now when this machine has none yet, with a line before and
    after: what ``make setup`` leaves to first use (``loglake.local.fetch``). A set that is there
    is used as it is (an image's read-only cache; ``make setup-test`` renews one whose POM changed)."""
    there = built(kind, jar_dir(kind))
    if there:
        return there
    what = FIRST_USE.get(kind, f"the {kind} jars")
    say(f"setup: fetching {what}, once, into {jar_dir(kind)} ...")
    t0 = time.monotonic()
    found, _cached = resolve(kind)
    say(f"setup: {kind} ready in {time.monotonic() - t0:.1f}s")
    return found


def for_config(config, say=print) -> None:
    """Fetch on first use what ``config``'s profile runs beyond ``make setup``'s sets: the S3 jars
    of an ``s3a://`` lake (the embedded registry fetches its own when it starts)."""
    from loglake.core import objectstore

    if any(objectstore.is_remote(p) for p in (config.lake_root, config.checkpoint_root)):
        ensure("s3", say)


def _mb(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loglake.local.jars", description=__doc__.splitlines()[0])
    ap.add_argument("kinds", nargs="*", metavar="KIND", help=f"jar sets to resolve (default: {' '.join(KINDS)})")
    ap.add_argument("--force", action="store_true", help="resolve again even when the stamp matches")
    args = ap.parse_args(argv)

    failed = 0
    for kind in args.kinds or KINDS:
        t0 = time.monotonic()
        try:
            found, cached = resolve(kind, force=args.force)
        except SetupError as e:
            print(f"jars: {kind} FAILED: {e}", file=sys.stderr)
            failed += 1
            continue
        if cached:
            print(f"jars: {kind} ok ({len(found)} jars, cached)")
        else:
            took = time.monotonic() - t0
            print(f"jars: {kind} ok ({len(found)} jars, {_mb(found):.1f} MB, resolved in {took:.1f} s) -> {jar_dir(kind)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
