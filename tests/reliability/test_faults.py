"""The fault scenarios (soak/scenarios.py) at CI size; `make soak` runs them at full size."""

from __future__ import annotations

import pytest

from soak.scenarios import Lab, speed_kills

pytestmark = pytest.mark.reliability


@pytest.fixture
def lab(tmp_path, kafka_bootstrap) -> Lab:
    return Lab(tmp_path, kafka_bootstrap)


def test_r1_speed_job_killed_repeatedly_loses_and_doubles_nothing(lab):
    out = speed_kills(lab, records=6000, kills=2, seed=3)
    assert out.faults == 2 and out.records == 6000
    assert (out.lost, out.duplicated) == (0, 0), out.to_dict()
    assert len(out.recovery_seconds) == 2 and all(0 < s < 300 for s in out.recovery_seconds)
