"""The text of ``loglake status`` (pure: no broker, no tables)."""

from __future__ import annotations

import pytest

from loglake.core.config import load_config
from loglake.core import paths
from loglake.ledger.results import QualityRecord
from loglake.ops.status import DatasetStatus, PartitionStatus, TableStatus, format_duration, format_status


@pytest.mark.parametrize("seconds, text", [
    (None, "-"), (0, "0.0s"), (4.26, "4.3s"), (59.9, "59.9s"), (61, "1m 1s"), (3600 * 5 + 720, "5h 12m"),
    (7 * 86400, "7d 0h"), (86400 * 2 + 3600 * 3 + 5, "2d 3h"), (-300, "overdue 5m 0s"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_format_status_keeps_the_partition_line_and_adds_the_new_numbers():
    ds = load_config(paths.REPO_ROOT / "conf", profile="local").dataset("job_views")
    parts = [PartitionStatus(0, 0, 100, 100, 40, lag_seconds=0.0, oldest_unprocessed=40, retention_seconds=90000),
             PartitionStatus(1, 5, 50, None, None)]
    st = DatasetStatus("job_views", ds.topic, "events", parts, 604800000, "delete",
                       QualityRecord(run_id="r1", validated_at="2026-11-23T10:00:00", published=False,
                                     expectations=3, failed=["expect_x(user_id)"], warned=[]),
                       None, [TableStatus("speed", "speed.job_views", "/l/speed/job_views", 7, 3),
                              TableStatus("batch", "batch.job_views", "/l/batch/job_views", None, None)],
                       writer={"operation": "backfill", "run_id": "bf-1", "pid": 42, "host": "h",
                               "acquired_at": "2026-11-23T10:00:00Z", "expires_at": "2026-11-23T10:01:00Z"},
                       lost=[{"partition": 1, "start": 0, "end": 5, "reason": "weekend outage",
                              "recorded_by": "ops@h", "committed_at": "2026-11-23T09:00:00"}])
    lines = format_status(ds, st)
    assert lines[0] == f"job_views ({ds.topic}):"
    assert lines[1] == ("  [0] end 100  speed position 100 (lag 0, 0.0s)  batch watermark 40 (behind 60)  "
                        "retention deletes the oldest unprocessed offset in 1d 1h")
    assert lines[2].startswith("  [1] end 50  speed position - (lag -)  batch watermark - (behind 45)  ")
    assert lines[3:] == [
        "  retention 7d 0h",
        "  quality: FAILED (3 expectations) at 2026-11-23T10:00:00, run r1; failed: expect_x(user_id)",
        "  audit: no audit yet",
        "  tables: speed.job_views v7 (3 files), batch.job_views no table yet",
        "  writer: backfill run bf-1 (pid 42 on h, since 2026-11-23T10:00:00Z), lease until 2026-11-23T10:01:00Z",
        "  accepted loss: [1] offsets [0, 5) (5 offsets) accepted by ops@h at 2026-11-23T09:00:00: weekend outage",
    ]
    assert "\n".join(lines).count("lag 0") == 1
    assert DatasetStatus.to_dict(st)["partitions"][0]["speed_lag"] == 0
