"""What the object-store backend (issue 18) relies on, checked on a real S3 server.

SeaweedFS from PyPI, started on loopback by the fixture: create-only puts,
a SHA-256 checksum the server verifies, ranged reads, a delete conditional
on the ETag, and versioning keeping what a delete removed. `moto` would pass
a wrong checksum; a real server must refuse it.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any

import boto3
import obstore
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from obstore.exceptions import AlreadyExistsError
from obstore.store import S3Store

from support.seaweedfs import S3Server, running_seaweedfs

if TYPE_CHECKING:
    from collections.abc import Iterator

BUCKET = "vault"
DATA = b"".join(b"line %d\n" % n for n in range(1, 100_001))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One SeaweedFS for the module, on loopback ports of its own."""
    with running_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as running:
        client = _client(running)
        client.create_bucket(Bucket=BUCKET)
        yield running


def _client(server: S3Server) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name=server.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def _store(server: S3Server) -> S3Store:
    return S3Store(
        BUCKET,
        endpoint=server.endpoint,
        access_key_id=server.access_key,
        secret_access_key=server.secret_key,
        region=server.region,
        allow_http=True,
    )


def _sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def _status(error: ClientError) -> int:
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


def test_a_create_only_put_never_replaces_an_object(server: S3Server) -> None:
    """`If-None-Match: *`: the second writer of a key is refused, the first stays."""
    store = _store(server)
    obstore.put(store, "s1/create-only", DATA, mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(store, "s1/create-only", b"another writer", mode="create")
    with pytest.raises(ClientError) as refused:
        _client(server).put_object(
            Bucket=BUCKET, Key="s1/create-only", Body=b"x", IfNoneMatch="*"
        )
    assert _status(refused.value) == 412
    assert bytes(obstore.get(store, "s1/create-only").bytes()) == DATA


def test_the_server_refuses_a_body_that_does_not_match_its_sha256(
    server: S3Server,
) -> None:
    """A checksum sent with the body is verified: a wrong one stores nothing."""
    client = _client(server)
    client.put_object(
        Bucket=BUCKET, Key="s1/checked", Body=DATA, ChecksumSHA256=_sha256(DATA)
    )
    with pytest.raises(ClientError):
        client.put_object(
            Bucket=BUCKET, Key="s1/corrupt", Body=DATA, ChecksumSHA256=_sha256(b"x")
        )
    with pytest.raises(ClientError) as missing:
        client.head_object(Bucket=BUCKET, Key="s1/corrupt")
    assert _status(missing.value) == 404


def test_a_ranged_read_returns_exactly_the_bytes_asked_for(server: S3Server) -> None:
    """A page read is one ranged GET of the chunks it touches."""
    store = _store(server)
    obstore.put(store, "s1/ranged", DATA, mode="create")
    start = DATA.index(b"line 77777\n")
    got = obstore.get_range(store, "s1/ranged", start=start, end=start + 22)
    assert bytes(got) == b"line 77777\nline 77778\n"


def test_a_delete_is_conditional_on_the_etag(server: S3Server) -> None:
    """`If-Match`: an object changed since it was checked is not deleted."""
    client = _client(server)
    put = client.put_object(Bucket=BUCKET, Key="s1/conditional", Body=DATA)
    with pytest.raises(ClientError) as refused:
        client.delete_object(
            Bucket=BUCKET, Key="s1/conditional", IfMatch='"' + "0" * 32 + '"'
        )
    assert _status(refused.value) == 412
    assert (
        client.head_object(Bucket=BUCKET, Key="s1/conditional")["ETag"] == put["ETag"]
    )
    client.delete_object(Bucket=BUCKET, Key="s1/conditional", IfMatch=put["ETag"])
    with pytest.raises(ClientError) as gone:
        client.head_object(Bucket=BUCKET, Key="s1/conditional")
    assert _status(gone.value) == 404


def test_with_versioning_a_deleted_object_stays_recoverable(server: S3Server) -> None:
    """A versioned bucket keeps what a delete removed, until a lifecycle ends it."""
    client = _client(server)
    client.create_bucket(Bucket="versioned")
    client.put_bucket_versioning(
        Bucket="versioned", VersioningConfiguration={"Status": "Enabled"}
    )
    put = client.put_object(Bucket="versioned", Key="s1/kept", Body=DATA)
    client.delete_object(Bucket="versioned", Key="s1/kept")
    with pytest.raises(ClientError):
        client.head_object(Bucket="versioned", Key="s1/kept")
    old = client.get_object(
        Bucket="versioned", Key="s1/kept", VersionId=put["VersionId"]
    )
    assert old["Body"].read() == DATA
