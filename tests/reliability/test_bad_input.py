"""R8: bad operator input is refused at the edge, naming the field; nothing is written."""

from __future__ import annotations

import pytest

from loglake.core import paths
from loglake.testing import Lab
from soak.scenarios import bad_input

pytestmark = pytest.mark.reliability


def test_r8_bad_operator_input_is_refused_naming_the_field(tmp_path, kafka_bootstrap, monkeypatch):
    monkeypatch.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    for key in ("LOGLAKE_CONF", "LOGLAKE_HOME"):
        monkeypatch.setenv(key, "")  # bad_input sets them for the DAG's task body; restored after
    out = bad_input(Lab(tmp_path, kafka_bootstrap))
    assert out.faults == 23
    assert out.notes == []
