"""The handle `<session-id>/<number>`: one spelling, round trips, bounds (S1.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.errors import ArtifactAccessError
from spillvault.domain.handles import (
    MAX_ARTIFACT_NUMBER,
    MAX_HANDLE_LENGTH,
    MAX_SESSION_ID_LENGTH,
    ArtifactHandle,
    handle_of,
    parse_handle,
)
from spillvault.domain.values import artifact_filename

SESSION_IDS = st.text(
    st.characters(blacklist_characters=":/\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=MAX_SESSION_ID_LENGTH,
).filter(lambda s: s not in {".", ".."})
NUMBERS = st.integers(1, MAX_ARTIFACT_NUMBER)


@given(SESSION_IDS, NUMBERS)
def test_handles_round_trip_and_stay_short(session_id: str, number: int) -> None:
    handle = handle_of(session_id, artifact_filename(number))
    assert len(handle) <= MAX_HANDLE_LENGTH
    assert parse_handle(handle) == ArtifactHandle(session_id, number)
    assert str(parse_handle(handle)) == handle
    assert parse_handle(handle).filename == artifact_filename(number)  # type: ignore[union-attr]


@given(SESSION_IDS, NUMBERS, st.sampled_from(["0", "+", " ", "-", "٣"]))
def test_only_the_canonical_spelling_parses(
    session_id: str, number: int, prefix: str
) -> None:
    assert parse_handle(f"{session_id}/{prefix}{number}") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "s",
        "s/",
        "/1",
        "s/0",
        "s/1/2",
        "s/1.0",
        "s/1_000",
        "a:b/1",
        "./1",
        "../1",
        "s/1\x00",
        f"s/{MAX_ARTIFACT_NUMBER + 1}",
        "/tmp/s/tool-results/tool_result_001.txt",
        None,
        1,
    ],
)
def test_what_is_not_a_handle(text: object) -> None:
    assert parse_handle(text) is None


def test_a_non_artifact_filename_has_no_handle() -> None:
    for name in ("notes.txt", "tool_result_1.txt", artifact_filename(10**12)):
        with pytest.raises(ArtifactAccessError):
            handle_of("s", name)
