"""The speed job's progress file: written by the query listener's thread and by the main
thread at the end of a run; neither may ever fail the stream."""

from __future__ import annotations

import json
import threading

from loglake.core.config import load_config
from loglake.speed.sizing import Sizing
from loglake.testing import write_conf
from loglake.kafka.admin import PositionCommitter
from loglake.speed.stream import _PositionRecorder


def test_two_threads_keeping_the_progress_file_never_fail(tmp_path):
    config = load_config(write_conf(tmp_path, "localhost:9"), home=tmp_path / "state")
    ds = config.dataset("job_views")
    progress = tmp_path / "run" / "speed-job_views.progress.json"
    progress.parent.mkdir(parents=True)
    recorder = _PositionRecorder(PositionCommitter(config, ds.consumer_group, ds.topic), progress, Sizing(100))
    errors: list[BaseException] = []

    def keep(writer: str) -> None:
        for i in range(400):
            try:
                # No sources: nothing is submitted to Kafka, only the file is kept.
                recorder.record(json.dumps({"id": None, "batchId": i, "writer": writer, "sources": []}))
            except BaseException as e:  # noqa: BLE001 - any failure is the defect
                errors.append(e)
                return

    threads = [threading.Thread(target=keep, args=(w,)) for w in ("listener", "main")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{len(errors)} writer(s) failed, first: {errors[0]!r}"
    assert json.loads(progress.read_text())["batchId"] == 399
    assert [p.name for p in progress.parent.iterdir()] == [progress.name]  # no temporary file left behind
