"""`loglake status` against a deployment reads its services from the deployment's own command
(``deployment.services_command``, ``LOGLAKE_SERVICES_COMMAND``; issue 45, item 4)."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from loglake.core.config import load_config
from loglake.core.errors import ConfigError, ProcessError
from loglake.local.stack import deployment_services, processes
from loglake.testing.conf import write_conf


def _command(script: str) -> str:
    return shlex.join([sys.executable, "-c", script])


def test_the_services_come_from_the_deployments_command(tmp_path, monkeypatch):
    conf = write_conf(tmp_path, "localhost:9")
    assert load_config(conf, home=tmp_path).profile.deployment.services_command is None
    said = [{"name": "kafka-1", "running": True, "state": "healthy", "detail": "Up 2 minutes (healthy)"},
            {"name": "speed-job-views", "running": False, "detail": "exited (1)"}]
    monkeypatch.setenv("LOGLAKE_SERVICES_COMMAND", _command(f"print({json.dumps(json.dumps(said))})"))
    config = load_config(conf, home=tmp_path)
    rows, cluster, kafka_up = processes(config)
    assert (cluster, kafka_up) == (None, True)
    assert [(r.name, r.pid, r.running) for r in rows] == [("kafka-1", None, True), ("speed-job-views", None, False)]
    assert rows[0].line().split() == ["kafka-1", "healthy", "Up", "2", "minutes", "(healthy)"]
    assert rows[1].line().split()[:3] == ["speed-job-views", "not", "running"]


def test_a_command_that_fails_or_says_no_list_is_an_error_naming_it(tmp_path, monkeypatch):
    conf = write_conf(tmp_path, "localhost:9")
    monkeypatch.setenv("LOGLAKE_SERVICES_COMMAND", _command("import sys; sys.exit('no such project')"))
    with pytest.raises(ProcessError, match=r"deployment.services_command .* exited 1: no such project"):
        deployment_services(load_config(conf, home=tmp_path))
    monkeypatch.setenv("LOGLAKE_SERVICES_COMMAND", _command("print('up')"))
    with pytest.raises(ProcessError, match="printed no JSON list"):
        deployment_services(load_config(conf, home=tmp_path))
    monkeypatch.setenv("LOGLAKE_SERVICES_COMMAND", "python 'unclosed")
    with pytest.raises(ConfigError) as e:
        load_config(conf, home=tmp_path)
    assert e.value.key == "deployment.services_command" and "LOGLAKE_SERVICES_COMMAND" in str(e.value)


def test_up_and_down_act_on_this_host_only_and_are_refused_for_a_deployment(tmp_path, monkeypatch):
    from loglake.local.stack import down, up

    conf = write_conf(tmp_path, "localhost:9")
    monkeypatch.setenv("LOGLAKE_SERVICES_COMMAND", _command("print('[]')"))
    config = load_config(conf, home=tmp_path)
    for action in (up, down):
        with pytest.raises(ConfigError, match=rf"use the deployment's .*docker/stack.py {action.__name__}"):
            action(config)
