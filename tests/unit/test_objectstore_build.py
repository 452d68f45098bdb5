"""Building versitygw (``loglake.local.objectstore``) without the network: where the binary and
its stamp live, which Go is chosen, and what each failure says. A stand-in ``go`` (a shell
script) plays the build; a local HTTP server or a closed loopback port plays the module proxy."""

from __future__ import annotations

import configparser
import http.server
import io
import os
import stat
import threading
import zipfile
from pathlib import Path

import pytest

from loglake.core.config import ObjectStoreSettings
from loglake.core.errors import SetupError
from loglake.core.processes import free_port
from loglake.local import objectstore
from loglake.local.objectstore import Gateway

GO_SCRIPT = """#!/bin/sh
echo "$@" >> "{calls}"
if [ "$1" = env ]; then echo {version}; exit 0; fi
{install}
"""
BUILDS = (f'printf "#!/bin/sh\\necho Version: v{objectstore.VERSION}\\n" > "$GOBIN/versitygw"; '
          '/bin/chmod +x "$GOBIN/versitygw"')
FAILS = 'echo "go: downloading github.com/versity/versitygw v1.8.0"; echo "go: module lookup disabled" >&2; exit 1'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache, no Go anywhere (PATH holds only ``bin/``), and a proxy nobody listens on."""
    monkeypatch.setenv("LOGLAKE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(objectstore, "GO_LOCATIONS", ())
    monkeypatch.setattr(objectstore, "PROXY", f"http://127.0.0.1:{free_port()}")
    return tmp_path / "cache"


def fake_go(path: Path, version: str = "go1.26.8", install: str = BUILDS) -> Path:
    """A ``go`` answering ``env GOVERSION`` with ``version`` and running ``install`` for the rest;
    it appends its arguments to ``<path>.calls``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(GO_SCRIPT.format(calls=f"{path}.calls", version=version, install=install))
    path.chmod(0o755)
    return path


def calls(go: Path) -> list[str]:
    p = Path(f"{go}.calls")
    return p.read_text().splitlines() if p.exists() else []


def test_the_binary_and_go_trees_live_under_the_cache(cache):
    assert objectstore.binary_path() == cache / "bin" / f"versitygw-{objectstore.VERSION}"
    assert objectstore.stamp_path().parent == cache / "bin"
    env = objectstore.go_env(cache / "bin" / ".versitygw.tmp-1")
    for var in ("GOPATH", "GOMODCACHE", "GOCACHE", "GOBIN"):
        assert Path(env[var]).is_relative_to(cache), var  # nothing in ~/go
    assert env["GOTOOLCHAIN"] == "local" and env["CGO_ENABLED"] == "0"
    assert objectstore.install_args()[-1] == f"{objectstore.MODULE}@v{objectstore.VERSION}"


def test_is_current_needs_the_binary_and_a_matching_stamp(cache):
    b = objectstore.binary_path()
    assert not objectstore.is_current()
    b.parent.mkdir(parents=True)
    b.write_text("#!/bin/sh\n")
    b.chmod(0o755)
    assert not objectstore.is_current()  # no stamp: an interrupted build
    objectstore.stamp_path().write_text("another build\n")
    assert not objectstore.is_current()
    objectstore.stamp_path().write_text(objectstore.stamp_value() + "\n")
    assert objectstore.is_current()
    b.chmod(0o644)
    assert not objectstore.is_current()


@pytest.mark.parametrize("text, expected", [
    ("go1.26.8\n", (1, 26)),
    ("go1.25rc1", (1, 25)),
    ("go1.19.8", (1, 19)),
    ("devel go1.27-abcdef Tue", (1, 27)),
    ("", None),
    ("gopher", None),
])
def test_parse_go_version(text, expected):
    assert objectstore.parse_go_version(text) == expected


def test_no_go_and_no_toolchain_download_names_both(cache):
    with pytest.raises(SetupError) as e:
        objectstore.ensure_binary()
    msg = str(e.value)
    assert "no Go 1.25+" in msg and f"versitygw {objectstore.VERSION}" in msg
    assert objectstore.toolchain_url() in msg and objectstore.toolchain_url().startswith(objectstore.PROXY)
    assert "go.dev/dl" in msg
    assert not objectstore.binary_path().exists()
    assert not list(objectstore.toolchain_dir().parent.glob("*"))  # no half-unpacked toolchain


