"""loglake.testing, the environment tests, benchmarks and soak share: no broker, no JVM.

What it writes must be what the code under test reads (a conf that loads, with the repo's
datasets and their code on topics of their own), and what the benchmarks count must match
what they produce (``bad_count`` against the records ``produce`` sends).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from loglake.core import paths
from loglake.core.config import load_config
from loglake.testing import NO_BROKER, command_env, config_environment, make_config, run_loglake, sigkill, write_conf
from loglake.testing.workload import BAD_EVERY, bad_count, dataset_file, pool


def test_a_written_conf_is_the_repos_datasets_on_topics_of_their_own(tmp_path):
    repo = load_config(paths.REPO_ROOT / "conf", home=tmp_path / "repo-state")
    conf = write_conf(tmp_path / "a", NO_BROKER, topic_suffix="t1", datasets={"job_views": {"partitions": 2}},
                      extra_datasets={"bench_events": dataset_file(3)}, java_options="-Xss2m")
    config = load_config(conf, home=tmp_path / "state")
    assert set(config.datasets) == set(repo.datasets) | {"bench_events"}
    for name, ds in repo.datasets.items():
        mine = config.dataset(name)
        assert mine.topic == f"{name}-t1" != ds.topic
        assert mine.schema_ == ds.schema_ and mine.kind == ds.kind
        assert (mine.code is None) == (ds.code is None)  # the transform beside the conf came along
        if ds.code is not None:
            code = Path(mine.code)
            assert code.parent == conf.resolve() / "datasets" and code.read_text() == Path(ds.code).read_text()
    assert config.dataset("job_views").partitions == 2 and config.dataset("bench_events").partitions == 3
    assert config.profile.kafka.bootstrap_servers == NO_BROKER
    assert config.profile.spark.conf["spark.driver.extraJavaOptions"] == "-Xss2m"
    # Two confs never share a topic, so tests never read each other's records.
    other = make_config(tmp_path / "b", NO_BROKER)
    assert not {d.topic for d in other.datasets.values()} & {d.topic for d in config.datasets.values()}


def test_bad_count_is_the_malformed_records_produce_sends():
    records = pool(200)
    assert len({v for _k, v in records}) == len(records) and records == pool(200)  # distinct, repeatable
    assert all(abs(len(v) - 200) <= 2 for _k, v in records)

    def malformed(count: int) -> int:
        return sum(isinstance(json.loads(records[i % len(records)][1])["user_id"], str) for i in range(count))

    for count in (0, BAD_EVERY - 1, BAD_EVERY, 2 * len(records) + BAD_EVERY + 7, 10_001):
        assert bad_count(count) == malformed(count), count


def test_the_command_runs_on_the_tests_config_and_the_environment_comes_back(tmp_path):
    config = make_config(tmp_path, NO_BROKER, extra_datasets={"only_here": dataset_file(1)})
    env = command_env(config, LOGLAKE_EXTRA="1")
    assert (env["LOGLAKE_CONF"], env["LOGLAKE_HOME"], env["LOGLAKE_EXTRA"]) == (
        str(config.conf_dir), str(config.home), "1")
    refused = run_loglake(config, "batch", "nosuch", timeout=120)  # refused before Kafka is asked
    assert refused.returncode != 0 and "nosuch" in refused.stderr and "only_here" in refused.stderr, refused.stderr
    before = os.environ.get("LOGLAKE_CONF")
    with config_environment(config):
        assert os.environ["LOGLAKE_CONF"] == str(config.conf_dir)
    assert os.environ.get("LOGLAKE_CONF") == before


def test_sigkill_is_a_crash_and_counts_what_was_still_there():
    child = subprocess.Popen(["sleep", "60"])
    assert sigkill([child.pid]) == 1
    assert child.wait(10) == -9
    assert sigkill([child.pid]) == 0  # gone (reaped) already
