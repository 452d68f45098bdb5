"""Which schema changes are additive and which are breaking (``loglake.schema_versions.compare``)."""

from __future__ import annotations

import pytest

from loglake.core.config import load_config
from loglake.core import paths
from loglake.schema_versions import compare, fingerprint, spec_of


def base() -> dict:
    ds = load_config(paths.REPO_ROOT / "conf", profile="local").dataset("job_views")
    return spec_of(ds)


def changed(**fields) -> dict:
    spec = base()
    new = {**spec["fields"], **fields}
    return {**spec, "fields": {k: v for k, v in new.items() if v is not None}}


CASES = [
    ("new optional field", changed(referrer={"type": "string", "required": False}), "added", False),
    ("made optional", changed(job_id={"type": "long", "required": False, "min": 1.0}), "made_optional", False),
    ("enum value added", changed(source={"type": "string", "required": True, "enum": [
        "search", "recommendation", "email", "company_page", "direct", "ads"]}), "rules", False),
    ("wider max", changed(duration_ms={"type": "long", "required": True, "min": 0.0, "max": 1e9}), "rules", False),
    ("type changed", changed(duration_ms={"type": "double", "required": True, "min": 0.0, "max": 86400000.0}),
     "type", True),
    ("removed", changed(duration_ms=None), "removed", True),
    ("made required", None, "made_required", True),
    ("new required field", changed(referrer={"type": "string", "required": True}), "added_required", True),
]


@pytest.mark.parametrize("name,new,what,breaking", CASES, ids=[c[0] for c in CASES])
def test_each_change_is_classified(name, new, what, breaking):
    old = base()
    if new is None:  # made required: from a form where the field was optional
        old = changed(job_id={"type": "long", "required": False, "min": 1.0})
        new = base()
    assert [(c.what, c.breaking) for c in compare(old, new)] == [(what, breaking)]


def test_a_rename_is_a_removal_and_says_so():
    spec = base()
    fields = dict(spec["fields"])
    fields["time_on_page_ms"] = fields.pop("duration_ms")
    changes = compare(spec, {**spec, "fields": fields})
    removed = [c for c in changes if c.what == "removed"]
    assert removed and removed[0].breaking and "renamed to time_on_page_ms?" in removed[0].describe()


def test_key_and_kind_changes_are_breaking():
    spec = base()
    assert [c.what for c in compare(spec, {**spec, "key": "view_id"}) if c.breaking] == ["key"]
    assert [c.what for c in compare(spec, {**spec, "kind": "changelog"}) if c.breaking] == ["kind"]


def test_descriptions_do_not_make_a_new_version():
    spec = base()
    ds = load_config(paths.REPO_ROOT / "conf", profile="local").dataset("job_views")
    assert fingerprint(spec) == fingerprint(spec_of(ds.model_copy(update={"description": "other words"})))
    assert compare(spec, spec) == []
