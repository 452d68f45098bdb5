"""The loglake page's template (plugins/loglake_airflow/templates/page.html) rendered without
Airflow: every dataset's format and schema shown, a JSON one and a registry one alike. (Its
template is strict: a key a dataset's status lacks fails the whole page, which the system
test of the page met first; every status has every key, ``status_shape``.)"""

from __future__ import annotations

import pytest

from loglake.core import paths
from loglake.schema_versions import status_shape


@pytest.fixture(scope="module")
def render(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(paths.REPO_ROOT / "plugins"))
        from loglake_airflow.ui_html import render_page

        yield render_page


BASE = {"topic": "t", "kind": "events", "retention_ms": None, "cleanup_policy": "delete", "quality": None,
        "audit": None, "writer": None, "lost": [], "partitions": [], "tables": []}


def test_the_page_shows_each_datasets_format_and_schema_version(render):
    json_ds = {**BASE, "name": "job_views",
               "schema": status_shape(format="json", version=1, change="first recorded")}
    avro_ds = {**BASE, "name": "orders", "schema": status_shape(
        format="avro", subject="orders-value", subject_version=2, schema_id=7, version=2,
        change="channel: new optional field", registry_refused="version 3 is refused")}
    away = {**BASE, "name": "clicks", "schema": status_shape(
        format="protobuf", subject="clicks-value", registry_error="the schema registry at U did not answer")}
    html = render([json_ds, avro_ds, away], "/loglake")
    assert 'data-dataset="job_views" data-field="format" data-value="json">json (the schema is' in html
    assert 'data-dataset="job_views" data-field="schema_version" data-value="1">version 1 (first recorded)' in html
    assert ('data-field="format" data-value="avro" class="bad">avro, subject orders-value version 2 (schema id 7); '
            'REFUSED: version 3 is refused') in html
    assert 'data-field="schema_version" data-value="">unknown until the registry answers' in html
