"""Histories holding the official SDKs' own objects, as the README's loops build them.

Every SDK object here is a real `anthropic` / `openai` type made in-process,
parsed from a response body the way the SDKs parse one (no network).
"""

from __future__ import annotations

import copy
import json
import re
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from anthropic.types import (
    ImageBlockParam,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from test_messages import (
    HEADER_START,
    HUGE,
    IMAGE,
    anthropic_call,
    anthropic_result,
    assert_sdk_valid,
    openai_call,
    openai_result,
    record_ids,
    text,
)

from spillvault.adapters.harness.messages import gate_messages
from spillvault.adapters.harness.microcompact import (
    ContextPolicy,
    microcompact,
    placeholder_for,
    prepare_context,
)
from spillvault.adapters.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session, ToolResultExternalizer

# What each converted item must equal: the SDK's request shapes, nulls left out.
TEXT = {"type": "text", "text": "Running both."}
USE_1 = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"n": 1}}
# A null inside a tool's input is the model's own argument: it stays.
USE_2 = {
    "type": "tool_use",
    "id": "toolu_2",
    "name": "grep",
    "input": {"pattern": "x", "path": None},
}
CALLS = [openai_call("call_1", "bash"), openai_call("call_2", "grep")]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    opened = open_session(tmp_path / "s")
    yield opened
    opened.close()


@pytest.fixture
def ext(session: Session) -> ToolResultExternalizer:
    return session.externalizer


def anthropic_reply() -> anthropic.types.Message:
    """Return a Messages API reply with two tool calls, as the SDK parses it."""
    return anthropic.types.Message.model_validate(
        {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "text", "text": "Running both.", "citations": None},
                {**USE_1, "caller": None},
                USE_2,
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "container": None,
            "usage": {"input_tokens": 12, "output_tokens": 34},
        }
    )


def openai_reply(**fields: object) -> openai.types.chat.ChatCompletionMessage:
    """Return a Chat Completions reply message with two tool calls, as parsed."""
    message = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": CALLS,
        **fields,
    }
    completion = openai.types.chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4.1",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "logprobs": None,
                    "message": message,
                }
            ],
        }
    )
    return completion.choices[0].message


def anthropic_results(small: str = "two hits") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            anthropic_result("toolu_1", text("a", HUGE)),
            anthropic_result("toolu_2", small),
        ],
    }


def keys(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


ANTHROPIC_BLOCKS = {
    "text": TextBlockParam,
    "image": ImageBlockParam,
    "tool_use": ToolUseBlockParam,
    "tool_result": ToolResultBlockParam,
}
OPENAI_MESSAGES = {
    "user": ChatCompletionUserMessageParam,
    "assistant": ChatCompletionAssistantMessageParam,
    "tool": ChatCompletionToolMessageParam,
}


def assert_request_fields(messages: list[dict[str, Any]], fmt: str) -> None:
    """Every message, block and call has only fields its SDK request type declares.

    Pydantic ignores extra keys of a TypedDict; the APIs need not.
    """
    for message in messages:
        if fmt == "anthropic":
            assert set(message) <= {"role", "content"}
            content = message["content"]
            for block in content if isinstance(content, list) else []:
                assert set(block) <= keys(ANTHROPIC_BLOCKS[block["type"]])
            continue
        assert set(message) <= keys(OPENAI_MESSAGES[message["role"]])
        for call in message.get("tool_calls") or []:
            assert set(call) <= keys(ChatCompletionMessageFunctionToolCallParam)


def reference_for(ext: ToolResultExternalizer, tool_use_id: str) -> Any:
    """Return the reference of the artifact stored for a tool_use_id."""
    [artifact] = [a for a in ext.artifacts() if a.tool_use_id == tool_use_id]
    return ext.store.reference_for(artifact)


# Anthropic --------------------------------------------------------------------


def test_anthropic_reply_content_appended_as_it_is(
    ext: ToolResultExternalizer,
) -> None:
    reply = anthropic_reply()
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "Run the tests."},
        {"role": "assistant", "content": reply.content},
        anthropic_results(),
    ]
    before = copy.deepcopy(history)
    dumped = reply.model_dump()
    gated, outcomes = gate_messages(history, format="anthropic", externalizer=ext)
    assert [o.reason for o in outcomes] == ["spilled", "under_limit"]
    artifact = outcomes[0].artifact
    assert artifact is not None
    preview = gated[2]["content"][0]["content"]
    assert preview == outcomes[0].content
    assert preview.startswith(HEADER_START)
    assert artifact.handle in preview
    assert ext.read_artifact(artifact, 0, 10**9) == text("a", HUGE)
    assert gated[2]["content"][1] == history[2]["content"][1]
    assert gated[1] == {"role": "assistant", "content": [TEXT, USE_1, USE_2]}
    json.dumps(gated)
    assert history == before
    assert history[1]["content"] is reply.content
    assert reply.model_dump() == dumped
    assert_sdk_valid(gated, "anthropic")
    assert_request_fields(gated, "anthropic")


