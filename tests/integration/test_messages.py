"""Tool results in message histories and `gate_messages` (S7.2), both formats.

Shapes are checked against the official SDKs' request types (`anthropic`,
`openai`) through pydantic; the history strategy here is shared with
`test_microcompact.py`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.adapters.harness.messages import (
    gate_messages,
    iter_tool_results,
    replace_tool_results,
    text_of,
)
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import open_session

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.adapters.session import Session, ToolResultExternalizer

HUGE = 70_000  # over both default limits (bash 30,000 chars, others 51,200 bytes)
HEADER_START = "[tool result stored as "
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
}
ANTHROPIC = pydantic.TypeAdapter(list[anthropic.types.MessageParam])
OPENAI = pydantic.TypeAdapter(list[openai.types.chat.ChatCompletionMessageParam])


# helpers shared with test_microcompact -----------------------------------------


def _force(value: Any) -> Any:
    """Consume pydantic's lazy iterators so nested items are validated too."""
    if isinstance(value, dict):
        return {key: _force(item) for key, item in value.items()}
    if value is None or isinstance(value, str | bytes | int | float):
        return value
    return [_force(item) for item in value]


def assert_sdk_valid(messages: list[dict[str, Any]], fmt: str) -> None:
    adapter = ANTHROPIC if fmt == "anthropic" else OPENAI
    _force(adapter.validate_python(messages))


def text(seed: str, size: int) -> str:
    """Return `size` characters of numbered lines, distinct per seed."""
    lines = []
    total = 0
    number = 0
    while total < size:
        line = f"{seed} line {number} " + "x" * 40
        lines.append(line)
        total += len(line) + 1
        number += 1
    return "\n".join(lines)[:size]


def anthropic_call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"n": 1}}


def anthropic_result(
    call_id: str, content: str | list[dict[str, Any]], *, is_error: bool | None = None
) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": content,
    }
    if is_error is not None:
        block["is_error"] = is_error
    return block


def openai_call(call_id: str, name: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"n": 1})},
    }


