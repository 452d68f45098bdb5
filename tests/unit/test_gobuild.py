"""Building a Go program from the module proxy (``loglake.local.gobuild``: versitygw and
statsd_exporter) without the network: where the binary and its stamp live, which Go is chosen,
and what each failure says. A stand-in ``go`` (a shell script) plays the build; a local HTTP
server or a closed loopback port plays the module proxy."""

from __future__ import annotations

import http.server
import io
import os
import threading
import zipfile
from pathlib import Path

import pytest

from loglake.core.errors import SetupError
from loglake.core.processes import free_port
from loglake.local import gobuild, statsd_exporter, versitygw
from loglake.local.versitygw import VERSITYGW
from loglake.local.statsd_exporter import STATSD_EXPORTER

GO_SCRIPT = """#!/bin/sh
echo "$@" >> "{calls}"
if [ "$1" = env ]; then echo {version}; exit 0; fi
{install}
"""
# What each binary's --version prints (measured).
SAYS = {"versitygw": "echo 'Version: v{version}'",
        "statsd_exporter": "echo 'statsd_exporter, version {version} (branch: , revision: unknown)'"}
FAILS = 'echo "go: downloading github.com/versity/versitygw v1.8.0"; echo "go: module lookup disabled" >&2; exit 1'
BINARIES = pytest.mark.parametrize("binary", [VERSITYGW, STATSD_EXPORTER], ids=lambda b: b.name)


def builds(binary: gobuild.GoBinary, version: str | None = None) -> str:
    """The install step of a stand-in go: a ``binary`` in $GOBIN whose --version says
    ``version`` (its own by default)."""
    says = SAYS[binary.name].format(version=version or binary.version)
    return (f'printf "%s\\n" "#!/bin/sh" "{says}" > "$GOBIN/{binary.name}"\n'
            f'/bin/chmod +x "$GOBIN/{binary.name}"')


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache, no Go anywhere (PATH holds only ``bin/``), and a proxy nobody listens on."""
    monkeypatch.setenv("LOGLAKE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(gobuild, "GO_LOCATIONS", ())
    monkeypatch.setattr(gobuild, "PROXY", f"http://127.0.0.1:{free_port()}")
    return tmp_path / "cache"


def fake_go(path: Path, version: str = "go1.26.8", install: str = "exit 0") -> Path:
    """A ``go`` answering ``env GOVERSION`` with ``version`` and running ``install`` for the rest;
    it appends its arguments to ``<path>.calls``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(GO_SCRIPT.format(calls=f"{path}.calls", version=version, install=install))
    path.chmod(0o755)
    return path


def calls(go: Path) -> list[str]:
    p = Path(f"{go}.calls")
    return p.read_text().splitlines() if p.exists() else []


def installs(go: Path) -> list[str]:
    return [c for c in calls(go) if c.startswith("install")]


@BINARIES
def test_the_binary_and_go_trees_live_under_the_cache(cache, binary):
    assert binary.path == cache / "bin" / f"{binary.name}-{binary.version}"
    assert binary.stamp_path.parent == cache / "bin" and binary.log_path.is_relative_to(cache)
    env = gobuild.go_env(cache / "bin" / f".{binary.name}.tmp-1")
    for var in ("GOPATH", "GOMODCACHE", "GOCACHE", "GOBIN"):
        assert Path(env[var]).is_relative_to(cache), var  # nothing in ~/go
    assert env["GOTOOLCHAIN"] == "local" and env["CGO_ENABLED"] == "0"
    assert binary.install_args()[-1] == f"{binary.package}@v{binary.version}"


def test_each_binary_says_its_version_as_its_own_makefile_sets_it():
    assert VERSITYGW.install_args() == [
        "install", "-trimpath", f"-ldflags=-s -w -X=main.Version=v{versitygw.VERSION}",
        f"github.com/versity/versitygw/cmd/versitygw@v{versitygw.VERSION}"]
    assert STATSD_EXPORTER.install_args() == [
        "install", "-trimpath",
        f"-ldflags=-s -w -X=github.com/prometheus/common/version.Version={statsd_exporter.VERSION}",
        f"github.com/prometheus/statsd_exporter@v{statsd_exporter.VERSION}"]
    assert VERSITYGW.stamp_value() != STATSD_EXPORTER.stamp_value()


def test_is_current_needs_the_binary_and_a_matching_stamp(cache):
    b = STATSD_EXPORTER.path
    assert not STATSD_EXPORTER.is_current()
    b.parent.mkdir(parents=True)
    b.write_text("#!/bin/sh\n")
    b.chmod(0o755)
    assert not STATSD_EXPORTER.is_current()  # no stamp: an interrupted build
    STATSD_EXPORTER.stamp_path.write_text("another build\n")
    assert not STATSD_EXPORTER.is_current()
    STATSD_EXPORTER.stamp_path.write_text(VERSITYGW.stamp_value() + "\n")
    assert not STATSD_EXPORTER.is_current()  # another binary's stamp
    STATSD_EXPORTER.stamp_path.write_text(STATSD_EXPORTER.stamp_value() + "\n")
    assert STATSD_EXPORTER.is_current()
    b.chmod(0o644)
    assert not STATSD_EXPORTER.is_current()


