"""The environment of every Airflow process loglake starts (``airflow_env``): settings from the
environment, not a hand-edited airflow.cfg — the DAGs and plugins are the repo's ``dags/`` and
``plugins/``, the executor is LocalExecutor sized for a small machine, the Spark connection
``loglake_spark`` points at the profile's master, StatsD goes to the platform's exporter, and
LOGLAKE_HOME/CONF/PROFILE are passed through so tasks load the same configuration as the
process that started Airflow. Also where its state lives and its admin password."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from loglake.core import paths
from loglake.core.config import Config
from loglake.core.errors import ProcessError
from loglake.jobs.launch import job_env
from loglake.local.statsd_exporter import statsd_address

DEFAULT_PORT = 8080
SQLITE_BUSY_SECONDS = 60  # how long a metadata DB write waits for another's lock
ADMIN_USER = "admin"
SPARK_CONN_ID = "loglake_spark"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def airflow_home(config: Config) -> Path:
    return config.home / "airflow"


def resolve_port(port: int | None = None) -> int:
    """``port``, else ``$LOGLAKE_AIRFLOW_PORT``, else 8080."""
    if port:
        return int(port)
    env = os.environ.get("LOGLAKE_AIRFLOW_PORT")
    if env:
        if not env.isdigit():
            raise ProcessError(f"LOGLAKE_AIRFLOW_PORT must be a port number, found {env!r}")
        return int(env)
    return DEFAULT_PORT


def airflow_bin() -> str:
    """The ``airflow`` entry point installed next to this interpreter."""
    return str(Path(sys.executable).parent / "airflow")


def password_file(home: Path) -> Path:
    return home / "passwords.json"


def airflow_env(config: Config, port: int | None = None, *, home: Path | None = None,
                dags_paused: bool = True, log_ports: tuple[int, int] = (8793, 8794)) -> dict[str, str]:
    """Environment for every Airflow process (and ``airflow dags test``) of this config.

    ``home`` overrides AIRFLOW_HOME (tests share one metadata DB across configs);
    ``dags_paused`` is whether new DAGs start paused (``up`` unpauses them so the
    scheduled batch runs); ``log_ports`` are where the scheduler and the triggerer
    serve task logs.
    """

    home = Path(home) if home else airflow_home(config)
    port = resolve_port(port)
    env = job_env(config)
    # Only spark-submit children run "under spark-submit"; the operator sets it for them.
    env.pop("LOGLAKE_UNDER_SPARK_SUBMIT", None)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    plugins = str(paths.REPO_ROOT / "plugins")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [plugins, env.get("PYTHONPATH")]))
    env.update({
        "AIRFLOW_HOME": str(home),
        # The scheduler, the dag-processor, the api-server and every task runner write this
        # one file; on a loaded machine a write can wait more than sqlite3's default 5 s for
        # another's lock, and then Airflow answers 500 ("database is locked").
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout={SQLITE_BUSY_SECONDS}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(paths.REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": plugins,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # Two cores: four worker slots; at most two tasks of one DAG (each Spark job
        # uses the cores it is given); runs of one DAG one after another by default.
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "1",
        "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(dags_paused),
        "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",  # user:role
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file(home)),
        # Task processes report to the api-server on *this* port, not the default 8080.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        # New or edited DAG files are picked up within a minute (default: 5 minutes).
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "60",
        "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_ports[0]),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(log_ports[1]),
        f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}": json.dumps(
            {"conn_type": "spark", "host": config.profile.spark.master}),
        # The backfill form's dataset list (DAG files may not read conf/ when parsed).
        "LOGLAKE_DATASETS": ",".join(dataset_names(config)),
    })
    # Airflow's OpenLineage provider: the profile's lineage transport, or off (no warnings).
    lineage = config.profile.lineage
    if lineage is None:
        env["AIRFLOW__OPENLINEAGE__DISABLED"] = "True"
    else:
        env.update({"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(lineage.transport),
                    "AIRFLOW__OPENLINEAGE__NAMESPACE": lineage.namespace})
    env.update(statsd_env(statsd_address(config)))
    return env


def statsd_env(address: tuple[str, int] | None) -> dict[str, str]:
    """Airflow's own metrics by StatsD to ``address`` (statsd_exporter, loglake.local.statsd_exporter;
    None: off): each name once (no legacy names with a DAG or task in them), its variables as
    InfluxDB-style tags, which conf/statsd-mapping.yml turns into labels."""
    if address is None:
        return {}
    return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": address[0],
            "AIRFLOW__METRICS__STATSD_PORT": str(address[1]), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True", "AIRFLOW__METRICS__LEGACY_NAMES_ON": "False"}


def dataset_names(config: Config) -> list[str]:
    """The datasets the DAGs offer: events datasets first (a range backfill applies to them;
    the form's default is the first), then changelogs, each sorted by name."""
    return sorted(config.datasets, key=lambda n: (config.datasets[n].kind != "events", n))


def ensure_password(home: Path) -> str:
    """The admin password, generated on first use and kept (0600) in ``home``."""
    f = password_file(home)
    if f.exists():
        try:
            return json.loads(f.read_text())[ADMIN_USER]
        except (ValueError, KeyError):
            raise ProcessError(f"{f} does not hold a password for {ADMIN_USER!r}: delete it to generate one") from None
    home.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(12)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({ADMIN_USER: password}) + "\n")
    return password
