"""Microcompact (S7.1) and the context ladder (S7.2) on real sessions, both formats."""

from __future__ import annotations

import copy
import logging
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_messages import (
    HEADER_START,
    HUGE,
    IMAGE,
    anthropic_call,
    anthropic_result,
    assert_pairing,
    assert_sdk_valid,
    formats_and_histories,
    fresh_session,
    openai_call,
    openai_result,
    record_ids,
    text,
)

from spillvault.adapters.harness.messages import (
    gate_messages,
    iter_tool_results,
    text_of,
)
from spillvault.adapters.harness.microcompact import (
    ContextPolicy,
    canonical_json,
    history_size,
    microcompact,
    placeholder_for,
    prepare_context,
)
from spillvault.adapters.session import open_session
from spillvault.domain.errors import SpillPolicyError

from support.numbers import hostile_numbers, is_int

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session, ToolResultExternalizer

HANDLE = re.compile(r"full output: (\S+);")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    opened = open_session(tmp_path / "s")
    yield opened
    opened.close()


@pytest.fixture
def ext(session: Session) -> ToolResultExternalizer:
    return session.externalizer


def anthropic_history(
    count: int, *, size: int = 2_000, tool: str = "bash"
) -> list[dict[str, Any]]:
    """One call per turn, each answered by `size` characters."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for n in range(count):
        messages.append(
            {"role": "assistant", "content": [anthropic_call(f"t{n}", tool)]}
        )
        messages.append(
            {
                "role": "user",
                "content": [anthropic_result(f"t{n}", text(f"r{n}", size))],
            }
        )
    return messages


def openai_history(count: int, *, size: int = 2_000) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for n in range(count):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [openai_call(f"c{n}", "bash")],
            }
        )
        messages.append(
            openai_result(f"c{n}", [{"type": "text", "text": text(f"r{n}", size)}])
        )
    return messages


def contents(messages: list[dict[str, Any]], fmt: str) -> dict[str, Any]:
    return {r.tool_use_id: r.content for r in iter_tool_results(messages, format=fmt)}


def assert_pages_back(
    ext: ToolResultExternalizer,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    fmt: str,
    cleared: tuple[str, ...],
) -> None:
    """Each cleared result names a handle that reads back the original text."""
    old, new = contents(before, fmt), contents(after, fmt)
    for tool_use_id in cleared:
        placeholder = text_of(new[tool_use_id])
        assert placeholder is not None
        match = HANDLE.search(placeholder)
        assert match is not None
        assert placeholder == placeholder_for(match.group(1))
        assert ext.read_artifact(match.group(1), offset=0, limit=10**9) == text_of(
            old[tool_use_id]
        )


# microcompact --------------------------------------------------------------------


def test_under_the_trigger_nothing_changes(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(5)
    size = history_size(history, len)
    new, report = microcompact(
        history, format="anthropic", keep_recent=0, trigger=size, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert new == history
    assert report.triggered is False
    assert report.freed == 0
    assert report.cleared == ()
    assert record_ids(ext) == []


def test_clears_oldest_first_until_enough_is_freed(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(6)
    before = copy.deepcopy(history)
    size = history_size(history, len)
    new, report = microcompact(
        history, format="anthropic", keep_recent=1, trigger=size - 1,
        clear_at_least=3_000, counter=len, externalizer=ext,
    )  # fmt: skip
    assert history == before
    assert report.triggered is True
    assert report.cleared == ("t0", "t1")
    assert report.stored == ("t0", "t1")
    assert report.freed >= 3_000
    assert report.size_after == history_size(new, len)
    assert report.size_before == size
    assert report.skipped == {"kept_recent": 1}
    assert contents(new, "anthropic")["t2"] == contents(history, "anthropic")["t2"]
    assert_pairing(history, new, "anthropic")
    assert_sdk_valid(new, "anthropic")
    assert_pages_back(ext, history, new, "anthropic", report.cleared)
    assert record_ids(ext) == ["t0", "t1"]


def test_keeps_clearing_until_back_under_the_trigger(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(6)
    size = history_size(history, len)
    new, report = microcompact(
        history, format="anthropic", keep_recent=2, trigger=size - 5_000,
        clear_at_least=1, counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("t0", "t1", "t2")
    assert report.size_after == history_size(new, len) <= size - 5_000


def test_never_the_newest_results(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(4)
    new, report = microcompact(
        history, format="anthropic", keep_recent=3, trigger=0, clear_at_least=10**9,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("t0",)
    assert report.skipped == {"kept_recent": 3}
    assert new[4:] == history[4:]
    _, none = microcompact(
        history, format="anthropic", keep_recent=10, trigger=0, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert none.cleared == ()
    assert none.skipped == {"kept_recent": 4}


def test_excluded_tools_and_images_are_not_candidates(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(3)
    history[1]["content"][0]["name"] = "todo"
    history[4]["content"][0]["content"] = [
        {"type": "text", "text": text("i", 5_000)},
        IMAGE,
    ]
    new, report = microcompact(
        history, format="anthropic", keep_recent=0, trigger=0, clear_at_least=10**9,
        exclude_tools=["todo"], counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("t2",)
    assert report.skipped == {"excluded": 1, "non_text": 1}
    assert new[:5] == history[:5]
    assert_sdk_valid(new, "anthropic")


def test_is_idempotent(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(6)
    kwargs: dict[str, Any] = {
        "format": "anthropic", "keep_recent": 2, "clear_at_least": 2_500,
        "trigger": history_size(history, len) - 1, "counter": len, "externalizer": ext,
    }  # fmt: skip
    once, first = microcompact(history, **kwargs)
    twice, second = microcompact(once, **kwargs)
    assert first.cleared == ("t0", "t1")
    assert twice == once
    assert second.cleared == ()
    assert second.stored == ()
    # The second run sees the first's output, already within its trigger.
    assert second.triggered is False
    thrice, third = microcompact(once, **{**kwargs, "trigger": 0})
    assert third.skipped["already_cleared"] == 2
    assert third.cleared == ("t2", "t3")
    assert record_ids(ext) == ["t0", "t1", "t2", "t3"]
    assert_pages_back(ext, history, thrice, "anthropic", ("t0", "t1", "t2", "t3"))


def test_a_spilled_result_is_cleared_to_its_existing_artifact(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(3)
    history[2]["content"][0]["content"] = text("big", HUGE)
    history[2]["content"][0]["is_error"] = True
    gated, outcomes = gate_messages(history, format="anthropic", externalizer=ext)
    assert outcomes[0].reason == "spilled"
    assert gated[2]["content"][0]["content"].startswith(HEADER_START)
    new, report = microcompact(
        gated, format="anthropic", keep_recent=2, trigger=0, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("t0",)
    assert report.stored == ()
    assert new[2]["content"][0]["is_error"] is True
    assert outcomes[0].artifact is not None
    handle = outcomes[0].artifact.handle
    assert new[2]["content"][0]["content"] == placeholder_for(handle)
    assert_pages_back(ext, history, new, "anthropic", ("t0",))
    assert record_ids(ext) == ["t0"]


def test_without_an_externalizer_unstored_results_stay(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(3)
    new, report = microcompact(
        history, format="anthropic", keep_recent=0, trigger=0, clear_at_least=1,
    )  # fmt: skip
    assert new == history
    assert report.triggered is True
    assert report.skipped == {"not_stored": 3}


def test_a_result_smaller_than_its_placeholder_stays(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(2, size=20)
    new, report = microcompact(
        history, format="anthropic", keep_recent=0, trigger=0, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert new == history
    assert report.skipped == {"too_small": 2}
    assert record_ids(ext) == []


def test_a_failed_store_keeps_the_result(
    ext: ToolResultExternalizer, caplog: pytest.LogCaptureFixture
) -> None:
    history = anthropic_history(2)
    history[2]["content"][0]["content"] = "lone \ud800 surrogate " * 200
    with caplog.at_level(logging.WARNING, logger="spillvault"):
        new, report = microcompact(
            history, format="anthropic", keep_recent=0, trigger=0, clear_at_least=10**9,
            counter=len, externalizer=ext,
        )  # fmt: skip
    assert report.cleared == ("t1",)
    assert report.skipped == {"store_failed": 1}
    assert new[2] == history[2]
    assert "failed" in caplog.text


def test_a_deleted_artifact_is_not_replaced_by_its_preview(
    ext: ToolResultExternalizer, session: Session
) -> None:
    history = anthropic_history(2)
    history[2]["content"][0]["content"] = text("big", HUGE)
    gated, _ = gate_messages(history, format="anthropic", externalizer=ext)
    artifact = next(ext.artifacts())
    artifact.mark_lost(detected_at=datetime.now(UTC))
    session.store.save_aggregates(artifact)
    new, report = microcompact(
        gated, format="anthropic", keep_recent=0, trigger=0, clear_at_least=10**9,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.skipped == {"artifact_unavailable": 1}
    assert report.cleared == ("t1",)
    assert new[2] == gated[2]


def test_openai_format(ext: ToolResultExternalizer) -> None:
    history = openai_history(4)
    history[3]["tool_calls"].append(openai_call("extra", "grep"))
    history.insert(5, openai_result("extra", text("e", 3_000)))
    before = copy.deepcopy(history)
    new, report = microcompact(
        history, format="openai", keep_recent=1, trigger=0, clear_at_least=10**9,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert history == before
    assert report.cleared == ("c0", "c1", "extra", "c2")
    assert new[2]["content"][0]["type"] == "text"
    assert len(new[2]["content"]) == 1
    assert isinstance(new[5]["content"], str)
    assert_pairing(history, new, "openai")
    assert_sdk_valid(new, "openai")
    assert_pages_back(ext, history, new, "openai", report.cleared)


def test_default_counter_is_the_policy_token_counter(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(3)
    tokens = ext.policy.token_counter(canonical_json(history))
    _, report = microcompact(
        history, format="anthropic", keep_recent=0, trigger=tokens,
        clear_at_least=1, externalizer=ext,
    )  # fmt: skip
    assert report.triggered is False
    assert report.size_before == tokens
    _, plain = microcompact(
        history, format="anthropic", keep_recent=0, trigger=10**9, clear_at_least=1
    )
    assert plain.size_before == len(canonical_json(history))


def test_report_to_dict(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(2)
    _, report = microcompact(
        history, format="anthropic", keep_recent=1, trigger=0, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.to_dict() == {
        "triggered": True,
        "size_before": report.size_before,
        "size_after": report.size_after,
        "freed": report.size_before - report.size_after,
        "cleared": ["t0"],
        "stored": ["t0"],
        "skipped": {"kept_recent": 1},
    }


@pytest.mark.parametrize("name", ["keep_recent", "trigger", "clear_at_least"])
@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_amounts_are_refused(name: str, value: object) -> None:
    kwargs: dict[str, Any] = {"keep_recent": 1, "trigger": 1, "clear_at_least": 1}
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        microcompact([], format="anthropic", **kwargs)
    with pytest.raises(ValueError, match="format must be"):
        microcompact([], format="claude", keep_recent=1, trigger=1, clear_at_least=1)


@settings(max_examples=40)
@given(
    formats_and_histories,
    st.integers(0, 4),
    st.integers(0, 400_000),
    st.integers(0, 200_000),
)
def test_microcompact_keeps_pairs_pages_back_and_is_idempotent(
    case: tuple[str, list[dict[str, Any]]], keep_recent: int, trigger: int, clear: int
) -> None:
    fmt, history = case
    before = copy.deepcopy(history)
    with fresh_session() as session:
        ext = session.externalizer
        kwargs: dict[str, Any] = {
            "format": fmt, "keep_recent": keep_recent, "trigger": trigger,
            "clear_at_least": clear, "counter": len, "externalizer": ext,
        }  # fmt: skip
        new, report = microcompact(history, **kwargs)
        assert history == before
        assert_pairing(history, new, fmt)
        assert_sdk_valid(new, fmt)
        assert report.size_after == history_size(new, len)
        assert set(report.stored) <= set(report.cleared)
        if not report.triggered:
            assert new == history
        assert_pages_back(ext, history, new, fmt, report.cleared)
        recent = [r.tool_use_id for r in iter_tool_results(history, format=fmt)]
        kept = recent[len(recent) - keep_recent :] if keep_recent else []
        assert not set(kept) & set(report.cleared)
        again, second = microcompact(new, **kwargs)
        assert again == new
        assert second.cleared == ()
        assert second.stored == ()


# the ladder -------------------------------------------------------------------


def test_prepare_context_gates_then_compacts(ext: ToolResultExternalizer) -> None:
    history = anthropic_history(5)
    history[-1]["content"][0]["content"] = text("big", HUGE)
    policy = ContextPolicy(
        trigger=6_000, clear_at_least=1_000, full_compaction_at=8_000, keep_recent=1,
        counter=len,
    )  # fmt: skip
    new, report = prepare_context(
        history, format="anthropic", externalizer=ext, policy=policy
    )
    assert report.gated == (
        ("t0", "under_limit"), ("t1", "under_limit"), ("t2", "under_limit"),
        ("t3", "under_limit"), ("t4", "spilled"),
    )  # fmt: skip
    assert report.spilled == ("t4",)
    # Still over the trigger after each clearing: every candidate goes.
    assert report.microcompact.cleared == ("t0", "t1", "t2", "t3")
    assert report.size_before == history_size(history, len)
    assert report.size_after == history_size(new, len)
    # The spilled preview (up to 30,000 chars) is recent and stays.
    assert report.needs_full_compaction is True
    assert_pairing(history, new, "anthropic")
    assert_sdk_valid(new, "anthropic")
    assert_pages_back(ext, history, new, "anthropic", report.microcompact.cleared)
    again, second = prepare_context(
        new, format="anthropic", externalizer=ext, policy=policy
    )
    assert again == new
    assert second.gated == ()
    assert second.microcompact.cleared == ()
    assert report.to_dict()["spilled"] == ["t4"]
    assert report.to_dict()["microcompact"]["cleared"] == ["t0", "t1", "t2", "t3"]


def test_prepare_context_spills_a_huge_text_beside_an_image_once(
    ext: ToolResultExternalizer,
) -> None:
    history = anthropic_history(2)
    history[-1]["content"][0]["content"] = [
        {"type": "text", "text": text("big", HUGE)},
        IMAGE,
    ]
    policy = ContextPolicy(
        trigger=0, clear_at_least=10**9, full_compaction_at=10**9, keep_recent=0,
        counter=len,
    )  # fmt: skip
    new, report = prepare_context(
        history, format="anthropic", externalizer=ext, policy=policy
    )
    assert report.gated == (("t0", "under_limit"), ("t1", "spilled"))
    # The text went to an artifact; the image beside it keeps the result from
    # being cleared down to a placeholder.
    assert report.microcompact.cleared == ("t0",)
    assert report.microcompact.skipped == {"non_text": 1}
    preview, image = new[-1]["content"][0]["content"]
    assert preview["text"].startswith(HEADER_START)
    assert image == IMAGE
    assert_sdk_valid(new, "anthropic")
    again, second = prepare_context(
        new, format="anthropic", externalizer=ext, policy=policy
    )
    assert again == new
    assert second.gated == ()
    assert record_ids(ext) == ["t1", "t0"]


def test_prepare_context_under_the_trigger(ext: ToolResultExternalizer) -> None:
    history = openai_history(2)
    policy = ContextPolicy(trigger=10**9, clear_at_least=1, full_compaction_at=10**9)
    new, report = prepare_context(
        history, format="openai", externalizer=ext, policy=policy
    )
    assert new == history
    assert report.microcompact.triggered is False
    assert report.needs_full_compaction is False
    assert report.size_after == report.size_before


CONTEXT_AMOUNTS = ("trigger", "clear_at_least", "full_compaction_at", "keep_recent")


@given(field=st.sampled_from(CONTEXT_AMOUNTS), value=hostile_numbers)
def test_every_context_amount_is_checked_by_name(field: str, value: object) -> None:
    kwargs: dict[str, Any] = {
        "trigger": 1,
        "clear_at_least": 1,
        "full_compaction_at": 1,
    }
    kwargs[field] = value
    if is_int(value) and 0 <= value <= 2**63 - 1:  # type: ignore[operator]
        assert getattr(ContextPolicy(**kwargs), field) == value
        return
    with pytest.raises(SpillPolicyError, match=field):
        ContextPolicy(**kwargs)
    if field != "full_compaction_at":
        amounts: dict[str, Any] = {
            "keep_recent": 1, "trigger": 1, "clear_at_least": 1, field: value,
        }  # fmt: skip
        with pytest.raises(SpillPolicyError, match=field):
            microcompact([], format="anthropic", **amounts)


def test_context_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="trigger"):
        ContextPolicy(trigger=-1, clear_at_least=1, full_compaction_at=1)
    with pytest.raises(ValueError, match="keep_recent"):
        ContextPolicy(trigger=1, clear_at_least=1, full_compaction_at=1, keep_recent=-2)
    with pytest.raises(TypeError, match="exclude_tools"):
        ContextPolicy(
            trigger=1, clear_at_least=1, full_compaction_at=1,
            exclude_tools=(1,),  # type: ignore[arg-type]
        )  # fmt: skip
    policy = ContextPolicy(
        trigger=1, clear_at_least=1, full_compaction_at=1,
        exclude_tools=["todo"],  # type: ignore[arg-type]
    )  # fmt: skip
    assert policy.exclude_tools == ("todo",)
    assert policy.keep_recent == 3