@pytest.mark.parametrize("text, expected", [
    ("go1.26.8\n", (1, 26)),
    ("go1.25rc1", (1, 25)),
    ("go1.19.8", (1, 19)),
    ("devel go1.27-abcdef Tue", (1, 27)),
    ("", None),
    ("gopher", None),
])
def test_parse_go_version(text, expected):
    assert gobuild.parse_go_version(text) == expected


@BINARIES
def test_no_go_and_no_toolchain_download_names_both(cache, binary):
    with pytest.raises(SetupError) as e:
        binary.ensure()
    msg = str(e.value)
    assert "no Go 1.25+" in msg and binary.label in msg
    assert gobuild.toolchain_url() in msg and gobuild.toolchain_url().startswith(gobuild.PROXY)
    assert "go.dev/dl" in msg
    assert not binary.path.exists()
    assert not list(gobuild.toolchain_dir().parent.glob("*"))  # no half-unpacked toolchain


def test_a_go_too_old_is_named_and_not_used(cache, tmp_path):
    old = fake_go(tmp_path / "bin" / "go", version="go1.19.8", install=builds(STATSD_EXPORTER))
    with pytest.raises(SetupError, match=r"go1\.19, too old") as e:
        STATSD_EXPORTER.ensure()
    assert str(old) in str(e.value)
    assert not installs(old)


@BINARIES
def test_a_failed_build_says_what_go_said(cache, tmp_path, binary):
    go = fake_go(tmp_path / "bin" / "go", install=FAILS)
    with pytest.raises(SetupError) as e:
        binary.ensure()
    msg = str(e.value)
    assert "go exited with 1" in msg and "go: module lookup disabled" in msg and str(binary.log_path) in msg
    assert binary.label in msg
    assert not binary.path.exists() and not binary.stamp_path.exists()
    assert [p.name for p in binary.path.parent.iterdir()] == []  # no temp dir left
    assert calls(go)[-1] == " ".join(binary.install_args())


@BINARIES
def test_a_binary_that_says_another_version_is_not_installed(cache, tmp_path, binary):
    fake_go(tmp_path / "bin" / "go", install=builds(binary, version="git"))
    with pytest.raises(SetupError, match="says another version"):
        binary.ensure()
    assert not binary.path.exists()


def test_a_build_that_leaves_another_command_is_refused(cache, tmp_path):
    fake_go(tmp_path / "bin" / "go", install=builds(VERSITYGW))
    with pytest.raises(SetupError, match="go left no statsd_exporter in GOBIN"):
        STATSD_EXPORTER.ensure()


@BINARIES
def test_a_build_is_stamped_and_not_repeated(cache, tmp_path, capsys, binary):
    go = fake_go(tmp_path / "bin" / "go", install=builds(binary))
    path, cached = binary.ensure()
    assert (path, cached) == (binary.path, False)
    assert os.access(path, os.X_OK) and binary.is_current()
    assert len(installs(go)) == 1

    assert binary.main([]) == 0  # the second run: nothing built
    assert capsys.readouterr().out.strip() == f"{binary.label}: ok (already built)"
    assert len(installs(go)) == 1

    assert binary.main(["--force"]) == 0
    assert "built in" in capsys.readouterr().out
    assert len(installs(go)) == 2


def test_first_use_builds_with_a_progress_line_then_only_answers(cache, tmp_path):
    go = fake_go(tmp_path / "bin" / "go", install=builds(STATSD_EXPORTER))
    said = []
    assert STATSD_EXPORTER.installed(said.append) == STATSD_EXPORTER.path
    assert said[0] == (f"setup: building statsd_exporter {statsd_exporter.VERSION} (turns Airflow's StatsD into "
                       "Prometheus metrics) from the Go module proxy, once ...")
    assert said[1].startswith("setup: statsd_exporter ready in ") and len(said) == 2
    assert STATSD_EXPORTER.installed(said.append) == STATSD_EXPORTER.path
    assert len(said) == 2 and len(installs(go)) == 1


def test_the_go_on_path_is_preferred_to_a_fetched_toolchain(cache, tmp_path):
    fetched = fake_go(gobuild.toolchain_dir() / "bin" / "go")
    on_path = fake_go(tmp_path / "bin" / "go")
    assert gobuild.find_go() == (str(on_path), [])
    on_path.unlink()
    assert gobuild.find_go() == (str(fetched), [])


def _toolchain_zip() -> bytes:
    """A module zip shaped as golang.org/toolchain's, without file modes, whose go answers go1.26.8."""
    root = f"golang.org/toolchain@v0.0.1-{gobuild.TOOLCHAIN}.linux-amd64"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{root}/bin/go", f"#!/bin/sh\necho {gobuild.TOOLCHAIN}\n")
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
        monkeypatch.setattr(gobuild, "PROXY", f"http://127.0.0.1:{server.server_port}")
        go = gobuild.go_for_build(STATSD_EXPORTER)
    finally:
        server.shutdown()
        server.server_close()
    assert go == str(gobuild.toolchain_dir() / "bin" / "go")
    assert asked == [gobuild.toolchain_url().removeprefix(gobuild.PROXY)]
    assert "golang.org/toolchain/@v/v0.0.1-go" in asked[0]
    tool = gobuild.toolchain_dir() / "pkg" / "tool" / "linux_amd64" / "compile"
    assert os.access(go, os.X_OK) and os.access(tool, os.X_OK)
    assert gobuild.find_go() == (go, [])  # found there next time, not fetched again
    assert [p.name for p in gobuild.toolchain_dir().parent.iterdir()] == [gobuild.TOOLCHAIN]
