"""Patterns Python accepts and Java refuses are refused at config load (issue 11, item 6).

``tests/integration/test_regex_java.py`` checks the same table against Java's own engine.
"""

from __future__ import annotations

import pytest

from loglake.core.config import load_config
from loglake.core.errors import ConfigError
from loglake.core.regex import java_incompatibility
from loglake.testing import write_conf

# (pattern, refused): every one compiles with Python's re.
PATTERNS = [
    (r"^[a-z]+$", False), (r"\d{3}-\d{4}", False), (r"(?i)abc", False), (r"a{2,}", False), (r"[\[]", False),
    (r"[]a]", False), (r"[^]a]", False), (r"(?:x|y)+", False), (r"\w+@\w+\.com", False), (r"[a-z&]", False),
    (r"[[]", True), (r"a{,3}", True), (r"(?P<x>a)", True), (r"(?P<x>a)(?P=x)", True),
    (r"(?#note)a", True), (r"(a)?(?(1)b|c)", True), (r"(?a)x", True), (r"(?L)x", True), (r"\U0001F600", True),
    (r"[a&&b]", True), (r"a\0", True), (r"\x00", False), (r"\012", False),
]


@pytest.mark.parametrize("pattern,refused", PATTERNS)
def test_java_incompatibility(pattern, refused):
    assert (java_incompatibility(pattern) is not None) == refused


def test_config_load_refuses_a_pattern_java_would_refuse_naming_the_key(tmp_path):
    import yaml

    from loglake.core import paths

    schema = yaml.safe_load((paths.REPO_ROOT / "conf" / "datasets" / "job_views.yaml").read_text())["schema"]
    schema["view_id"]["pattern"] = r"^(?P<prefix>[0-9a-f]{8})-"
    conf = write_conf(tmp_path, "localhost:9", datasets={"job_views": {"schema": schema}})
    with pytest.raises(ConfigError) as e:
        load_config(conf, home=tmp_path / "state")
    assert "schema.view_id.pattern" in str(e.value)
    assert "Java's regex engine" in str(e.value) and "named groups" in str(e.value)
