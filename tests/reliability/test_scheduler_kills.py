"""R7 (soak/airflow_faults.py) at CI size: the Airflow scheduler SIGKILLed during a
multi-range backfill through the real scheduler and LocalExecutor; `make soak` runs it
with five kills at full size."""

from __future__ import annotations

import pytest

from loglake.testing import Lab
from soak.airflow_faults import scheduler_kills

pytestmark = [pytest.mark.reliability, pytest.mark.long]


def test_r7_scheduler_killed_during_a_backfill_every_range_once_and_the_run_completes(tmp_path, kafka_bootstrap):
    out = scheduler_kills(Lab(tmp_path, kafka_bootstrap), kills=1, records=600, ranges=4)
    print(out.to_dict())
    # notes: the run's end state, the ledger (each range written and published once by the
    # run), and any process of Airflow left running after it was stopped.
    assert (out.faults, out.lost, out.duplicated, out.notes) == (1, 0, 0, []), out.to_dict()
    assert any(line.startswith("run success:") for line in out.info), out.info
    assert len(out.recovery_seconds) == 1 and 0 < out.recovery_seconds[0] <= 60, out.recovery_seconds
