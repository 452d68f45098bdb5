"""The suite's S3 server (``loglake.local.versitygw.Gateway``, versitygw) as files: its
credentials and settings, without starting it. Its build: tests/unit/test_gobuild.py."""

from __future__ import annotations

import configparser
import stat

from loglake.core.config import ObjectStoreSettings
from loglake.local.versitygw import Gateway


def test_the_credentials_file_is_private_and_the_settings_validate(tmp_path):
    gw = Gateway(tmp_path / "gw", port=9)
    creds = tmp_path / "aws" / "credentials"
    creds.parent.mkdir()
    creds.write_text("old")
    creds.chmod(0o644)
    assert gw.write_credentials_file(creds) == creds
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    parser = configparser.ConfigParser()
    parser.read(creds)
    assert dict(parser["default"]) == {"aws_access_key_id": gw.access_key, "aws_secret_access_key": gw.secret_key}
    store = ObjectStoreSettings.model_validate(gw.settings(creds))
    assert (store.endpoint, store.region, store.credentials_file, store.path_style) == \
        ("http://127.0.0.1:9", "us-east-1", str(creds), True)
    assert gw.secret_key not in repr(gw)
    assert Gateway(tmp_path, 9).secret_key != gw.secret_key  # random per gateway unless given
