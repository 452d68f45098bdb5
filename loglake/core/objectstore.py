"""The object store of an ``s3a://`` lake, as loglake's Python side reaches it.

Three readers and writers meet there besides Spark (whose S3A settings and Delta log store
``loglake.jobs.launch.spark_conf`` derives from the same ``lake.object_store`` block):

- delta-rs (``loglake.tables.open_table``, the ledger and audit writes) gets the
  location as ``s3://`` and the store's options (``delta_location``). It commits with
  ``If-None-Match: *`` (object_store's conditional put, on by default), as Spark does through
  ``io.loglake.storage.S3ConditionalLogStore``: two writers never both create one version.
- the dataset leases (``loglake.leases``) are small JSON objects changed by
  compare-and-swap (``get_json`` / ``put_json``: ``If-None-Match: *`` to create one,
  ``If-Match: <etag>`` to change it), so taking, renewing and breaking a lease is atomic
  on the store itself, with no filesystem shared between hosts.
- the speed checkpoint's files (``loglake.ledger.snapshots``: which micro-batch finished).

Every function here is given the store's settings (an ``ObjectStoreSettings``: the loaded
configuration's ``config.object_store``) with the location: they travel with the config
that names the location, never through a table of buckets a later config could overwrite
(two profiles of one process may name one bucket with other keys). Credentials come from
the profile's ``credentials_file`` (an AWS shared-credentials file every process reads),
else from the AWS default chain (environment, ``~/.aws``, instance roles).
"""

from __future__ import annotations

import configparser
import functools
import json
from datetime import timezone
from pathlib import Path
from typing import Any

from loglake.core.errors import ConfigError

# Unset: a store that answers slowly is retried, not hung on (botocore's defaults are 60 s).
_TIMEOUTS = {"connect_timeout": 10, "read_timeout": 30}


def is_remote(uri: str | None) -> bool:
    """``uri`` names an S3 location (``s3a://`` for Spark, ``s3://`` for delta-rs)."""
    return bool(uri) and uri.startswith(("s3a://", "s3://"))


def split(uri: str) -> tuple[str, str]:
    """(bucket, key) of ``s3a://bucket/key`` or ``s3://bucket/key``."""
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def _given(store, uri: str):
    """``store``, which a remote ``uri`` needs: a ConfigError when the caller gave none."""
    if store is None:
        raise ConfigError(f"{uri} is on an object store, and its settings were not given (the configuration's "
                          "object_store)", key="lake.object_store")
    return store


def _keys(credentials_file: str) -> tuple[str, str, str | None]:
    try:
        stamp = Path(credentials_file).stat().st_mtime_ns  # a rotated file is read again
    except OSError:
        stamp = None
    return _read_keys(credentials_file, stamp)


@functools.lru_cache(maxsize=16)
def _read_keys(credentials_file: str, _stamp: int | None) -> tuple[str, str, str | None]:
    parser = configparser.ConfigParser()
    try:
        with open(credentials_file) as f:
            parser.read_file(f)
        section = parser["default"]
        return (section["aws_access_key_id"].strip(), section["aws_secret_access_key"].strip(),
                section.get("aws_session_token"))
    except (OSError, KeyError, configparser.Error) as e:
        raise ConfigError(f"cannot read the object store's credentials from {credentials_file} ({e}): expected an "
                          "AWS shared-credentials file with a [default] section holding aws_access_key_id and "
                          "aws_secret_access_key", key="lake.object_store.credentials_file") from None


def storage_options(store) -> dict[str, str]:
    """delta-rs' (object_store's) options for ``store`` (an ``ObjectStoreSettings``)."""
    opts = {"AWS_REGION": store.region, "conditional_put": "etag"}
    if store.endpoint:
        opts["AWS_ENDPOINT_URL"] = store.endpoint
        if store.endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if store.path_style else "true"
    if store.credentials_file:
        key, secret, token = _keys(store.credentials_file)
        opts.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        if token:
            opts["AWS_SESSION_TOKEN"] = token
    return opts


def delta_location(path: str, store=None) -> tuple[str, dict[str, str] | None]:
    """What delta-rs is given for the table at ``path``: ``s3://`` and the options of ``store``
    (the store it is on), or the path."""
    if not is_remote(path):
        return path, None
    return "s3://" + path.split("://", 1)[1], storage_options(_given(store, path))


def _identity(store) -> tuple:
    keys = _keys(store.credentials_file) if store.credentials_file else None
    return store.endpoint, store.region, store.path_style, keys


