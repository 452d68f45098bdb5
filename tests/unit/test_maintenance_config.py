"""The maintenance policy is validated at load: a short VACUUM retention only on purpose."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from loglake.core import paths
from loglake.core.config import load_config
from loglake.core.errors import ConfigError


@pytest.fixture
def conf(tmp_path) -> Path:
    shutil.copytree(paths.REPO_ROOT / "conf", tmp_path / "conf")
    return tmp_path / "conf"


def set_maintenance(conf: Path, maintenance: dict) -> Path:
    path = conf / "datasets" / "job_views.yaml"
    data = yaml.safe_load(path.read_text())
    data["maintenance"] = maintenance
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_defaults_keep_a_week_and_expire_speed(conf):
    m = load_config(conf).dataset("company_ceos").maintenance  # no maintenance: key, all defaults
    assert (m.vacuum_retention_hours, m.allow_short_vacuum_retention, m.expire_speed, m.zorder_by) == (
        168.0, False, True, [])
    assert load_config(conf).dataset("job_views").maintenance.zorder_by == ["user_id"]


def test_vacuum_below_the_guard_is_refused_naming_the_key(conf):
    path = set_maintenance(conf, {"vacuum_retention_hours": 24})
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    assert e.value.file == str(path)
    assert e.value.key == "maintenance.vacuum_retention_hours"
    assert "24 hours is below the 168-hour guard" in str(e.value)
    assert "allow_short_vacuum_retention: true" in str(e.value)


def test_vacuum_below_the_guard_loads_when_allowed_explicitly(conf):
    set_maintenance(conf, {"vacuum_retention_hours": 24, "allow_short_vacuum_retention": True})
    m = load_config(conf).dataset("job_views").maintenance
    assert (m.vacuum_retention_hours, m.allow_short_vacuum_retention) == (24.0, True)


@pytest.mark.parametrize("maintenance,key", [
    ({"vacuum_retention_hours": -1, "allow_short_vacuum_retention": True}, "maintenance.vacuum_retention_hours"),
    ({"zorder_by": ["user_id", "nope"]}, "maintenance.zorder_by.1"),
    ({"vacuum_hours": 200}, "maintenance.vacuum_hours"),
])
def test_bad_maintenance_keys_are_named(conf, maintenance, key):
    set_maintenance(conf, maintenance)
    with pytest.raises(ConfigError) as e:
        load_config(conf)
    assert e.value.key == key, str(e.value)
