"""``Follower.current`` against a scripted registry client: a subject it read before that the
registry answers it does not know (404) is waited out like an outage, within one
``registry.retry_seconds``; a subject never read gets the 404 at once. The real registry across
a restart: tests/integration/test_registry_restart.py."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

import loglake.schemaregistry as registry
from loglake.core.errors import ConfigError, RegistryUnavailableError
from loglake.schemaregistry.resolve import Follower
from loglake.testing.conf import NO_BROKER, make_config

# JSON Schema: which versions the tables take is the same question for every format, and only
# Avro's is asked in a JVM (none in this tier).
V1 = {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}
V2 = {**V1, "properties": {**V1["properties"], "channel": {"type": ["null", "string"]}}}
GONE = SchemaRegistryError(404, 40401, "No artifact with ID 'orders-value' in group 'null' was found.")


class Scripted:
    """A registry client whose ``get_versions`` answers from a script (a list, or an error to
    raise), the last answer repeated; ``get_version`` from the schemas registered."""

    def __init__(self, script, schemas=(V1, V2)):
        self.script, self.schemas, self.asked, self.read = list(script), schemas, 0, 0

    def get_versions(self, subject):
        self.asked += 1
        answer = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def get_version(self, subject, n):
        self.read += 1
        return SimpleNamespace(version=n, schema_id=100 + n,
                               schema=SimpleNamespace(schema_type="JSON", schema_str=json.dumps(self.schemas[n - 1])))


@pytest.fixture
def follow(tmp_path, monkeypatch):
    """A Follower of dataset orders (json-schema) on a profile whose registry waits ``retry_seconds``,
    reading through ``client``."""
    def make(client: Scripted, retry_seconds: float = 20.0) -> Follower:
        config = make_config(tmp_path, NO_BROKER, registry={"url": "http://127.0.0.1:9/apis/ccompat/v7",
                                                            "retry_seconds": retry_seconds},
                             extra_datasets={"orders": {"kind": "events", "partitions": 1, "key": "order_id",
                                                        "format": "json-schema"}})
        monkeypatch.setattr(registry, "client", lambda config: client)
        return Follower(config, config.dataset("orders"))
    return make


def test_a_subject_read_before_answered_as_not_there_is_waited_out_with_one_line(follow, capsys):
    client = Scripted([[1], GONE, GONE, GONE, [1]])
    follower = follow(client)
    first, changed = follower.current()
    assert changed and first.registry.version == 1
    again, changed = follower.current()
    assert (again, changed) == (first, False) and client.asked == 5
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"loglake: orders: the schema registry at http://127.0.0.1:9/apis/ccompat/v7 answers that subject "
                    f"{first.subject_name} (version 1 read before) is not there; waiting up to 20s for it as for an "
                    "outage"]


def test_an_outage_then_a_missing_subject_then_a_new_version_is_one_wait(follow):
    client = Scripted([[1], ConnectionError("refused"), GONE, ConnectionError("refused"), [1, 2]])
    follower = follow(client)
    follower.current()
    now, changed = follower.current()
    assert changed and now.registry.version == 2 and "channel" in now.fields


def test_a_subject_still_missing_after_retry_seconds_is_a_config_error_naming_it(follow, capsys):
    follower = follow(Scripted([[1, 2], GONE]), retry_seconds=2)
    follower.current()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"\(versions 1, 2 read before\) is not in the schema registry at .*, still "
                                          r"not after 2s: it was deleted, or the registry lost its state") as e:
        follower.current()
    assert e.value.key == "datasets.orders.subject" and 2 <= time.monotonic() - t0 < 10


def test_an_outage_longer_than_retry_seconds_still_fails_as_an_outage(follow):
    follower = follow(Scripted([[1], GONE, ConnectionError("refused")]), retry_seconds=1.5)
    follower.current()
    t0 = time.monotonic()
    with pytest.raises(RegistryUnavailableError):
        follower.current()
    assert time.monotonic() - t0 < 10  # one budget for both, not one each


def test_a_subject_never_read_gets_the_404_at_once(follow):
    client = Scripted([GONE])
    follower = follow(client)
    t0 = time.monotonic()
    with pytest.raises(SchemaRegistryError) as e:
        follower.current()
    assert e.value.http_status_code == 404 and client.asked == 1 and time.monotonic() - t0 < 1


def test_a_dataset_resolved_at_the_jobs_start_is_followed_from_there(follow):
    """The speed job's dataset comes resolved (``loglake.jobs.entry.execute``): its stream's
    follower asks only for the version numbers, and reads no version again while they stay."""
    client = Scripted([[1, 2]])
    resolved, _ = follow(client).current()  # as the job's start resolves it
    asked, read = client.asked, client.read
    assert read == 2 and resolved.registry.version == 2
    seeded = Follower(follow(client).config, resolved)
    assert seeded.current() == (resolved, False)
    assert (client.asked, client.read) == (asked + 1, read)
    client.script = [[1, 2, 3]]
    client.schemas = (V1, V2, {**V2, "properties": {**V2["properties"], "note": {"type": ["null", "string"]}}})
    now, changed = seeded.current()  # a new version: only it is read
    assert changed and now.registry.version == 3 and client.read == read + 1