def test_anthropic_whole_reply_through_prepare_context(
    ext: ToolResultExternalizer,
) -> None:
    reply = anthropic_reply()
    history: list[object] = [
        {"role": "user", "content": "Run the tests."},
        reply,
        anthropic_results(),
    ]
    policy = ContextPolicy(trigger=10**9, clear_at_least=1, full_compaction_at=10**9)
    new, report = prepare_context(
        history, format="anthropic", externalizer=ext, policy=policy
    )
    assert report.gated == (("toolu_1", "spilled"), ("toolu_2", "under_limit"))
    # Only the request fields: no id, model, stop_reason or usage.
    assert new[1] == {"role": "assistant", "content": [TEXT, USE_1, USE_2]}
    assert reference_for(ext, "toolu_1").handle in new[2]["content"][0]["content"]
    assert new[2]["content"][1] == anthropic_result("toolu_2", "two hits")
    assert new[0] is history[0]
    assert history[1] is reply
    json.dumps(new)
    assert_sdk_valid(new, "anthropic")
    assert_request_fields(new, "anthropic")
    again, second = prepare_context(
        new, format="anthropic", externalizer=ext, policy=policy
    )
    assert again == new
    # Stored results are never gated twice; a small one has nothing stored.
    assert second.gated == (("toolu_2", "under_limit"),)


