"""A registry that asks for a login over TLS, named by a profile (``registry: {url, username,
password, ca_file}``): loglake reads its subjects, its producer writes through it and the
stream decodes with it; a wrong password or an untrusted certificate is a configuration
error naming the key, at once, not an outage waited out.

The registry is the suite's Apicurio behind nginx (Debian's ``nginx-light``) with HTTPS and
HTTP basic auth, the way a shop puts a registry behind its reverse proxy. Its certificate is
signed by a CA made for the test (``loglake.kafka.security``'s local CA).
"""

from __future__ import annotations

import getpass
import json
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from loglake.core.errors import ConfigError
from loglake.core.processes import free_port, port_open
from loglake.testing import run_loglake

pytestmark = pytest.mark.integration

USER, PASSWORD = "loglake-reader", "s3cret-registry-pw"
CLICKS = {"type": "record", "name": "Click", "fields": [
    {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}

NGINX_CONF = """daemon off;
user {user};
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {crt};
    ssl_certificate_key {key};
    auth_basic "schema registry";
    auth_basic_user_file {d}/htpasswd;
    location / {{ proxy_pass http://127.0.0.1:{upstream}; }}
  }}
}}
"""


class SecuredRegistry:
    """nginx on a free loopback port: HTTPS, basic auth, proxying to ``upstream``."""

    def __init__(self, home: Path, upstream_url: str):
        from loglake.kafka.security import ensure_server_cert

        self.home, self.upstream = home, urlsplit(upstream_url)
        self.crt, self.key = ensure_server_cert(home / "tls", "registry")
        self.ca_file = home / "tls" / "ca.pem"
        (home / "htpasswd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{self.upstream.path}"

    def start(self, attempts: int = 3) -> None:
        """On a port free right now; on a fresh one when another process took it first."""
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        for _ in range(attempts):
            self.port = free_port()
            conf = self.home / "nginx.conf"
            # Its worker runs as this user (as root nginx would drop to nobody, who cannot read
            # the test's 0700 directories).
            conf.write_text(NGINX_CONF.format(user=getpass.getuser(), d=self.home, port=self.port, crt=self.crt, key=self.key,
                                              upstream=self.upstream.port))
            self.process = subprocess.Popen([nginx, "-p", str(self.home), "-e", str(self.home / "error.log"),
                                             "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.process.poll() is None and not port_open(self.port):
                time.sleep(0.1)
            if self.process.poll() is None and port_open(self.port):
                return
            self.stop()
        raise RuntimeError(f"nginx did not start: {(self.home / 'error.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture(scope="module")
def secured(tmp_path_factory, registry_url):
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.fail("nginx is not installed: `make setup` installs Debian's nginx-light (setup/system-deps.sh)")
    proxy = SecuredRegistry(tmp_path_factory.mktemp("secured-registry"), registry_url)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(autouse=True)
def password_in_environment(monkeypatch):
    """The password as a profile gives it: from the environment (conf/ holds no secret)."""
    monkeypatch.setenv("LOGLAKE_REGISTRY_PASSWORD", PASSWORD)
    monkeypatch.setenv("LOGLAKE_WRONG_PASSWORD", "not-it")


def settings(secured, **override) -> dict:
    return {"url": secured.url, "username": USER, "password": "${LOGLAKE_REGISTRY_PASSWORD}",
            "ca_file": str(secured.ca_file), "retry_seconds": 60, **override}


def test_a_registry_with_a_login_over_tls_is_read_written_and_decoded_through(spark, make_config, secured):
    from loglake.kafka.admin import ensure_topic
    from loglake.local.produce import produce
    from loglake.schemaregistry import register, versions
    from loglake.schemaregistry.serializers import encoder
    from loglake.speed.stream import run_speed

    config = make_config(registry=settings(secured), extra_datasets={
        "clicks": {"kind": "events", "partitions": 2, "key": "user_id", "format": "avro"}})
    ds = config.dataset("clicks")
    ensure_topic(config, ds)
    sid = register(config, ds.subject_name, json.dumps(CLICKS))
    assert [(v.version, v.id) for v in versions(config, ds.subject_name)] == [(1, sid)]
    made = produce(config, ds, 200, seed=5, encoder=encoder(config, ds))
    run_speed(spark, config, ds, available_now=True)
    speed = spark.read.format("delta").load(config.table_path(ds, "speed"))
    assert made.good == 200 and speed.count() == 200
    assert dict(speed.dtypes)["at"] == "timestamp"

    # loglake registry status asks the registry with the profile's login and CA.
    r = run_loglake(config, "registry", "status")
    assert r.returncode == 0 and r.stdout.strip() == f"registry: {secured.url} (answers)", r.stdout + r.stderr


def test_a_wrong_password_or_an_untrusted_certificate_is_a_config_error_naming_the_key(make_config, secured):
    from loglake.schemaregistry import versions

    cases = [
        ({"password": "${LOGLAKE_WRONG_PASSWORD}"}, "registry.password", "refused loglake as user 'loglake-reader' (HTTP 401)"),
        ({"username": None, "password": None}, "registry.username", "without a login"),
        ({"ca_file": None}, "registry.ca_file", "the system's CAs (registry.ca_file is not set) does not sign"),
    ]
    for override, key, words in cases:
        config = make_config(registry=settings(secured, **override))
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as e:
            versions(config, "clicks-value")
        assert e.value.key == key and words in str(e.value), str(e.value)
        assert time.monotonic() - t0 < 10, "a settings error was retried like an outage"
        r = run_loglake(config, "registry", "status")
        assert r.returncode == 1 and r.stdout.startswith(f"registry: {secured.url} (refused: "), r.stdout + r.stderr
        assert key in r.stdout and "Traceback" not in r.stderr, r.stdout + r.stderr
