"""The fault scenarios (soak/scenarios.py) at CI size; `make soak` runs them at full size.

Each scenario reports offsets lost and duplicated and, in ``notes``, every other way it
found the platform wrong; a scenario passes with none of either.
"""

from __future__ import annotations

import pytest

from loglake.testing import Lab
from soak.scenarios import broker_faults, malformed_kinds, recompute_killed, retention_loss, speed_kills

pytestmark = pytest.mark.reliability


@pytest.fixture
def lab(tmp_path, kafka_bootstrap, spark) -> Lab:
    return Lab(tmp_path, kafka_bootstrap, spark=spark)


def passed(out) -> None:
    assert (out.lost, out.duplicated, out.notes) == (0, 0, []), out.to_dict()


def test_r1_speed_job_killed_repeatedly_loses_and_doubles_nothing(lab):
    out = speed_kills(lab, records=6000, kills=2, seed=3)
    passed(out)
    assert out.faults == 2 and out.records == 6000
    assert len(out.recovery_seconds) == 2 and all(0 < s < 300 for s in out.recovery_seconds)


@pytest.mark.long
def test_r2_broker_killed_and_stopped_during_ingest_every_acknowledged_record_once(lab):
    out = broker_faults(lab, records=5000, kills=1, stops=1, seed=2)
    passed(out)
    assert out.faults == 2 and out.records == 5000
    assert len(out.recovery_seconds) == 2 and all(s <= 120 for s in out.recovery_seconds), out.recovery_seconds


@pytest.mark.long
def test_r3_retention_loss_is_loud_local_and_recovered_only_by_accept_loss(lab):
    out = retention_loss(lab, records=900)
    passed(out)
    assert out.faults >= 1 and len(out.recovery_seconds) == 2


def test_r5_every_kind_of_odd_record_lands_where_its_reason_says(lab):
    out = malformed_kinds(lab, records=3000, per_kind=25)
    passed(out)
    assert out.records == 3000 and out.faults == 250


# make test-long only: a fault scenario (a recompute killed mid-write); a range recomputed twice being
# identical is in make test (test_batch).
@pytest.mark.long
def test_r6_a_range_recomputed_twice_once_killed_mid_write_is_identical(lab):
    out = recompute_killed(lab, records=3000)
    passed(out)
    assert out.faults == 1 and len(out.recovery_seconds) == 2
