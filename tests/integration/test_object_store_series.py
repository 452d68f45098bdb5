"""The metrics' time series of an ``s3a://`` lake (loglake.observe.series): kept on the lake's
object store (versitygw, a real S3 server), since the processes that write it — speed streams,
the jobs' drivers, the exporter — share no filesystem on separate hosts."""

from __future__ import annotations

import time

from loglake.core import objectstore
from loglake.observe import series
from loglake.testing.series_writers import micro_batches_from_processes


def _objects(config) -> list[str]:
    return sorted(objectstore.listing(config.object_store, f"{series.store_root(config)}/job_views/"))


def test_processes_each_write_their_own_objects_and_every_event_is_read(store_config, tmp_path):
    config = store_config
    assert series.store_root(config) == f"{config.lake_root}/_loglake_metrics/series"
    micro_batches_from_processes(tmp_path, "job_views", processes=3, each=60)
    assert not series.path(config, "job_views").exists()  # nothing under the state directory
    objects = _objects(config)
    writers = {uri.rsplit("/", 1)[1].split("-", 1)[1] for uri in objects}
    assert len(writers) == 3 and all("/events/" in uri for uri in objects)
    evts = series.events(config, "job_views")
    assert len(evts) == 180 and len({e["batch"] for e in evts}) == 180
    assert [e["t"] for e in evts] == sorted(e["t"] for e in evts)
    t = series.totals(evts)
    assert t["records"]["speed"] == 540 and t["quarantined"]["speed"] == {"bad_json": 180}
    # This process's own events, recorded after those: read with the others'.
    series.record(config, "job_views", "job", job="quality", run_id="r1", ok=True, seconds=3.0, published=True,
                  published_records=5)
    assert series.totals(series.events(config, "job_views"))["records"] == {"speed": 540, "batch": 5}


def test_compaction_folds_old_windows_into_the_base_and_counts_each_event_once(store_config, monkeypatch):
    config = store_config
    w = series.WINDOW_SECONDS
    now = time.time() // w * w
    for i, age in enumerate((5 * w, 4 * w, 3 * w, 2 * w, w / 2)):
        series.record(config, "job_views", "micro_batch", at=now - age, records=10 + i,
                      quarantined={"null_key": i}, seconds=float(i))
    series.record(config, "job_views", "job", at=now - 4.5 * w, job="batch", run_id="r1", ok=True, seconds=40.0,
                  records=7, quarantined={"bad_json": 2}, published=True)
    before = series.totals(series.events(config, "job_views"))
    kept_since = series.events(config, "job_views", since=now - w)
    assert [e["kind"] for e in kept_since] == ["micro_batch"]
    cutoff = now - 2.5 * w
    old = [u for u in _objects(config) if "/events/" in u and int(u.rsplit("/", 1)[1][:10]) + w <= cutoff]
    assert len(old) == 2  # the windows wholly before the cutoff (the one at 3w straddles it: kept)
    texts = {u: objectstore.read_text(config.object_store, u) for u in old}
    assert series.compact(config, "job_views", keep_seconds=2.5 * w, now=now) == 4  # ages 5w, 4.5w, 4w, 3w
    objects = _objects(config)
    assert f"{series.store_root(config)}/job_views/base.json" in objects
    assert not set(old) & set(objects)  # the folded windows are gone
    after = series.totals(series.events(config, "job_views"))
    assert after == before and after["last_publish"] == now - 4.5 * w
    # A compaction that died between writing the base and deleting the windows left them behind:
    # they are not counted again.
    for uri, text in texts.items():
        objectstore.put_text(config.object_store, uri, text)
    assert series.totals(series.events(config, "job_views")) == before
    # Two exporters compacting at once: the one whose base is stale writes nothing.
    other = series._ObjectSeries()
    base_uri = f"{series.store_root(config)}/job_views/base.json"
    _base, stale = objectstore.get_json(config.object_store, base_uri)
    assert series.compact(config, "job_views", keep_seconds=1.5 * w, now=now) == 1  # age 2w
    read = objectstore.get_json
    monkeypatch.setattr(objectstore, "get_json",
                        lambda store, uri: (read(store, uri)[0], stale) if uri == base_uri else read(store, uri))
    assert other.compact(config.object_store, f"{series.store_root(config)}/job_views", now) == 0
    monkeypatch.undo()
    assert series.totals(series.events(config, "job_views")) == before


def test_a_read_that_a_compaction_overtakes_counts_every_event_once(store_config, monkeypatch):
    """A reader lists the windows while another exporter compacts: the events folded into the
    new base and the windows deleted under it are each counted once (a counter must not dip:
    Prometheus takes a dip for a reset). Independent count: the events recorded."""
    config = store_config
    w = series.WINDOW_SECONDS
    now = time.time() // w * w
    for i, age in enumerate((5 * w, 4 * w, 3 * w, 2 * w, w / 2)):
        series.record(config, "job_views", "micro_batch", at=now - age, records=10 ** i, quarantined={}, seconds=1.0)
    recorded = sum(10 ** i for i in range(5))
    listing = objectstore.listing
    overtaken = []

    def listing_while_another_compacts(store, prefix: str):
        # Between this reader's first look and its listing, another exporter folds and deletes.
        if not overtaken and prefix.endswith("/events/"):
            overtaken.append(True)
            monkeypatch.setattr(objectstore, "listing", listing)
            assert series.compact(config, "job_views", keep_seconds=2.5 * w, now=now) == 3
        return listing(store, prefix)

    monkeypatch.setattr(objectstore, "listing", listing_while_another_compacts)
    got = series.totals(series.events(config, "job_views"))["records"]["speed"]
    assert overtaken and got == recorded, (got, recorded)
