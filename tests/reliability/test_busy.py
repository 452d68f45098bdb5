"""R4 at CI size: streaming with maintenance and batch runs beside it and a reader querying the
serving view all the while (soak/busy.py; `make soak` runs it for 30 minutes)."""

from __future__ import annotations

import json

import pytest

from loglake.testing import Lab
from soak.busy import busy_platform, check_snapshot
from soak.run import SCENARIOS

pytestmark = pytest.mark.reliability

# soak/run.py's CI scale: a batch run at 10 s, maintenance at 20 s (it waits for the batch run's
# lease); the reader pauses 6 s between queries, as four JVMs share the two cores here.
SMALL = SCENARIOS["R4"][2]


@pytest.mark.long
def test_r4_busy_platform_every_query_exact_stream_never_fails_files_drop(tmp_path, kafka_bootstrap, spark):
    # Maintenance expires the speed rows the batch run published while the stream writes and
    # the reader reads.
    out = busy_platform(Lab(tmp_path, kafka_bootstrap, spark=spark), **SMALL)
    (tmp_path / "r4.json").write_text(json.dumps(out.to_dict(), indent=1, default=str))
    assert (out.lost, out.duplicated, out.notes) == (0, 0, []), out.to_dict()
    assert out.exact
    kinds = [r["kind"] for r in out.runs]
    assert kinds.count("maintain") >= 1 and kinds.count("batch") >= 1, out.runs
    assert out.faults == len(out.runs)
    # The reader read the serving view while each writer ran (a count of queries would depend on
    # how fast the machine is: 10 of them took 18.8 s each beside test_cluster in make test-long).
    assert out.queries and not out.runs_without_a_query(), out.to_dict()
    assert out.records >= SMALL["rate"] * SMALL["minutes"] * 60, out.records
    # The speed table's active files dropped at every maintenance run's OPTIMIZE (a note otherwise).
    assert all(r["optimize"]["speed"] for r in out.runs if r["kind"] == "maintain"), out.runs
    assert any(r.get("expired") for r in out.runs if r["kind"] == "maintain"), out.runs  # expiry did happen


def test_the_per_query_check_fails_a_lost_or_doubled_row():
    # 10 offsets [0, 10) of partition 0: 8 served, 2 quarantined below the highest served offset.
    exact = {"p": 0, "n": 8, "nd": 8, "lo": 0, "hi": 10, "nq": 2, "qlo": 3, "nb": 0}
    assert check_snapshot([exact], {0: 0}, {}).problems == []
    lost = check_snapshot([{**exact, "n": 7, "nd": 7}], {0: 0}, {})
    assert lost.lost == 1 and "gap" in lost.problems[0]
    doubled = check_snapshot([{**exact, "n": 9}], {0: 0}, {})
    assert doubled.duplicated == 1 and "twice" in doubled.problems[0]
    both = check_snapshot([{**exact, "n": 9, "nd": 9, "nb": 1}], {0: 0}, {})
    assert both.duplicated == 1 and "both served and quarantined" in both.problems[0]
    down = check_snapshot([exact], {0: 0}, {0: (9, 10)})
    assert down.lost == 1 and "went down" in down.problems[0]
    gone = check_snapshot([], {0: 0}, {0: (8, 10)})
    assert gone.lost == 8