def openai_result(call_id: str, content: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def joined_text(content: str | list[dict[str, Any]]) -> str:
    """Return what a result's text blocks spill as, read independently."""
    if isinstance(content, str):
        return content
    return "\n".join(block["text"] for block in content if block["type"] == "text")


def other_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return (
        [] if isinstance(content, str) else [b for b in content if b["type"] != "text"]
    )


def call_ids(messages: list[dict[str, Any]], fmt: str) -> list[str]:
    """Return every call id, read independently of the module under test."""
    ids = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        if fmt == "anthropic":
            content = message["content"]
            blocks = content if isinstance(content, list) else []
            ids += [b["id"] for b in blocks if b.get("type") == "tool_use"]
        else:
            ids += [call["id"] for call in message.get("tool_calls") or ()]
    return ids


def result_slots(
    messages: list[dict[str, Any]], fmt: str
) -> list[tuple[int, int | None, str]]:
    """Return (message, block, id) of every result, read independently."""
    slots: list[tuple[int, int | None, str]] = []
    for index, message in enumerate(messages):
        if fmt == "openai":
            if message["role"] == "tool":
                slots.append((index, None, message["tool_call_id"]))
            continue
        content = message["content"]
        for block_index, block in enumerate(
            content if isinstance(content, list) else []
        ):
            if block.get("type") == "tool_result":
                slots.append((index, block_index, block["tool_use_id"]))
    return slots


def skeleton(messages: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """Return a copy with every result's content blanked (all that may change)."""
    blank = copy.deepcopy(messages)
    for index, block_index, _ in result_slots(blank, fmt):
        target = (
            blank[index]
            if block_index is None
            else blank[index]["content"][block_index]
        )
        target["content"] = "<result>"
    return blank


def assert_pairing(
    before: list[dict[str, Any]], after: list[dict[str, Any]], fmt: str
) -> None:
    """Every call keeps exactly one result, in place, and nothing else changed."""
    assert skeleton(after, fmt) == skeleton(before, fmt)
    slots = result_slots(after, fmt)
    assert slots == result_slots(before, fmt)
    answered = Counter(call_id for _, _, call_id in slots)
    assert sorted(answered) == sorted(call_ids(after, fmt))
    assert set(answered.values()) == {1}


TOOLS = ("bash", "read_file", "grep", "web_fetch")
KINDS = ("small", "huge", "small_blocks", "huge_blocks", "empty", "image", "huge_image")
# An OpenAI tool message takes text parts only.
TEXT_KINDS = tuple(kind for kind in KINDS if not kind.endswith("image"))


@st.composite
def histories(draw: st.DrawFn, fmt: str) -> list[dict[str, Any]]:
    """Draw a valid history: turns of one to three parallel calls and their results."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Please look around."}
    ]
    for turn in range(draw(st.integers(1, 4))):
        calls = [
            (f"call_{turn}_{n}", draw(st.sampled_from(TOOLS)))
            for n in range(draw(st.integers(1, 3)))
        ]
        results = []
        for call_id, _ in calls:
            kinds = KINDS if fmt == "anthropic" else TEXT_KINDS
            kind = draw(st.sampled_from(kinds))
            size = HUGE if kind.startswith("huge") else draw(st.integers(1, 300))
            body = text(call_id, size)
            content: str | list[dict[str, Any]]
            if kind in {"small", "huge"}:
                content = body
            elif kind == "empty":
                content = ""
            elif kind.endswith("image"):
                content = [{"type": "text", "text": body}, IMAGE]
            else:
                content = [{"type": "text", "text": part} for part in (body, "done")]
            error = draw(st.sampled_from([None, False, True]))
            results.append((call_id, content, error))
        if fmt == "anthropic":
            preface = (
                [{"type": "text", "text": "Checking."}] if draw(st.booleans()) else []
            )
            messages.append(
                {
                    "role": "assistant",
                    "content": preface + [anthropic_call(i, name) for i, name in calls],
                }
            )
            blocks = [anthropic_result(i, c, is_error=e) for i, c, e in results]
            if draw(st.booleans()):
                blocks.append({"type": "text", "text": "Go on."})
            messages.append({"role": "user", "content": blocks})
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": draw(st.sampled_from([None, "Checking."])),
                    "tool_calls": [openai_call(i, name) for i, name in calls],
                }
            )
            messages += [openai_result(i, c) for i, c, _ in results]
            if draw(st.booleans()):
                messages.append({"role": "user", "content": "Go on."})
    messages.append({"role": "assistant", "content": "All done."})
    return messages


formats_and_histories = st.sampled_from(["anthropic", "openai"]).flatmap(
    lambda fmt: st.tuples(st.just(fmt), histories(fmt))
)


@contextlib.contextmanager
def fresh_session() -> Iterator[Session]:
    """Open a session in a fresh directory (Hypothesis examples cannot share one)."""
    with tempfile.TemporaryDirectory() as tmp:
        session = open_session(Path(tmp) / "s")
        try:
            yield session
        finally:
            session.close()


def record_ids(externalizer: ToolResultExternalizer) -> list[str | None]:
    records = session_projection(externalizer.session).artifact_records()
    return [record.tool_use_id for record in records.values()]


# fixtures --------------------------------------------------------------------


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    opened = open_session(tmp_path / "s")
    yield opened
    opened.close()


@pytest.fixture
def ext(session: Session) -> ToolResultExternalizer:
    return session.externalizer


def anthropic_parallel() -> list[dict[str, Any]]:
    """Two parallel calls (one huge and failing, one small with an image), then one."""
    return [
        {"role": "user", "content": "Run the tests."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running both."},
                anthropic_call("toolu_1", "bash"),
                anthropic_call("toolu_2", "screenshot"),
            ],
        },
        {
            "role": "user",
            "content": [
                anthropic_result("toolu_1", text("a", HUGE), is_error=True),
                anthropic_result("toolu_2", [{"type": "text", "text": "shot"}, IMAGE]),
                {"type": "text", "text": "Continue."},
            ],
        },
        {"role": "assistant", "content": [anthropic_call("toolu_3", "grep")]},
        {
            "role": "user",
            "content": [
                anthropic_result(
                    "toolu_3",
                    [
                        {"type": "text", "text": text("b", HUGE)},
                        {"type": "text", "text": "x"},
                    ],
                )
            ],
        },
    ]


def openai_parallel() -> list[dict[str, Any]]:
    """Two parallel calls (huge string, small parts), then a huge part list."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Run the tests."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                openai_call("call_1", "bash"),
                openai_call("call_2", "grep"),
            ],
        },
        openai_result("call_1", text("a", HUGE)),
        openai_result("call_2", [{"type": "text", "text": "two hits"}]),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [openai_call("call_3", "cat")],
        },
        openai_result("call_3", [{"type": "text", "text": text("c", HUGE)}]),
    ]


# iterating and rebuilding -----------------------------------------------------


def test_anthropic_results_in_order_with_names_and_flags() -> None:
    history = anthropic_parallel()
    assert_sdk_valid(history, "anthropic")
    found = list(iter_tool_results(history, format="anthropic"))
    assert [(r.message_index, r.block_index) for r in found] == [(2, 0), (2, 1), (4, 0)]
    assert [r.tool_use_id for r in found] == ["toolu_1", "toolu_2", "toolu_3"]
    assert [r.tool_name for r in found] == ["bash", "screenshot", "grep"]
    assert [r.is_error for r in found] == [True, False, False]
    assert found[1].content == history[2]["content"][1]["content"]
    assert text_of(found[1].content) is None
    assert text_of(found[2].content) == text("b", HUGE) + "\nx"


