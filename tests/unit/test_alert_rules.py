"""The shipped alerting rules (docker/prometheus/loglake-alerts.yml) under Prometheus's own
rule tests: ``promtool test rules`` with docker/prometheus/loglake-alerts.test.yml, series in
as the exporter serves them, alerts out — each rule firing when it should and silent when it
should be. promtool is Debian's ``prometheus`` package's (``make setup-test``)."""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from loglake.core.paths import REPO_ROOT

RULES = REPO_ROOT / "docker" / "prometheus" / "loglake-alerts.yml"
TESTS = RULES.with_name("loglake-alerts.test.yml")


def promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    assert exe, "promtool is missing: `make setup-test` installs Debian's prometheus package"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def test_the_rules_check():
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_each_rule_fires_when_it_should_and_is_silent_when_it_should_be():
    r = promtool("test", "rules", str(TESTS))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_every_rule_has_a_test_that_fires_it_and_one_that_stays_silent():
    rules = {rule["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for rule in g["rules"]}
    fired, silent = set(), set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    assert fired == rules and silent == rules, (sorted(rules - fired), sorted(rules - silent))


def test_every_threshold_a_rule_reads_is_one_the_exporter_serves():
    from loglake.core.config import Config, Profile
    from loglake.observe.exporter import threshold_families

    text = RULES.read_text()
    wanted = set(re.findall(r'loglake_alert_threshold\{alert="(\w+)"\}', text))
    config = Config("t", Profile.model_validate({}), {}, home=REPO_ROOT / ".nonexistent", conf_dir=REPO_ROOT)
    served = {s.labels["alert"] for f in threshold_families(config) for s in f.samples}
    assert wanted and wanted <= served, sorted(wanted - served)
    assert not re.search(r"[<>]=?\s*\d{3,}", text), "a threshold written into the rules instead of read"