def test_a_go_too_old_is_named_and_not_used(cache, tmp_path):
    old = fake_go(tmp_path / "bin" / "go", version="go1.19.8")
    with pytest.raises(SetupError, match=r"go1\.19, too old") as e:
        objectstore.ensure_binary()
    assert str(old) in str(e.value)
    assert not any(c.startswith("install") for c in calls(old))


def test_a_failed_build_says_what_go_said(cache, tmp_path):
    go = fake_go(tmp_path / "bin" / "go", install=FAILS)
    with pytest.raises(SetupError) as e:
        objectstore.ensure_binary()
    msg = str(e.value)
    assert "go exited with 1" in msg and "go: module lookup disabled" in msg and str(objectstore.log_path()) in msg
    assert not objectstore.binary_path().exists() and not objectstore.stamp_path().exists()
    assert [p.name for p in objectstore.binary_path().parent.iterdir()] == []  # no temp dir left
    assert calls(go)[-1] == " ".join(objectstore.install_args())


def test_a_binary_that_says_another_version_is_not_installed(cache, tmp_path):
    fake_go(tmp_path / "bin" / "go", install=BUILDS.replace(f"v{objectstore.VERSION}", "git"))
    with pytest.raises(SetupError, match="says another version"):
        objectstore.ensure_binary()
    assert not objectstore.binary_path().exists()


def test_a_build_is_stamped_and_not_repeated(cache, tmp_path, capsys):
    go = fake_go(tmp_path / "bin" / "go")
    path, cached = objectstore.ensure_binary()
    assert (path, cached) == (objectstore.binary_path(), False)
    assert os.access(path, os.X_OK) and objectstore.is_current()
    installs = [c for c in calls(go) if c.startswith("install")]
    assert len(installs) == 1

    assert objectstore.main([]) == 0  # the second run: nothing built
    assert capsys.readouterr().out.strip() == f"versitygw {objectstore.VERSION}: ok (already built)"
    assert len([c for c in calls(go) if c.startswith("install")]) == 1

    assert objectstore.main(["--force"]) == 0
    assert "built in" in capsys.readouterr().out
    assert len([c for c in calls(go) if c.startswith("install")]) == 2


def test_the_go_on_path_is_preferred_to_a_fetched_toolchain(cache, tmp_path):
    fetched = fake_go(objectstore.toolchain_dir() / "bin" / "go")
    on_path = fake_go(tmp_path / "bin" / "go")
    assert objectstore.find_go() == (str(on_path), [])
    on_path.unlink()
    assert objectstore.find_go() == (str(fetched), [])


def _toolchain_zip() -> bytes:
    """A module zip shaped as golang.org/toolchain's, without file modes, whose go answers go1.26.8."""
    root = f"golang.org/toolchain@v0.0.1-{objectstore.TOOLCHAIN}.linux-amd64"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{root}/bin/go", f"#!/bin/sh\necho {objectstore.TOOLCHAIN}\n")
        z.writestr(f"{root}/bin/gofmt", "#!/bin/sh\n")
        z.writestr(f"{root}/pkg/tool/linux_amd64/compile", "#!/bin/sh\n")
        z.writestr(f"{root}/src/go.mod", "module std\n")
    return buf.getvalue()


def test_without_go_the_toolchain_is_fetched_from_the_proxy(cache, monkeypatch):
    body = _toolchain_zip()
    asked = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(objectstore, "PROXY", f"http://127.0.0.1:{server.server_port}")
        go = objectstore.go_for_build()
    finally:
        server.shutdown()
        server.server_close()
    assert go == str(objectstore.toolchain_dir() / "bin" / "go")
    assert asked == [objectstore.toolchain_url().removeprefix(objectstore.PROXY)]
    assert "golang.org/toolchain/@v/v0.0.1-go" in asked[0]
    tool = objectstore.toolchain_dir() / "pkg" / "tool" / "linux_amd64" / "compile"
    assert os.access(go, os.X_OK) and os.access(tool, os.X_OK)
    assert objectstore.find_go() == (go, [])  # found there next time, not fetched again
    assert [p.name for p in objectstore.toolchain_dir().parent.iterdir()] == [objectstore.TOOLCHAIN]


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
