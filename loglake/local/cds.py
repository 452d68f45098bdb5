"""A class-data sharing archive for Spark's drivers: ``python -m loglake.local.cds`` (``make setup``).

A Spark driver loads many thousands of classes before its first query; a JVM started with
a CDS archive maps them ready-parsed instead of parsing them (and the drivers running at
once share those pages).
``make setup`` dumps one archive (``-XX:ArchiveClassesAtExit``) from a small Spark job that
starts a session and writes and reads a Delta table, under the cache
(``<cache>/cds/spark-<key>.jsa``, the key from the Java version, the pyspark install and
its jars); ``loglake.jobs.launch.spark_conf`` adds ``-XX:SharedArchiveFile`` when the archive for
the running Java and pyspark exists (``loglake.jobs.launch.cds_archive``). A JVM that cannot use it (another class path) starts as
without it, silently; one that can starts faster (CHANGELOG.md has the figures).

The dump runs from a mirror of Spark's launcher and jars, hard links under the cache
(``<cache>/cds/spark-<key>/``), so the paths the archive names outlive the clone that made it;
a JVM takes a class path entry that is the same file at another path. The made archive is
checked against this install's own launcher before it is kept (``serves``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loglake.core.config import Config, Profile
from loglake.core.errors import ProcessError, SetupError
from loglake.core.paths import CDS_QUIET
from loglake.jobs.launch import (cds_archive, cds_can_link, job_env, spark_conf, spark_home, spark_submit_bin,
                                 submit_command)

_JOB = """
import sys
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
spark = SparkSession.builder.getOrCreate()
df = spark.range(2000).select("id", F.col("id").cast("string").alias("s"),
                              F.from_json(F.lit('{"a": 1}'), "a long").alias("j"))