def test_openai_results_in_order_with_names() -> None:
    history = openai_parallel()
    history[5]["tool_calls"].append(
        {"id": "call_4", "type": "custom", "custom": {"name": "patch", "input": "x"}}
    )
    history.append(openai_result("call_4", "patched"))
    assert_sdk_valid(history, "openai")
    found = list(iter_tool_results(history, format="openai"))
    assert [(r.message_index, r.block_index) for r in found] == [
        (3, None),
        (4, None),
        (6, None),
        (7, None),
    ]
    assert [r.tool_name for r in found] == ["bash", "grep", "cat", "patch"]
    assert not any(r.is_error for r in found)


def test_a_result_without_an_earlier_call_is_refused() -> None:
    history = [{"role": "user", "content": [anthropic_result("toolu_x", "hi")]}]
    with pytest.raises(ValueError, match="has no earlier call"):
        list(iter_tool_results(history, format="anthropic"))
    history = [openai_result("call_x", "hi")]
    with pytest.raises(ValueError, match="has no earlier call"):
        list(iter_tool_results(history, format="openai"))


def test_bad_format_and_bad_messages_are_refused() -> None:
    with pytest.raises(ValueError, match="format must be"):
        list(iter_tool_results([], format="gemini"))
    with pytest.raises(TypeError, match="message 0 is not a dict"):
        list(iter_tool_results(["hello"], format="openai"))  # type: ignore[list-item]
    history = anthropic_parallel()
    history[2]["content"][0]["content"] = 42
    with pytest.raises(TypeError, match="must be a string or a list"):
        list(iter_tool_results(history, format="anthropic"))


def test_replace_copies_changed_messages_and_never_mutates() -> None:
    history = anthropic_parallel()
    before = copy.deepcopy(history)
    rebuilt = replace_tool_results(
        history, {(2, 0): "short", (4, 0): [{"type": "text", "text": "t"}]}
    )
    assert history == before
    assert rebuilt[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "short",
        "is_error": True,
    }
    assert rebuilt[2] is not history[2]
    assert rebuilt[2]["content"][1] == history[2]["content"][1]
    assert rebuilt[2]["content"][1] is not history[2]["content"][1]
    assert rebuilt[0] is history[0]
    assert rebuilt[4]["content"][0]["content"] == [{"type": "text", "text": "t"}]
    assert_pairing(history, rebuilt, "anthropic")
    assert_sdk_valid(rebuilt, "anthropic")


# gate_messages ------------------------------------------------------------------


def test_gate_messages_anthropic(ext: ToolResultExternalizer) -> None:
    history = anthropic_parallel()
    before = copy.deepcopy(history)
    gated, outcomes = gate_messages(history, format="anthropic", externalizer=ext)
    assert history == before
    assert [o.reason for o in outcomes] == ["spilled", "under_limit", "spilled"]
    first = gated[2]["content"][0]
    assert first["is_error"] is True
    assert isinstance(first["content"], str)
    assert first["content"].startswith(HEADER_START)
    assert len(first["content"]) <= 30_000
    assert gated[2]["content"][1] == history[2]["content"][1]
    third = gated[4]["content"][0]["content"]
    assert len(third) == 1
    assert third[0]["type"] == "text"
    assert third[0]["text"].startswith(HEADER_START)
    assert outcomes[0].artifact is not None
    assert outcomes[2].artifact is not None
    assert ext.read_artifact(outcomes[0].artifact, 0, 10**9) == text("a", HUGE)
    assert ext.read_artifact(outcomes[2].artifact, 0, 10**9) == text("b", HUGE) + "\nx"
    assert record_ids(ext) == ["toolu_1", "toolu_3"]
    assert_pairing(history, gated, "anthropic")
    assert_sdk_valid(gated, "anthropic")


def test_gate_messages_openai(ext: ToolResultExternalizer) -> None:
    history = openai_parallel()
    before = copy.deepcopy(history)
    gated, outcomes = gate_messages(history, format="openai", externalizer=ext)
    assert history == before
    assert [o.reason for o in outcomes] == ["spilled", "under_limit", "spilled"]
    assert gated[3]["content"].startswith(HEADER_START)
    assert gated[4] is history[4]
    assert gated[6]["content"][0]["text"].startswith(HEADER_START)
    assert record_ids(ext) == ["call_1", "call_3"]
    assert_pairing(history, gated, "openai")
    assert_sdk_valid(gated, "openai")


