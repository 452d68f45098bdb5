"""Launching loglake's Spark jobs: Spark settings, spark-submit command lines, and runs.

One place for how a job is submitted — the CLI runs it here (``run_job``), the Airflow
operator takes ``submit_spec`` — so both submit the same application with the same jars,
settings and environment, and read its answer through ``loglake.jobs.protocol``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from loglake.core import paths
from loglake.core.config import Config, ObjectStoreSettings
from loglake.core.errors import JobError, JobFailure, SetupError
from loglake.core.paths import CDS_QUIET, LOGSTORE_JAR, java_version
from loglake.core.processes import wait_for
from loglake.jobs import registry, shared_app
from loglake.jobs.protocol import read_summary_file
from loglake.jobs.requests import JobRequest
from loglake.jobs.summaries import JobSummary
from loglake.leases import current_token


def spark_home() -> Path:
    """The pyspark wheel of this interpreter's environment: Spark's bin/ and jars/."""

    home = paths.pyspark_home()
    if home is None:
        raise SetupError("pyspark is not installed in this interpreter's environment: run `make setup`")
    return home


def spark_submit_bin() -> str:
    """The spark-submit shipped in the pyspark wheel."""
    return str(spark_home() / "bin" / "spark-submit")


def log4j_file() -> Path:
    """The log4j2 file of the conf dir in use, else the repo's (a conf dir may omit it)."""
    own = paths.conf_dir() / "log4j2-spark.properties"
    return own if own.exists() else paths.REPO_ROOT / "conf" / "log4j2-spark.properties"




@functools.lru_cache(maxsize=1)
def cds_archive() -> Path:
    """Where the class-data sharing archive for this Java and this pyspark install lives
    (``loglake.local.cds`` makes it at setup; it may not exist).

    The key holds each of Spark's jars in the order the launcher lists them (the directory's)
    with its size, modification time and inode, as the JVM checks them: a reinstalled pyspark
    with new files under the same names needs another archive (a JVM given the old one would
    start without it, silently). Not the jars' directory: the archive is dumped from hard
    links of these very files under the cache (``cds.mirror``), and a JVM takes a class path
    entry at another path that is the same file. So a fresh clone whose venv links the same
    installed files (``make setup``'s wheelhouse: uv links every install to one unpacked
    wheel) keeps the archive. Where the cache cannot hold hard links of the jars (another
    file system), the archive is dumped from the venv's own paths, and the key holds them."""

    jars_dir = spark_home() / "jars"
    parts = [java_version()]
    for name in os.listdir(jars_dir):  # the launcher's order
        if name.endswith(".jar"):
            stat = (jars_dir / name).stat()
            parts.append(f"{name} {stat.st_size} {stat.st_mtime_ns} {stat.st_ino}")
    if not cds_can_link():
        parts.append(str(spark_home()))
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return paths.cache_home() / "cds" / f"spark-{key}.jsa"


def cds_can_link() -> bool:
    """Whether the cache is on the file system of Spark's jars (hard links between them work)."""

    place = paths.cache_home()
    while not place.exists():
        place = place.parent
    return place.stat().st_dev == (spark_home() / "jars").stat().st_dev