df.write.format("delta").mode("overwrite").save(sys.argv[1])
spark.read.format("delta").load(sys.argv[1]).where("id > 10").groupBy("s").count().collect()
spark.stop()
"""


def _to_make(target: Path, force: bool) -> bool:
    """Whether ``target`` is to be dumped (missing, or ``force``); if so, the way is cleared."""

    if target.exists() and not force:
        return False
    target.unlink(missing_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    return True


def make(force: bool = False) -> tuple[Path, float | None]:
    """Dump the archive unless it exists; (its path, seconds taken or None when it was there)."""

    target = cds_archive()
    # (The old archive goes first: the drivers' own settings, spark_conf, would start this one with it.)
    if not _to_make(target, force):
        return target, None
    t0 = time.monotonic()
    home = mirror(target) if cds_can_link() else spark_home()
    with tempfile.TemporaryDirectory(prefix="loglake-cds-") as tmp:
        job = Path(tmp) / "job.py"
        job.write_text(_JOB)
        dump = target.with_suffix(f".{os.getpid()}.tmp")
        # A driver as loglake submits one (same jars, class path and settings) that writes the
        # archive when it exits: a local-mode profile of loglake's defaults; no conf dir or dataset
        # is read, and nothing is written outside ``tmp``. Spark's own launcher, from the mirror:
        # the archive names the mirror's paths, which outlive this clone's venv.
        config = Config("cds", Profile.model_validate({"spark": {"conf": {"spark.ui.enabled": "false"}}}), {},
                        home=Path(tmp) / "state", conf_dir=Path(tmp))
        jvm = f"{spark_conf(config)['spark.driver.extraJavaOptions']} -XX:ArchiveClassesAtExit={dump} {CDS_QUIET}"
        cmd = submit_command(config, str(job), [str(Path(tmp) / "table")], "loglake-cds",
                             {"spark.driver.extraJavaOptions": jvm})
        cmd[0] = str(home / "bin" / "spark-submit")
        env = {**job_env(config), "SPARK_HOME": str(home)}
        log = target.with_suffix(".log")
        with open(log, "w") as out:
            code = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if code != 0 or not dump.exists():
            dump.unlink(missing_ok=True)
            raise RuntimeError(f"the CDS dump job failed (exit {code}); its output: {log}")
        problem = serves(dump, config)
        if problem:
            dump.unlink(missing_ok=True)
            raise RuntimeError(f"the archive dumped does not serve this install's drivers: {problem}")
        dump.replace(target)
    prune(target)
    return target, time.monotonic() - t0


def mirror(target: Path) -> Path:
    """Spark's launcher and jars as hard links under the cache, beside ``target``: a Spark home
    that lives as long as the archive, whose jars are the venv's files (the same inodes), in
    the same order. Made afresh each time (a partial one from a killed setup is replaced)."""

    home = target.with_suffix("")  # <cache>/cds/spark-<key>/
    shutil.rmtree(home, ignore_errors=True)
    for sub in ("bin", "jars"):
        (home / sub).mkdir(parents=True)
        for name in os.listdir(spark_home() / sub):  # in the directory's order, as the launcher lists it
            src = spark_home() / sub / name
            if src.is_file():
                os.link(src, home / sub / name)
    return home


def serves(archive: Path, config: Config, home: Path | None = None) -> str | None:
    """None when a driver started by this install's spark-submit (the venv's paths; or the
    one of the Spark home ``home``) maps the archive; else why not. ``-Xshare:on`` makes a JVM
    that cannot map it fail at start, where a driver (without it) would start without the
    archive, silently."""

    env = {**job_env(config), "SPARK_SUBMIT_OPTS": f"-Xshare:on -XX:SharedArchiveFile={archive} -Xlog:class+path=info"}
    env.pop("SPARK_HOME", None)
    submit = spark_submit_bin()
    if home is not None:
        env["SPARK_HOME"], submit = str(home), str(home / "bin" / "spark-submit")
    r = subprocess.run([submit, "--version"], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode == 0:
        return None
    lines = [line for line in (r.stdout + r.stderr).splitlines() if "mismatch" in line or "Unable" in line]
    return "; ".join(lines[-3:]) or f"spark-submit --version exited {r.returncode}"


def make_kafka(force: bool = False) -> tuple[Path, float | None]:
    """Dump the broker's archive unless it exists: a broker started on free ports in a
    temporary home, a topic written and read, stopped (the JVM writes the archive at its
    exit); (its path, seconds taken or None when it was there)."""

    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from loglake.local.broker import EmbeddedKafka, kafka_archive

    target = kafka_archive()
    if not _to_make(target, force):
        return target, None
    t0 = time.monotonic()
    dump = target.with_suffix(f".{os.getpid()}.tmp")
    with tempfile.TemporaryDirectory(prefix="loglake-cds-kafka-") as tmp:
        broker = EmbeddedKafka.on_free_ports(Path(tmp), java_options=[f"-XX:ArchiveClassesAtExit={dump}",
                                                                      *CDS_QUIET.split()])
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
            admin.create_topics([NewTopic("cds", 1, 1)])["cds"].result(30)
            del admin
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(100):
                producer.produce("cds", str(i).encode(), partition=0)
            producer.flush(30)
            del producer  # gone before the broker: no client left to log its going
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cds"})
            consumer.assign([TopicPartition("cds", 0, 0)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not consumer.consume(100, 0.5):
                pass
            consumer.close()
        finally:
            broker.stop()
    if not dump.exists():
        raise RuntimeError("the broker wrote no archive at its exit")
    dump.replace(target)
    for other in target.parent.glob("kafka-*.jsa"):  # other Kafka builds' (a new version in the cache)
        if other != target:
            other.unlink(missing_ok=True)
    return target, time.monotonic() - t0


KEEP = 3  # archives kept in the cache: this install's and the most recently used others'


def prune(keep: Path) -> list[Path]:
    """Remove the cache's archives of other installs but the ``KEEP - 1`` used last (each is
    some 170 MB, and every reinstalled pyspark makes a new one); the removed paths.

    "Used last" is by access time, which a ``relatime`` mount (the usual default) updates at
    most once a day: among archives used on the same day the order may be wrong, which costs
    at most a remade archive (a minute of ``make setup``), never a wrong one."""
    others = sorted((a for a in keep.parent.glob("spark-*.jsa") if a != keep), key=lambda a: a.stat().st_atime,
                    reverse=True)
    gone = others[KEEP - 1:]
    for archive in gone:
        archive.unlink(missing_ok=True)
        archive.with_suffix(".log").unlink(missing_ok=True)
        shutil.rmtree(archive.with_suffix(""), ignore_errors=True)  # its mirror (hard links: the venv keeps its files)
    return gone


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for maker, who in ((make, "Spark drivers"), (make_kafka, "the embedded broker")):
        try:
            path, seconds = maker(force="--force" in args)
        except (RuntimeError, SetupError, ProcessError) as e:  # an optimisation: its absence costs start-up time
            print(f"cds: not made ({e}); {who} start without it")
            continue
        print(f"cds: {path} ({'made in %.1f s' % seconds if seconds is not None else 'cached'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
