"""The suite's S3 store (versitygw on loopback, ``s3_gateway``) has the properties an ``s3a://``
lake relies on: conditional creates and compare-and-swap refused with 412 when stale (the Delta
commits, the leases), a credentials file any process can read, and signatures checked."""

from __future__ import annotations

import uuid

import boto3
import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def bucket(s3_gateway) -> str:
    """A bucket of this test's own."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_gateway.create_bucket(name)
    return name


def _status(e: ClientError) -> int:
    return e.response["ResponseMetadata"]["HTTPStatusCode"]


def test_it_answers_and_creating_a_bucket_again_is_a_no_op(s3_gateway, bucket):
    assert s3_gateway.answers()
    s3_gateway.create_bucket(bucket)
    names = [b["Name"] for b in s3_gateway.client().list_buckets()["Buckets"]]
    assert bucket in names


def test_a_create_over_an_existing_key_is_refused(s3_gateway, bucket):
    s3 = s3_gateway.client()
    first = s3.put_object(Bucket=bucket, Key="_delta_log/00000.json", Body=b"writer A", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="_delta_log/00000.json", Body=b"writer B", IfNoneMatch="*")
    assert _status(e.value) == 412
    got = s3.get_object(Bucket=bucket, Key="_delta_log/00000.json")
    assert (got["Body"].read(), got["ETag"]) == (b"writer A", first["ETag"])


def test_a_stale_if_match_is_refused(s3_gateway, bucket):
    s3 = s3_gateway.client()
    v1 = s3.put_object(Bucket=bucket, Key="lease.json", Body=b'{"holder": 1}', IfNoneMatch="*")["ETag"]
    v2 = s3.put_object(Bucket=bucket, Key="lease.json", Body=b'{"holder": 2}', IfMatch=v1)["ETag"]
    assert v2 != v1
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="lease.json", Body=b'{"holder": 3}', IfMatch=v1)
    assert _status(e.value) == 412
    assert s3.get_object(Bucket=bucket, Key="lease.json")["Body"].read() == b'{"holder": 2}'


def test_the_credentials_file_is_enough_to_reach_the_bucket(s3_gateway, bucket, tmp_path, monkeypatch):
    s3_gateway.client().put_object(Bucket=bucket, Key="k", Body=b"v")
    store = s3_gateway.settings(s3_gateway.write_credentials_file(tmp_path / "credentials"))
    # What another process does with the profile's block: the keys come from the file alone (a
    # profile named explicitly: botocore then skips the environment's keys).
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", store["credentials_file"])
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    session = boto3.session.Session(profile_name="default")
    assert session.get_credentials().access_key == s3_gateway.access_key
    s3 = session.client("s3", endpoint_url=store["endpoint"], region_name=store["region"],
                        config=BotoConfig(s3={"addressing_style": "path" if store["path_style"] else "virtual"}))
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["k"]


def test_a_wrong_secret_is_refused(s3_gateway, bucket):
    with pytest.raises(ClientError) as e:
        s3_gateway.client(secret_key="not-the-secret").list_objects_v2(Bucket=bucket)
    assert _status(e.value) == 403