def spark_conf(config: Config) -> dict[str, str]:
    """Spark settings loglake needs (Delta extension and catalog, jars), then the profile's."""
    log4j = f"-Dlog4j2.configurationFile={log4j_file()}"
    # Long-lived drivers (the streams, the shared application) give memory they no longer use
    # back to the machine: a periodic GC when idle, and the heap shrunk to what it holds.
    jvm = f"{log4j} -XX:G1PeriodicGCInterval=15000 -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"
    if cds_archive().exists():  # the driver maps Spark's classes ready-parsed (loglake.local.cds)
        jvm += f" -XX:SharedArchiveFile={cds_archive()} {CDS_QUIET}"
    conf = {
        "spark.jars": ",".join(str(j) for j in paths.jars("spark")),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.memory": config.profile.spark.driver_memory,
        # Python workers must use the venv's interpreter, not whatever python3 is on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # Timestamps are stored and shown in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        # Delta rebuilds a table's state with this many tasks; 50 (the default) is pure
        # overhead for loglake's tables on a few cores.
        "spark.databricks.delta.snapshotPartitions": "2",
        # A JSON object with a repeated key: the last one wins, in from_json and in VARIANT
        # parsing alike (loglake.records.validation relies on both agreeing).
        "spark.sql.variant.allowDuplicateKeys": "true",
        # No stage progress bars: a job's output is its log, a command's output its answer.
        "spark.ui.showConsoleProgress": "false",
        # Warnings and errors only (Spark's INFO start-up chatter drowns what matters).
        "spark.driver.extraJavaOptions": jvm,
    }
    if config.profile.spark.executor_memory:
        conf["spark.executor.memory"] = config.profile.spark.executor_memory
    if not is_local(config):
        conf["spark.executor.extraJavaOptions"] = log4j
    if config.object_store is not None:
        for key, value in object_store_conf(config.object_store).items():
            joiner = _JOINED.get(key)
            conf[key] = f"{conf[key]}{joiner}{value}" if joiner and conf.get(key) else value
    for key, value in config.profile.spark.conf.items():
        # The profile's JVM options come after loglake's (its logging, the class archive), not
        # instead of them; a later option of the same name wins in the JVM. Its class path comes
        # before loglake's (the first class of a name wins), which stays.
        if key in _JAVA_OPTIONS and conf.get(key):
            value = f"{conf[key]} {value}"
        elif key in _CLASS_PATHS and conf.get(key):
            value = f"{value}{os.pathsep}{conf[key]}"
        conf[key] = value
    return conf


_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
_CLASS_PATHS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")
# Settings that are lists: a part added to one is joined to what it holds.
_JOINED = {"spark.jars": ",", **{k: " " for k in _JAVA_OPTIONS}}

# Delta's log store for s3a:// tables: loglake's, which commits with conditional writes
# (jvm/s3-logstore). Delta's default for s3a (S3SingleDriverLogStore) is safe in one JVM only.
S3_LOG_STORE = "io.loglake.storage.S3ConditionalLogStore"
# Spark's checkpoint files on s3a:// created the same way (jvm/s3-logstore): a streaming query that
# lost its lease cannot re-plan a micro-batch another query planned (loglake.speed.stream).
S3_CHECKPOINT_MANAGER = "io.loglake.storage.S3ConditionalCheckpointFileManager"


def object_store_conf(store: ObjectStoreSettings) -> dict[str, str]:
    """Spark settings for an ``s3a://`` lake on ``store``: S3A and the AWS SDK on the class path,
    S3A pointed at the store, loglake's Delta log store for ``s3a://`` tables and its manager of
    streaming checkpoints (both create files with conditional puts; other schemes are left to
    Spark's and Delta's own).

    hadoop-aws and the SDK bundle (``loglake.local.jars``' s3 set) go on the drivers' and
    executors' class path where they lie, not in ``spark.jars``, which copies every jar (the
    bundle is 558 MB) into each executor's work directory, even as ``local:``; a cluster's
    workers have them and pyspark at the same paths (the docker images put them there). The
    log store joins ``spark.jars``: it extends delta-storage, which is there (a class on the
    JVM's own class path cannot see the classes of ``spark.jars``). Credentials are never in
    the settings: with a ``credentials_file``, each JVM reads it through the SDK's profile
    provider, else S3A's default chain applies.
    """
    s3 = paths.jars("s3")
    # The extra class path comes first. It begins as spark-submit's launcher begins a class path
    # (SLF4J's API, then Spark's jars), so Spark's classes come before the SDK bundle's unshaded
    # copies of netty, SLF4J 1.7, httpclient and commons (which would shadow Spark's), and the
    # driver's class path still starts as when the CDS archive was made (which keeps it usable).
    spark_jars = spark_home() / "jars"
    first = [*sorted(spark_jars.glob("slf4j-api-*.jar")), spark_jars / "*"]
    class_path = os.pathsep.join(str(j) for j in [*first, *(j for j in s3 if j.name != LOGSTORE_JAR)])
    conf = {
        "spark.jars": ",".join(str(j) for j in s3 if j.name == LOGSTORE_JAR),
        "spark.driver.extraClassPath": class_path,
        "spark.executor.extraClassPath": class_path,
        "spark.delta.logStore.s3a.impl": S3_LOG_STORE,
        "spark.sql.streaming.checkpointFileManagerClass": S3_CHECKPOINT_MANAGER,
        "spark.hadoop.fs.s3a.endpoint.region": store.region,
        "spark.hadoop.fs.s3a.path.style.access": str(store.path_style).lower(),
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(not (store.endpoint or "").startswith("http://")).lower(),
    }
    if store.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = store.endpoint
    if store.credentials_file:
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = \
            "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider"
        # Read by the SDK in every JVM (drivers and executors): the file's path, not its keys.
        for key in _JAVA_OPTIONS:
            conf[key] = f"-Daws.sharedCredentialsFile={store.credentials_file}"
    return conf


