"""The object-store artifact store on a real S3 server (SeaweedFS), issue 18.

The shipped `ArtifactStoreTestCase` runs here unchanged, then what only an
object store can show: create-only keys, a checksum the server verifies,
multipart uploads aborted on failure, ranged verified reads, and `confirm`
comparing the server's ETag and checksum with the recorded ones.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.storage.object_store import (
    PART_SIZE,
    ObjectArtifactStore,
    checksum_of_whole,
)
from spillvault.adapters.storage.s3_client import ObjectLocation, s3_client
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import ArtifactAccessError, ArtifactIntegrityError
from spillvault.testing import artifact_stores as artifact_store_conformance

from support.seaweedfs import S3Server, s3_environment

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.adapters.session import Session

_buckets = itertools.count(1)


def _new_bucket(client: Any) -> str:
    name = f"vault-{next(_buckets)}"
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """Point the standard AWS variables at the test server."""
    for name, value in s3_environment(s3_server).items():
        monkeypatch.setenv(name, value)
    return s3_server


class TestObjectArtifactStore(artifact_store_conformance.ArtifactStoreTestCase):
    """The shipped conformance suite, on SeaweedFS."""

    location: ObjectLocation

    @pytest.fixture(autouse=True)
    def _server(self, s3_env: S3Server) -> None:
        client = s3_client()
        self.location = ObjectLocation(_new_bucket(client), "fleet/a")

    def create_store(self, session: Session) -> ObjectArtifactStore:
        return ObjectArtifactStore(session, self.location, s3_client())

    def stored_names(self, session: Session) -> list[str]:
        store = self.create_store(session)
        uploads = [
            upload["Key"].rsplit("/", 1)[-1] + "(unfinished upload)"
            for upload in store.unfinished_uploads()
        ]
        return sorted([*store.object_names(), *uploads])

    def delete_content(self, session: Session, filename: str) -> None:
        key = self.location.key(session.session_id, filename)
        s3_client().delete_object(Bucket=self.location.bucket, Key=key)

    def hostile_handles(self, handle: str, filename: str) -> list[str]:
        return [
            *super().hostile_handles(handle, filename),
            self.location.url + "/" + handle,
            self.location.key(self.session.session_id, filename),
        ]


@pytest.fixture
def store(s3_env: S3Server, tmp_path: Any) -> Iterator[ObjectArtifactStore]:
    from spillvault.adapters.session import open_session  # noqa: PLC0415

    client = s3_client()
    location = ObjectLocation(_new_bucket(client))
    with open_session(tmp_path / "s1", event_store="memory") as session:
        yield ObjectArtifactStore(session, location, client)


def _lines(count: int) -> bytes:
    return b"".join(b"line %d\n" % n for n in range(1, count + 1))


def test_a_small_output_is_one_put_with_the_whole_sha256(
    store: ObjectArtifactStore,
) -> None:
    data = b"hello\n" * 100
    artifact = store.store([data], source_tool="t")
    facts = artifact.object_facts
    assert facts is not None
    assert facts.parts == 1
    assert facts.checksum_sha256 == checksum_of_whole(hashlib.sha256(data).hexdigest())
    head = store.head(artifact.filename)
    assert (head["etag"], head["checksum"], head["size"]) == (
        facts.etag,
        facts.checksum_sha256,
        len(data),
    )


def test_a_long_output_is_multipart_and_reads_back_by_ranges(
    store: ObjectArtifactStore,
) -> None:
    data = _lines(2_600_000)  # about 21 MB: three parts
    pieces = [data[i : i + 300_001] for i in range(0, len(data), 300_001)]
    artifact = store.store(pieces, source_tool="t")
    facts = artifact.object_facts
    assert facts is not None
    assert facts.parts == -(-len(data) // PART_SIZE)
    assert facts.checksum_sha256.endswith(f"-{facts.parts}")
    content = artifact.stored_content
    assert content is not None
    store.confirm(artifact.filename, content)
    blob = store.open_for_read(store.handle_for(artifact.filename))
    assert blob.size == len(data)
    start = 5 * CHUNK_SIZE - 7
    assert blob.read_at(start, 20) == data[start : start + 20]
    assert store.unfinished_uploads() == []


def test_a_failing_producer_after_parts_were_sent_aborts_the_upload(
    store: ObjectArtifactStore,
) -> None:
    def producer() -> Iterator[bytes]:
        yield b"x" * (2 * PART_SIZE + 5)
        msg = "tool crashed"
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="tool crashed"):
        store.store(producer(), source_tool="t")
    assert store.unfinished_uploads() == []
    assert store.object_names() == []


def test_a_key_taken_behind_our_back_is_never_overwritten(
    store: ObjectArtifactStore,
) -> None:
    squatter = store.key("tool_result_001.txt")
    store.client.put_object(Bucket=store.location.bucket, Key=squatter, Body=b"theirs")
    artifact = store.store([b"ours\n"], source_tool="t")
    assert artifact.filename == "tool_result_002.txt"
    kept = store.client.get_object(Bucket=store.location.bucket, Key=squatter)
    assert kept["Body"].read() == b"theirs"


def test_confirm_catches_an_object_replaced_behind_our_back(
    store: ObjectArtifactStore,
) -> None:
    artifact = store.store([b"original\n"], source_tool="t")
    content = artifact.stored_content
    assert content is not None
    store.client.put_object(
        Bucket=store.location.bucket,
        Key=store.key(artifact.filename),
        Body=b"forged\n\n",
    )
    with pytest.raises(ArtifactIntegrityError, match="not the recorded object"):
        store.confirm(artifact.filename, content)


def test_a_stream_on_another_host_is_not_readable_until_sealed(
    store: ObjectArtifactStore,
) -> None:
    stream = store.open_stream("bash")
    stream.write(b"running\n")
    elsewhere = ObjectArtifactStore(store.session, store.location, store.client)
    with pytest.raises(ArtifactAccessError, match="another host"):
        elsewhere.open_for_read(stream.handle)
    stream.close()
    blob = elsewhere.open_for_read(stream.handle)
    assert blob.read_at(0, 100) == b"running\n"


def test_a_local_path_is_refused_with_the_reason(store: ObjectArtifactStore) -> None:
    with pytest.raises(ArtifactAccessError, match="objects in s3://"):
        store.resolve("/tmp/tool-results/tool_result_001.txt")


@pytest.mark.parametrize(
    "url",
    ["", "file:///tmp/x", "s3://", "s3://A_B/x", "s3://ok-bucket/../x", "s3://b/x y"],
)
def test_a_bad_location_is_a_config_error(url: str) -> None:
    from spillvault.domain.errors import ObjectStoreConfigError  # noqa: PLC0415

    with pytest.raises(ObjectStoreConfigError):
        ObjectLocation.parse(url)


def test_a_location_round_trips() -> None:
    location = ObjectLocation.parse("s3://my-bucket/fleet//ci/")
    assert (location.bucket, location.prefix) == ("my-bucket", "fleet/ci")
    assert location.url == "s3://my-bucket/fleet/ci"
    assert location.key("s1", "tool_result_001.txt") == (
        "fleet/ci/s1/tool_result_001.txt"
    )


def test_a_page_is_one_ranged_get_of_the_chunks_it_touches(
    store: ObjectArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spillvault.adapters.services.reader import ArtifactReader  # noqa: PLC0415

    data = _lines(600_000)  # about 6 MiB
    artifact = store.store([data], source_tool="t")
    handle = store.handle_for(artifact.filename)
    boundary = data.count(b"\n", 0, 2 * CHUNK_SIZE)  # a page across chunks 1 and 2
    ranges: list[str] = []
    real = store.client.get_object

    def counting(**kwargs: Any) -> Any:
        ranges.append(kwargs["Range"])
        return real(**kwargs)

    monkeypatch.setattr(store.client, "get_object", counting)
    page = ArtifactReader(store.session, store).read_artifact(handle, boundary - 2, 5)
    expected = b"\n".join(data.split(b"\n")[boundary - 2 : boundary + 3]).decode()
    assert page == expected
    assert ranges == [f"bytes={CHUNK_SIZE}-{3 * CHUNK_SIZE - 1}"]
