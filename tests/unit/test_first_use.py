"""What ``make setup`` leaves to first use (``loglake.local.fetch``): the embedded schema registry
is started, and so fetched, by ``loglake up`` only for a dataset in a registry format."""

from __future__ import annotations

from loglake.local.stack import registry_wanted
from loglake.testing import NO_BROKER, make_config


def test_up_starts_the_embedded_registry_only_for_a_dataset_in_a_registry_format(tmp_path):
    registry = {"url": "http://127.0.0.1:1/apis/ccompat/v7", "embedded": True}
    json_only = make_config(tmp_path / "json", NO_BROKER, registry=registry)
    assert not any(ds.in_registry for ds in json_only.datasets.values())
    assert registry_wanted(json_only) is False

    avro = make_config(tmp_path / "avro", NO_BROKER, registry=registry, extra_datasets={
        "clicks": {"kind": "events", "partitions": 1, "key": "user_id", "format": "avro"}})
    assert registry_wanted(avro) is True

    # No embedded registry (an external one, or none): start_registry says which, as before.
    external = make_config(tmp_path / "external", NO_BROKER,
                           registry={"url": "http://127.0.0.1:1/apis/ccompat/v7", "embedded": False})
    assert registry_wanted(external) is True