@functools.lru_cache(maxsize=8)
def _client(identity: tuple, within: float | None = None):
    import boto3
    from botocore.config import Config as BotoConfig

    endpoint, region, path_style, keys = identity
    kwargs: dict[str, Any] = {"region_name": region}
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    if keys:
        kwargs.update(aws_access_key_id=keys[0], aws_secret_access_key=keys[1], aws_session_token=keys[2])
    if within is None:
        retries, timeouts = {"mode": "standard", "max_attempts": 5}, _TIMEOUTS
    else:  # one attempt, answered within ``within`` seconds: the caller retries on its own schedule
        retries, timeouts = {"mode": "standard", "max_attempts": 1}, {"connect_timeout": within,
                                                                      "read_timeout": within}
    conf = BotoConfig(s3={"addressing_style": "path" if path_style else "virtual"}, retries=retries, **timeouts)
    return boto3.session.Session().client("s3", config=conf, **kwargs)


def client(store, uri: str, within: float | None = None):
    """A boto3 S3 client for ``store``, which ``uri`` is on (one per store and process). ``within``: a
    client whose calls make one attempt that times out after that many seconds (a lease's: its
    holder retries a renewal every second, and must not spend the lease's life inside the SDK's
    backoff); else the SDK retries with backoff."""
    return _client(_identity(_given(store, uri)), within)


def _status(error) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _missing(error) -> bool:
    return _status(error) == 404 or error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound")


def get_json(store, uri: str, within: float | None = None) -> tuple[dict | None, str | None]:
    """(the JSON object at ``uri``, its ETag), or (None, None) when there is none (``within``:
    ``client``'s)."""
    from botocore.exceptions import ClientError

    bucket, key = split(uri)
    try:
        got = client(store, uri, within).get_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if _missing(e):
            return None, None
        raise
    body = got["Body"].read()
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    return (value if isinstance(value, dict) else None), got["ETag"]


def put_json(store, uri: str, value: dict, etag: str | None, within: float | None = None) -> str | None:
    """Write ``value`` at ``uri`` only if the object is still as read: absent (``etag`` None,
    ``If-None-Match: *``) or unchanged (``If-Match: etag``). Its new ETag, or None when another
    writer changed it first (412, or 409: a concurrent conditional write; either way, read again).
    ``within``: ``client``'s."""
    from botocore.exceptions import ClientError

    bucket, key = split(uri)
    cond = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
    try:
        put = client(store, uri, within).put_object(Bucket=bucket, Key=key, Body=json.dumps(value).encode(),
                                                    ContentType="application/json", **cond)
    except ClientError as e:
        if _status(e) in (409, 412) or (etag is not None and _missing(e)):
            return None
        raise
    return put["ETag"]


def write_json(store, uri: str, value: dict) -> None:
    """Write ``value`` at ``uri`` whatever is there."""
    bucket, key = split(uri)
    client(store, uri).put_object(Bucket=bucket, Key=key, Body=json.dumps(value).encode(),
                                  ContentType="application/json")


def put_text(store, uri: str, text: str) -> None:
    """Write ``text`` at ``uri`` whatever is there (an object one writer owns)."""
    bucket, key = split(uri)
    client(store, uri).put_object(Bucket=bucket, Key=key, Body=text.encode(), ContentType="text/plain")


def listing(store, prefix: str) -> dict[str, str]:
    """Every object under ``prefix`` (``s3a://bucket/some/dir/``): its URI → its ETag."""
    bucket, key = split(prefix)
    scheme = prefix.split("://", 1)[0]
    out = {}
    for page in client(store, prefix).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
        for obj in page.get("Contents", []):
            out[f"{scheme}://{bucket}/{obj['Key']}"] = obj["ETag"]
    return out


def delete(store, uri: str) -> None:
    bucket, key = split(uri)
    client(store, uri).delete_object(Bucket=bucket, Key=key)


def read_text(store, uri: str) -> str:
    """The text at ``uri`` (a local path or an object); ``FileNotFoundError`` when there is none."""
    if not is_remote(uri):
        return Path(uri.removeprefix("file://").removeprefix("file:")).read_text()
    from botocore.exceptions import ClientError

    bucket, key = split(uri)
    try:
        return client(store, uri).get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except ClientError as e:
        if _missing(e):
            raise FileNotFoundError(uri) from None
        raise


def modified_ms(store, uri: str) -> float:
    """When the file or object at ``uri`` was last written (ms since the epoch); ``FileNotFoundError``."""
    if not is_remote(uri):
        return Path(uri.removeprefix("file://").removeprefix("file:")).stat().st_mtime * 1000
    from botocore.exceptions import ClientError

    bucket, key = split(uri)
    try:
        head = client(store, uri).head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if _missing(e):
            raise FileNotFoundError(uri) from None
        raise
    return head["LastModified"].astimezone(timezone.utc).timestamp() * 1000