def test_microcompact_clears_results_beside_sdk_objects(
    ext: ToolResultExternalizer,
) -> None:
    history: list[object] = [{"role": "user", "content": "Run the tests."}]
    for turn in range(3):
        reply = anthropic.types.Message(
            id=f"msg_{turn}",
            type="message",
            role="assistant",
            model="claude-sonnet-4-5",
            content=[
                anthropic.types.TextBlock(type="text", text="Again."),
                anthropic.types.ToolUseBlock(
                    type="tool_use", id=f"t{turn}", name="bash", input={"n": turn}
                ),
            ],
            stop_reason="tool_use",
            stop_sequence=None,
            usage=anthropic.types.Usage(input_tokens=1, output_tokens=1),
        )
        result = anthropic_result(f"t{turn}", text(f"r{turn}", 2_000))
        history += [reply, {"role": "user", "content": [result]}]
    before = copy.deepcopy(history)
    new, report = microcompact(
        history, format="anthropic", keep_recent=1, trigger=0, clear_at_least=10**9,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("t0", "t1")
    for index, tool_use_id in ((2, "t0"), (4, "t1")):
        handle = reference_for(ext, tool_use_id).handle
        assert new[index]["content"][0]["content"] == placeholder_for(handle)
    assert new[6]["content"][0]["content"] == text("r2", 2_000)
    assert new[1]["content"][1] == {
        "type": "tool_use", "id": "t0", "name": "bash", "input": {"n": 0},
    }  # fmt: skip
    assert history == before
    json.dumps(new)
    assert_sdk_valid(new, "anthropic")
    assert_request_fields(new, "anthropic")


# OpenAI -----------------------------------------------------------------------


def test_openai_reply_message_appended_as_it_is(ext: ToolResultExternalizer) -> None:
    reply = openai_reply()
    history: list[object] = [
        {"role": "user", "content": "Run the tests."},
        reply,
        openai_result("call_1", text("a", HUGE)),
        openai_result("call_2", "two hits"),
    ]
    before = copy.deepcopy(history)
    gated, outcomes = gate_messages(history, format="openai", externalizer=ext)
    assert [o.reason for o in outcomes] == ["spilled", "under_limit"]
    artifact = outcomes[0].artifact
    assert artifact is not None
    assert gated[2]["content"] == outcomes[0].content
    assert gated[2]["content"].startswith(HEADER_START)
    assert artifact.handle in gated[2]["content"]
    assert gated[3] is history[3]
    # No null fields and no response-only `annotations`.
    assert gated[1] == {"role": "assistant", "tool_calls": CALLS}
    json.dumps(gated)
    assert history == before
    assert history[1] is reply
    assert_sdk_valid(gated, "openai")
    assert_request_fields(gated, "openai")


def test_openai_tool_call_objects_in_a_dict_message(
    ext: ToolResultExternalizer,
) -> None:
    reply = openai_reply()
    assistant = {"role": "assistant", "content": None, "tool_calls": reply.tool_calls}
    history: list[object] = [
        {"role": "user", "content": "Run the tests."},
        assistant,
        openai_result("call_1", text("a", 3_000)),
        openai_result("call_2", text("b", 3_000)),
    ]
    new, report = microcompact(
        history, format="openai", keep_recent=1, trigger=0, clear_at_least=1,
        counter=len, externalizer=ext,
    )  # fmt: skip
    assert report.cleared == ("call_1",)
    handle = reference_for(ext, "call_1").handle
    assert new[2]["content"] == placeholder_for(handle)
    # The caller's dict keeps its own keys; only the objects in it are dumped.
    assert new[1] == {"role": "assistant", "content": None, "tool_calls": CALLS}
    assert assistant["tool_calls"] is reply.tool_calls
    json.dumps(new)
    assert_sdk_valid(new, "openai")
    assert_request_fields(new, "openai")


def test_response_only_fields_are_left_out(ext: ToolResultExternalizer) -> None:
    reply = openai_reply(
        content="See the docs.",
        tool_calls=None,
        annotations=[
            {
                "type": "url_citation",
                "url_citation": {
                    "start_index": 0, "end_index": 3, "title": "Docs",
                    "url": "https://example.test/docs",
                },
            }
        ],
        audio={
            "id": "audio_1", "data": "UklGRg==", "expires_at": 1_700_003_600,
            "transcript": "See the docs.",
        },
    )  # fmt: skip
    history: list[object] = [{"role": "user", "content": "Where?"}, reply]
    gated, _ = gate_messages(history, format="openai", externalizer=ext)
    # A request names an earlier audio reply by its id alone.
    assert gated[1] == {
        "role": "assistant",
        "content": "See the docs.",
        "audio": {"id": "audio_1"},
    }
    assert_sdk_valid(gated, "openai")
    assert_request_fields(gated, "openai")


# what comes back --------------------------------------------------------------


def test_plain_messages_come_back_as_they_are_converted_ones_share_nothing(
    ext: ToolResultExternalizer,
) -> None:
    reply = anthropic_reply()
    first = {"role": "user", "content": "Run the tests."}
    holder = {"role": "assistant", "content": reply.content}
    results = anthropic_results()
    results["content"][0]["content"] = "short now"
    gated, _ = gate_messages(
        [first, holder, results], format="anthropic", externalizer=ext
    )
    assert gated[0] is first
    assert gated[2] is results
    assert gated[1] is not holder
    gated[1]["content"][2]["input"]["pattern"] = "changed"
    call = reply.content[2]
    assert isinstance(call, anthropic.types.ToolUseBlock)
    assert call.input == {"pattern": "x", "path": None}


# malformed histories ----------------------------------------------------------


def _gate(history: list[object], fmt: str, ext: ToolResultExternalizer) -> object:
    return gate_messages(history, format=fmt, externalizer=ext)


def _compact(history: list[object], fmt: str, ext: ToolResultExternalizer) -> object:
    return microcompact(
        history, format=fmt, keep_recent=0, trigger=0, clear_at_least=1,
        externalizer=ext,
    )  # fmt: skip


def _prepare(history: list[object], fmt: str, ext: ToolResultExternalizer) -> object:
    policy = ContextPolicy(trigger=0, clear_at_least=1, full_compaction_at=0)
    return prepare_context(history, format=fmt, externalizer=ext, policy=policy)


def _anthropic(*later: object) -> list[object]:
    """Return a huge result, then `later`: nothing may be stored before a refusal."""
    return [
        {"role": "assistant", "content": [anthropic_call("toolu_1", "bash")]},
        {"role": "user", "content": [anthropic_result("toolu_1", text("a", HUGE))]},
        *later,
    ]


MALFORMED: list[tuple[str, list[object], str]] = [
    (
        "anthropic",
        _anthropic(42),
        "messages[2] must be a dict or a pydantic model, not int",
    ),
    (
        "anthropic",
        _anthropic({"role": "user", "content": ["hi"]}),
        'messages[2]["content"][0] must be a dict or a pydantic model, not str',
    ),
    (
        "anthropic",
        _anthropic(
            {"role": "assistant", "content": [anthropic_call("toolu_2", "bash")]},
            {"role": "user", "content": [anthropic_result("toolu_2", [IMAGE, b"x"])]},  # type: ignore[list-item]
        ),
        (
            'messages[3]["content"][0]["content"][1] must be a dict or a pydantic '
            "model, not bytes"
        ),
    ),
    (
        "anthropic",
        _anthropic({"role": "user", "content": [anthropic_result("toolu_1", 7)]}),  # type: ignore[arg-type]
        (
            'messages[2]["content"][0]["content"] must be a string or a list of '
            "blocks, not int"
        ),
    ),
    (
        "anthropic",
        _anthropic({"role": "user", "content": ("a", "tuple")}),
        'messages[2]["content"] must be a string or a list of blocks, not tuple',
    ),
    (
        "anthropic",
        _anthropic(anthropic.types.TextBlock(type="text", text="hi")),
        "messages[2] is an SDK object without a role, not a message",
    ),
    (
        "openai",
        [{"role": "assistant", "tool_calls": ["call_1"]}],
        'messages[0]["tool_calls"][0] must be a dict or a pydantic model, not str',
    ),
    (
        "openai",
        [{"role": "assistant", "tool_calls": "call_1"}],
        'messages[0]["tool_calls"] must be a list, not str',
    ),
]


@pytest.mark.parametrize("run", [_gate, _compact, _prepare])
@pytest.mark.parametrize(("fmt", "history", "message"), MALFORMED)
def test_a_bad_item_is_refused_by_its_path_and_type(
    ext: ToolResultExternalizer,
    run: Callable[[list[object], str, ToolResultExternalizer], object],
    fmt: str,
    history: list[object],
    message: str,
) -> None:
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        run(history, fmt, ext)
    assert record_ids(ext) == []
