"""Build spark-submit command lines for loglake's Spark jobs (used by the CLI and DAGs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loglake import paths
from loglake.config import Config


def spark_submit_bin() -> str:
    """The spark-submit shipped in the pyspark wheel of this interpreter's environment."""
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def job_env(config: Config) -> dict[str, str]:
    """Environment for a job process: venv Python for workers, repo on the path, same state."""
    env = dict(os.environ)
    env.update({
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(paths.REPO_ROOT), env.get("PYTHONPATH")])),
        "LOGLAKE_HOME": str(config.home),
        "LOGLAKE_CONF": str(config.conf_dir),
        "LOGLAKE_PROFILE": config.profile_name,
        "LOGLAKE_UNDER_SPARK_SUBMIT": "1",
    })
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def spark_submit(config: Config, job: str, args: list[str]) -> list[str]:
    """``spark-submit`` for ``spark_jobs/<job>.py`` with the profile's master, jars and conf."""
    from spark_jobs.session import spark_conf

    conf = spark_conf(config)
    cmd = [spark_submit_bin(), "--master", config.profile.spark.master,
           "--driver-memory", conf.pop("spark.driver.memory"),
           "--jars", conf.pop("spark.jars"), "--name", f"loglake-{job}"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(paths.REPO_ROOT / "spark_jobs" / f"{job}.py"), *args]


def submit_spec(config: Config, job: str) -> dict:
    """What SparkSubmitOperator needs to run ``spark_jobs/<job>.py`` like ``spark_submit`` does."""
    from spark_jobs.session import spark_conf

    conf = spark_conf(config)
    env = job_env(config)
    keep = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "LOGLAKE_HOME", "LOGLAKE_CONF",
            "LOGLAKE_PROFILE", "LOGLAKE_UNDER_SPARK_SUBMIT", "SPARK_LOCAL_IP", "LOGLAKE_CACHE", "JAVA_HOME", "PATH")
    return {
        "application": str(paths.REPO_ROOT / "spark_jobs" / f"{job}.py"),
        "jars": conf.pop("spark.jars"),
        "driver_memory": conf.pop("spark.driver.memory"),
        "conf": conf,
        "env_vars": {k: env[k] for k in keep if k in env},
        "name": f"loglake-{job}",
        "spark_binary": spark_submit_bin(),
    }