def test_gate_messages_log_arm_spills_exempt_tools(ext: ToolResultExternalizer) -> None:
    history = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [openai_call("c", "read_file")],
        },
        openai_result("c", text("r", HUGE)),
    ]
    _, model = gate_messages(history, format="openai", externalizer=ext)
    _, log = gate_messages(history, format="openai", externalizer=ext, arm="log")
    assert [o.reason for o in model] == ["exempt_tool"]
    assert [o.reason for o in log] == ["spilled"]


def test_gate_messages_without_results_changes_nothing(
    ext: ToolResultExternalizer,
) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    gated, outcomes = gate_messages(history, format="anthropic", externalizer=ext)
    assert gated == history
    assert outcomes == []


# a text beside an image -------------------------------------------------------

SECOND_IMAGE = {
    "type": "image",
    "source": {"type": "url", "url": "https://example.test/after.png"},
}


def screenshot_history(
    content: list[dict[str, Any]], tool: str
) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [anthropic_call("toolu_s", tool)]},
        {"role": "user", "content": [anthropic_result("toolu_s", content)]},
    ]


def test_a_huge_text_beside_an_image_is_spilled_and_the_image_kept(
    ext: ToolResultExternalizer,
) -> None:
    history = screenshot_history(
        [{"type": "text", "text": text("s", HUGE)}, IMAGE], "screenshot"
    )
    before = copy.deepcopy(history)
    gated, outcomes = gate_messages(history, format="anthropic", externalizer=ext)
    assert history == before
    [outcome] = outcomes
    assert outcome.reason == "spilled"
    assert outcome.artifact is not None
    preview, image = gated[2]["content"][0]["content"]
    assert outcome.content == [preview, image]
    assert preview["type"] == "text"
    assert preview["text"].startswith(HEADER_START)
    assert outcome.artifact.handle in preview["text"]
    assert json.dumps(image) == json.dumps(IMAGE)
    assert ext.read_artifact(outcome.artifact, 0, 10**9) == text("s", HUGE)
    assert record_ids(ext) == ["toolu_s"]
    assert_pairing(history, gated, "anthropic")
    assert_sdk_valid(gated, "anthropic")


def test_text_blocks_spill_as_one_preview_ahead_of_the_other_blocks(
    ext: ToolResultExternalizer,
) -> None:
    cache = {"type": "ephemeral"}
    first = {"type": "text", "text": text("p", HUGE), "cache_control": cache}
    content: list[dict[str, Any]] = [
        IMAGE, first, SECOND_IMAGE, {"type": "text", "text": "tail"},
    ]  # fmt: skip
    history = screenshot_history(content, "screenshot")
    gated, [outcome] = gate_messages(history, format="anthropic", externalizer=ext)
    assert outcome.artifact is not None
    preview, *rest = gated[2]["content"][0]["content"]
    # The first text block's other keys stay, as for an all-text result.
    assert preview == {"type": "text", "text": preview["text"], "cache_control": cache}
    assert outcome.artifact.handle in preview["text"]
    assert rest == [IMAGE, SECOND_IMAGE]
    spilled = ext.read_artifact(outcome.artifact, 0, 10**9)
    assert spilled == text("p", HUGE) + "\ntail"
    assert_sdk_valid(gated, "anthropic")


@pytest.mark.parametrize(
    ("tool", "size", "reason"),
    [("screenshot", 200, "under_limit"), ("read_file", HUGE, "exempt_tool")],
)
def test_a_kept_text_beside_an_image_is_untouched(
    ext: ToolResultExternalizer, tool: str, size: int, reason: str
) -> None:
    history = screenshot_history(
        [{"type": "text", "text": text("k", size)}, IMAGE], tool
    )
    gated, [outcome] = gate_messages(history, format="anthropic", externalizer=ext)
    assert outcome.reason == reason
    assert outcome.content is history[2]["content"][0]["content"]
    assert gated[2] is history[2]
    assert record_ids(ext) == []


@settings(max_examples=40)
@given(formats_and_histories)
def test_gating_keeps_every_pair_in_place(
    case: tuple[str, list[dict[str, Any]]],
) -> None:
    fmt, history = case
    assert_sdk_valid(history, fmt)
    before = copy.deepcopy(history)
    with fresh_session() as session:
        ext = session.externalizer
        gated, outcomes = gate_messages(history, format=fmt, externalizer=ext)
        assert history == before
        assert_pairing(history, gated, fmt)
        assert_sdk_valid(gated, fmt)
        results = list(iter_tool_results(history, format=fmt))
        assert len(outcomes) == len(results)
        for result, outcome in zip(results, outcomes, strict=True):
            if outcome.reason == "spilled":
                assert outcome.artifact is not None
                original = joined_text(result.content)
                assert ext.read_artifact(outcome.artifact, 0, 10**9) == original
                assert outcome.artifact.handle in joined_text(outcome.content)
                assert other_blocks(outcome.content) == other_blocks(result.content)
            else:
                assert outcome.content is result.content