def is_local(config: Config) -> bool:
    """Whether the profile's Spark runs inside the driver (``local[...]``): no executors elsewhere."""
    return config.profile.spark.master.startswith("local")


def loopback(config: Config) -> bool:
    """Driver and executors all on this machine: bind the driver to loopback."""
    master = config.profile.spark.master
    return is_local(config) or master.startswith(("spark://127.0.0.1:", "spark://localhost:"))


def code_archive(config: Config) -> Path:
    """The project's Python code as one zip for ``--py-files``: how it reaches a cluster's
    executors (they do not share the driver's checkout). Named by a hash of its content,
    built once per change under ``<state>/dist``."""

    target = config.home / "dist" / f"loglake-code-{paths.code_digest()}.zip"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for f in paths.code_files():
                z.write(f, str(f.relative_to(paths.REPO_ROOT)))
        tmp.replace(target)
    return target


def job_env(config: Config, spark_submitted: bool = True) -> dict[str, str]:
    """Environment for a job process: venv Python for workers, repo on the path, same state.
    ``spark_submitted``: spark-submit starts it (false: a Spark driver run as a plain Python
    process, which starts its own JVM)."""
    env = dict(os.environ)
    env.update({
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(paths.REPO_ROOT), env.get("PYTHONPATH")])),
        "LOGLAKE_HOME": str(config.home),
        "LOGLAKE_CONF": str(config.conf_dir),
        "LOGLAKE_PROFILE": config.profile_name,
    })
    if spark_submitted:
        env["LOGLAKE_UNDER_SPARK_SUBMIT"] = "1"
    else:
        env.pop("LOGLAKE_UNDER_SPARK_SUBMIT", None)
    if loopback(config):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def start_shared_application(config: Config, wait: float = 0) -> tuple[int, bool]:
    """Start the shared Spark application (``loglake.jobs.shared_app``) unless it runs, supervised
    like a speed stream; (pid, whether started now). With ``wait``, until it answers."""

    managed = shared_app.process(config)
    running = managed.pid()
    if running:
        return running, False
    shared_app.address_file(config).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "loglake.jobs.supervisor",
           *submit_command(config, str(registry.APPLICATIONS["server"].path), [], "loglake-jobs",
                           {"spark.scheduler.mode": "FAIR"})]
    pid = managed.start(cmd, env=job_env(config))
    if wait:
        wait_for(lambda: shared_app.ping(config), wait, "the shared Spark application to answer", interval=0.5,
                 log=managed)
    return pid, True


def application(job: str) -> str:
    """The file spark-submit runs for ``job``."""
    return str(registry.job(job).application)


def spark_submit(config: Config, request: JobRequest) -> list[str]:
    """``spark-submit`` for ``request`` with the profile's master, jars and settings."""
    return submit_command(config, application(request.job), request.argv(), f"loglake-{request.job}")


