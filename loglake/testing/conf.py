"""Throwaway configurations for tests, benchmarks and soak scenarios.

``write_conf`` writes a conf/ directory holding the repo's datasets on topics of their
own and a profile pointed at a given broker, so a test or a benchmark never touches the
user's topics, tables or a running ``make up``; ``make_config`` loads one with a state
directory beside it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from loglake.core import paths
from loglake.core.config import Config, load_config

# JVM options for the Spark drivers and executors of every conf written here (``java_options``
# overrides it). The test suite sets ``-XX:TieredStopAtLevel=1`` here (tests/conftest.py): its
# JVMs are short-lived and its data small, so the optimising compiler's work would never pay
# back on 2 cores; benchmarks and soak keep the default, the JVM as users run it.
JAVA_OPTIONS = ""

# The partition count of every dataset of a conf written here, instead of its repo file's (a test's
# ``datasets`` still overrides it); None keeps the repo's (job_views 6, company_ceos 3). The test
# suite sets 2 (tests/conftest.py): every test still reads and writes more than one partition, and
# each Kafka read, Delta write and audit has a third of job_views' tasks and files (two thirds of
# company_ceos'); benchmarks and soak
# keep the repo's counts.
PARTITIONS: int | None = None

# What a config names as its broker when it needs none (a Spark session's settings, Airflow's
# environment): port 9 is "discard", where no broker ever answers.
NO_BROKER = "localhost:9"


def write_conf(root: Path, bootstrap: str, *, speed: dict | None = None, topic_suffix: str | None = None,
               datasets: dict[str, dict] | None = None, spark: dict | None = None,
               extra_datasets: dict[str, dict] | None = None, kafka: dict | None = None,
               local_cluster: dict | None = None, java_options: str | None = None,
               registry: str | dict | None = None, lake: dict | None = None, metrics: dict | None = None,
               lineage: dict | None = None, erasure: dict | None = None) -> Path:
    """A conf/ directory for one test: the repo's datasets on topics of their own.

    ``datasets`` maps a dataset name to keys replacing those of its repo file (``quality``, ...);
    ``spark`` holds profile ``spark`` keys (``conf`` entries are merged), ``kafka`` more
    profile ``kafka`` keys, ``local_cluster`` the profile's local cluster; ``extra_datasets``
    adds dataset files (name → file content) beside the repo's; ``java_options`` go to the
    Spark drivers and executors after loglake's own (default: ``JAVA_OPTIONS``); ``registry``
    the URL of the profile's schema registry (or its whole ``registry`` section); ``lake`` the
    profile's ``lake`` section (an ``s3a://`` root and its ``object_store``); ``metrics`` more of
    its ``metrics`` keys (the platform's exporter on a free port by default); ``lineage`` its
    ``lineage`` section (OpenLineage events); ``erasure`` its ``erasure`` section.
    """
    conf = root / "conf"
    (conf / "datasets").mkdir(parents=True, exist_ok=True)
    suffix = topic_suffix or uuid.uuid4().hex[:8]
    profile = {
        "kafka": {"bootstrap_servers": bootstrap, "embedded": False},
        "spark": {"master": "local[2]", "driver_memory": "1g",
                  "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                           "spark.sql.adaptive.enabled": "false"}},
        "speed": {"trigger_interval": "500 milliseconds", "max_offsets_per_trigger": 100000, **(speed or {})},
        "metrics": {"port": 0, "statsd_port": 0, **(metrics or {})},
    }
    java_options = JAVA_OPTIONS if java_options is None else java_options
    if java_options:
        profile["spark"]["conf"].update({"spark.driver.extraJavaOptions": java_options,
                                         "spark.executor.extraJavaOptions": java_options})
    profile["kafka"].update(kafka or {})
    if local_cluster is not None:
        profile["local_cluster"] = local_cluster
    if lake is not None:
        profile["lake"] = lake
    if lineage is not None:
        profile["lineage"] = lineage
    if erasure is not None:
        profile["erasure"] = erasure
    if registry is not None:
        profile["registry"] = registry if isinstance(registry, dict) else {"url": registry, "retry_seconds": 60}
    for k, v in (spark or {}).items():
        profile["spark"][k] = {**profile["spark"]["conf"], **v} if k == "conf" else v
    (conf / "loglake.yaml").write_text(yaml.safe_dump({"default_profile": "test", "profiles": {"test": profile}}))
    for src in (paths.REPO_ROOT / "conf" / "datasets").glob("*.yaml"):
        data = yaml.safe_load(src.read_text())
        data["topic"] = f"{src.stem}-{suffix}"
        if PARTITIONS:
            data["partitions"] = PARTITIONS
        data.update((datasets or {}).get(src.stem, {}))
        (conf / "datasets" / src.name).write_text(yaml.safe_dump(data, sort_keys=False))
        code = src.with_suffix(".py")  # the dataset's transform beside it
        if code.is_file():
            (conf / "datasets" / code.name).write_text(code.read_text())
    for name, data in (extra_datasets or {}).items():
        data = {"topic": f"{name}-{suffix}", **data}
        (conf / "datasets" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return conf


def make_config(root: Path, bootstrap: str, **conf_kwargs) -> Config:
    """A loaded config of its own: ``root/conf`` (``write_conf``'s keyword arguments) and the
    state directory ``root/state``."""
    return load_config(write_conf(root, bootstrap, **conf_kwargs), home=root / "state")
