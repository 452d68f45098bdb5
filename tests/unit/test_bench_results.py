"""``make bench``'s day file when some metrics are measured again (``bench.run --only``): the
other metrics keep the commit they were measured at, and the report says which is which."""

from __future__ import annotations

from bench.run import header, merged

HOST = {"cores": 2, "memory_gib": 23.5, "cpu": "AMD EPYC", "commit": "aaaaaaa", "stack": {}}


def test_metrics_measured_again_carry_their_commit_and_the_others_keep_theirs():
    day = {"date": "2026-11-30", "machine": HOST, "seconds": 100.0, "failures": {"bench.x": "E"},
           "metrics": [{"id": "P1", "value": 1}, {"id": "P5", "value": 2, "commit": "bbbbbbb"}]}
    again = {"date": "2026-11-30", "machine": {**HOST, "commit": "ccccccc"}, "seconds": 10.0, "failures": {},
             "metrics": [day["metrics"][0], day["metrics"][1], {"id": "F2", "value": 3, "commit": "ccccccc"}]}
    doc = merged(day, again)
    assert doc["machine"]["commit"] == "aaaaaaa" and doc["seconds"] == 110.0 and doc["failures"] == {"bench.x": "E"}
    assert [m.get("commit") for m in doc["metrics"]] == ["aaaaaaa", "bbbbbbb", "ccccccc"]
    assert "loglake aaaaaaa (P5: bbbbbbb; F2: ccccccc) ·" in header(doc)


def test_a_whole_run_is_its_own_file():
    run = {"date": "2026-11-30", "machine": HOST, "seconds": 5.0, "failures": {},
           "metrics": [{"id": "P1", "value": 1, "commit": "aaaaaaa"}]}
    assert merged({}, run) is run
    assert "loglake aaaaaaa · " in header(run) and "(" not in header(run).split("·")[1]