def submit_command(config: Config, app: str, argv: list[str], name: str,
                   extra: dict[str, str] | None = None) -> list[str]:
    """``spark-submit`` of ``app`` with ``argv``: the profile's master, jars and settings
    (then ``extra``)."""
    conf = {**spark_conf(config), **(extra or {})}
    cmd = [spark_submit_bin(), "--master", config.profile.spark.master,
           "--driver-memory", conf.pop("spark.driver.memory"),
           "--jars", conf.pop("spark.jars"), "--name", name]
    if not is_local(config):
        cmd += ["--py-files", str(code_archive(config))]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [app, *argv]


def submit_spec(config: Config, job: str) -> dict:
    """What SparkSubmitOperator needs to run ``job`` like ``spark_submit`` does.

    The driver's memory travels as ``spark.driver.memory`` in ``conf``: spark-submit's
    launcher sizes the driver JVM from it in client mode, as from ``--driver-memory``.
    """
    conf = spark_conf(config)
    env = job_env(config)
    keep = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "LOGLAKE_HOME", "LOGLAKE_CONF",
            "LOGLAKE_PROFILE", "LOGLAKE_UNDER_SPARK_SUBMIT", "SPARK_LOCAL_IP", "LOGLAKE_CACHE", "JAVA_HOME", "PATH")
    return {
        "application": application(job),
        "py_files": None if is_local(config) else str(code_archive(config)),
        "jars": conf.pop("spark.jars"),
        "conf": conf,
        "env_vars": {k: env[k] for k in keep if k in env},
        "name": f"loglake-{job}",
    }


@dataclass(frozen=True)
class JobOutcome:
    """How a job run ended: exit code, its typed summary when it succeeded, its failure when
    it said why it failed (neither: it died without a word), its log (None: it went elsewhere,
    to an Airflow task's log)."""

    job: str
    code: int
    summary: JobSummary | None
    failure: JobFailure | None
    log: Path | None

    @classmethod
    def of(cls, job: str, code: int, reported: dict | None, log: Path | None = None) -> "JobOutcome":
        said = registry.job(job).parse(reported)
        if isinstance(said, JobFailure):
            return cls(job, code, None, said, log)
        return cls(job, code, said if code == 0 else None, None, log)

    @property
    def ok(self) -> bool:
        return self.summary is not None

    def error(self, dataset: str) -> JobError:
        """The ``JobError`` a caller raises for this outcome when it is not ``ok``."""
        return JobError(self.job, dataset, self.code, self.failure, str(self.log) if self.log else None)


def job_log(config: Config, request: JobRequest) -> Path:
    """Where a CLI-run job's output goes: ``<state>/logs/jobs/<job>-<dataset>-<time>.log``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    return config.home / "logs" / "jobs" / f"{request.job}-{request.dataset}-{stamp}.log"


def run_job(config: Config, request: JobRequest) -> JobOutcome:
    """Run ``request`` and wait: in the shared Spark application when it runs
    (``loglake.jobs.shared_app``), else under spark-submit. Its output goes to a log file (JVM and
    Spark warnings included), its answer comes back as the summary."""

    log = job_log(config, request)
    log.parent.mkdir(parents=True, exist_ok=True)
    if request.job in shared_app.SERVED:
        with open(log, "a") as out:
            def output(text: str) -> None:
                out.write(text)
                out.flush()

            shared = shared_app.submit(config, request, output, lease=current_token())
        if shared is not None:
            return JobOutcome.of(request.job, shared[0], shared[1], log)
    summary_file = log.with_suffix(".summary")
    request = request.with_summary_file(summary_file)
    with open(log, "ab") as out:
        proc = subprocess.run(spark_submit(config, request), env=job_env(config), stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    summary = read_summary_file(summary_file)
    summary_file.unlink(missing_ok=True)
    return JobOutcome.of(request.job, proc.returncode, summary, log)
