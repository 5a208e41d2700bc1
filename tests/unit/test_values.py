"""Value objects: strict source ids, claims (S2.3, S4.1, S4.2), observations (S5.1)."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.enums import ArtifactReconciliationStatus
from spillvault.domain.errors import ArtifactRetentionError
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactMemoryReference,
    ArtifactReconciliationReport,
    ArtifactReference,
    ArtifactReferenceObservation,
    ArtifactRetentionClaim,
    ArtifactSource,
    ArtifactSourceId,
    artifact_filename,
    artifact_number,
    parse_artifact_source_id,
)

from support.numbers import BEYOND_STR, HUGE, hostile_numbers, is_finite, is_int

session_ids = st.text(
    alphabet=st.characters(blacklist_characters=":/\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=30,
).filter(lambda s: s not in {".", ".."})
digests = st.binary(max_size=64).map(lambda b: hashlib.sha256(b).hexdigest())
numbers = st.integers(min_value=1, max_value=10**7)


@given(session_ids, numbers, digests)
def test_source_ids_round_trip(session_id: str, number: int, digest: str) -> None:
    source = ArtifactSourceId.for_artifact(
        session_id, artifact_filename(number), digest
    )
    assert parse_artifact_source_id(str(source)) == source
    assert source.matches_digest(digest)
    assert (
        str(source)
        == f"artifact:{session_id}:{artifact_filename(number)}:{digest[:12]}"
    )


@given(numbers)
def test_artifact_names_have_three_digits_minimum_and_parse_back(number: int) -> None:
    name = artifact_filename(number)
    assert len(name.split("_")[-1].split(".")[0]) == max(3, len(str(number)))
    assert artifact_number(name) == number


@pytest.mark.parametrize(
    "name",
    ["tool_result_1.txt", "tool_result_0001.txt", "tool_result_000.txt",
     "tool_result_001.txt.bak", "../tool_result_001.txt", "tool_result_001.TXT"],
)  # fmt: skip
def test_non_canonical_artifact_names_are_not_ours(name: str) -> None:
    assert artifact_number(name) is None


@pytest.mark.parametrize("digits", [21, 4301, 5000])
def test_a_name_with_more_than_20_digits_is_no_artifact_name(digits: int) -> None:
    # int() refuses more than 4300 digits with a bare ValueError: never reach it
    name = f"tool_result_{'1' * digits}.txt"
    assert artifact_number(name) is None
    with pytest.raises(ArtifactRetentionError, match="names no artifact file"):
        parse_artifact_source_id(f"artifact:s:{name}:abcdefabcdef")
    with pytest.raises(ArtifactRetentionError, match="names no artifact file"):
        ArtifactRetentionClaim(f"artifact:s:{name}:{'a' * 12}", "a" * 64)
    most = f"tool_result_{'9' * 20}.txt"
    assert artifact_number(most) == 10**20 - 1


@pytest.mark.parametrize(
    ("source_id", "fault"),
    [
        ("artifact:s:tool_result_001.txt:abc", "malformed"),
        ("artifact:s:tool_result_001.txt:ABCDEFABCDEF", "malformed"),
        ("file:s:tool_result_001.txt:abcdefabcdef", "malformed"),
        ("artifact:s:../etc/passwd:abcdefabcdef", "malformed"),
        ("artifact:s:notes.txt:abcdefabcdef", "path-free"),
        ("artifact:a:b:tool_result_001.txt:abcdefabcdef", "malformed"),
        ("artifact:..:tool_result_001.txt:abcdefabcdef", "invalid session id"),
        ("artifact:s\x00:tool_result_001.txt:abcdefabcdef", "malformed"),
        (42, "must be a string"),
    ],
)
def test_malformed_source_ids_are_refused(source_id: object, fault: str) -> None:
    with pytest.raises(ArtifactRetentionError, match=fault):
        parse_artifact_source_id(source_id)


def claim_args(digest: str) -> tuple[str, str]:
    return f"artifact:s:tool_result_001.txt:{digest[:12]}", digest


@given(digests, digests)
def test_a_claim_whose_digest_prefix_differs_is_refused(a: str, b: str) -> None:
    source_id, _ = claim_args(a)
    if a[:12] == b[:12]:
        assert ArtifactRetentionClaim(source_id, b).content_sha256 == b
    else:
        with pytest.raises(ArtifactRetentionError, match="different artifact"):
            ArtifactRetentionClaim(source_id, b)


@pytest.mark.parametrize(
    "count",
    [
        0,
        -1,
        1.5,
        True,
        "2",
        math.nan,
        math.inf,
        2**63,
        HUGE,
        pytest.param(BEYOND_STR, id="10**5000"),
    ],
)
def test_reference_counts_must_be_positive_integers(count: object) -> None:
    digest = "a" * 64
    with pytest.raises(ArtifactRetentionError, match="reference_count"):
        ArtifactRetentionClaim(*claim_args(digest), reference_count=count)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("until", "fault"),
    [("2026-01-01T00:00:00", "timezone-aware"), ("tomorrow", "not an ISO-8601"),
     (datetime(2026, 1, 1), "timezone-aware"), (17, "must be a datetime")],  # noqa: DTZ001
)  # fmt: skip
def test_retain_until_must_be_an_aware_timestamp(until: object, fault: str) -> None:
    with pytest.raises(ArtifactRetentionError, match=fault):
        ArtifactRetentionClaim(*claim_args("b" * 64), retain_until=until)  # type: ignore[arg-type]


@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
        max_value=datetime(2100, 1, 1),  # noqa: DTZ001
        timezones=st.just(timezone(timedelta(hours=5))),
    ),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)),
)
def test_claims_protect_strictly_before_retain_until(
    until: datetime, delta: timedelta
) -> None:
    claim = ArtifactRetentionClaim(
        *claim_args("c" * 64), retain_until=until.isoformat()
    )
    assert claim.retain_until_time == until
    assert claim.retain_until_time.tzinfo == UTC
    assert claim.is_active(until - delta) == (delta > timedelta(0))
    assert not claim.is_active(until)
    assert ArtifactRetentionClaim.from_dict(claim.to_dict()) == claim


def test_a_claim_without_retain_until_is_active_forever() -> None:
    claim = ArtifactRetentionClaim(*claim_args("d" * 64))
    assert claim.is_active(datetime.max.replace(tzinfo=UTC))


def test_claims_name_their_session() -> None:
    claim = ArtifactRetentionClaim(*claim_args("e" * 64))
    claim.check_session("s")
    with pytest.raises(ArtifactRetentionError, match="different artifact session"):
        claim.check_session("other")


def test_memory_reference_has_exactly_the_fields_of_spec() -> None:
    digest = "f" * 64
    source = ArtifactSource("artifact:s:tool_result_001.txt:ffffffffffff", "grep", "t")
    reference = ArtifactReference(Path("/h"), "summary", "grep", source, 10, digest)
    memory = reference.for_memory()
    assert isinstance(memory, ArtifactMemoryReference)
    assert memory.artifact_path == reference.handle == "/h"  # JSON-ready text
    assert set(memory.to_dict()) == {
        "summary", "artifact_path", "content_sha256", "source_tool", "source",
    }  # fmt: skip
    assert memory.to_dict()["source"]["source_type"] == "artifact"
    claim = ArtifactRetentionClaim.from_memory_reference(memory, reference_count=2)
    assert (claim.source_id, claim.reference_count) == (source.source_id, 2)


@pytest.mark.parametrize(
    ("kwargs", "fault"),
    [
        ({"transaction_id": "", "generation": 0, "presence": "absent"}, "transaction"),
        ({"transaction_id": "t", "generation": -1, "presence": "absent"}, ">= 0"),
        ({"transaction_id": "t", "generation": True, "presence": "absent"}, "integer"),
        ({"transaction_id": "t", "generation": 1, "presence": "published",
          "absence_sealed": True}, "sealed absence"),
    ],
)  # fmt: skip
def test_contradictory_observations_are_refused(kwargs: dict, fault: str) -> None:
    with pytest.raises(ArtifactRetentionError, match=fault):
        ArtifactReferenceObservation(**kwargs)


def test_reconciliation_reports_carry_exactly_four_fields() -> None:
    report = ArtifactReconciliationReport(
        "t", ArtifactReconciliationStatus.PENDING_UNKNOWN, "owner_result_unknown", 3
    )
    assert report.to_dict() == {
        "transaction_id": "t",
        "status": "pending_unknown",
        "reason": "owner_result_unknown",
        "observed_generation": 3,
    }
    with pytest.raises(ValueError, match="ArtifactReconciliationReason"):
        ArtifactReconciliationReport(
            "t", ArtifactReconciliationStatus.PENDING_UNKNOWN, "the owner is down"
        )


# ---------------------------------------------------------------- cleanup policy

MAX_TTL = 999_999_999 * 86400  # what a timedelta holds


def test_a_nan_ttl_is_refused() -> None:
    # NaN compared false with every age, so GC deleted what was just spilled.
    with pytest.raises(ArtifactRetentionError, match="orphan_ttl_seconds"):
        ArtifactCleanupPolicy(orphan_ttl_seconds=math.nan)


@given(
    field=st.sampled_from(["orphan_ttl_seconds", "max_deletions", "dry_run"]),
    value=hostile_numbers,
)
def test_every_cleanup_setting_is_checked_by_name(field: str, value: object) -> None:
    if field == "orphan_ttl_seconds":
        valid = is_finite(value) and 0 <= value <= MAX_TTL  # type: ignore[operator]
    elif field == "max_deletions":
        valid = value is None or (is_int(value) and 0 <= value <= 2**63 - 1)  # type: ignore[operator]
    else:
        valid = isinstance(value, bool)
    if valid:
        policy = ArtifactCleanupPolicy(**{field: value})  # type: ignore[arg-type]
        assert getattr(policy, field) == value
    else:
        with pytest.raises(ArtifactRetentionError, match=field):
            ArtifactCleanupPolicy(**{field: value})  # type: ignore[arg-type]
