"""The gate on MCP results, with a real session: bounds, order, exact storage."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from spillvault.adapters.mcp.limits import STRUCTURED_ROOM, mcp_policy
from spillvault.adapters.mcp.results import META_KEY, ResultGate
from spillvault.adapters.mcp.structured import StubRule
from spillvault.adapters.session import open_session

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

LIMIT = 6_000
IMAGE = {"type": "image", "data": "AAAA", "mimeType": "image/png"}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """One session with a small MCP bound, shared by a module's examples."""
    path = tmp_path_factory.mktemp("mcp") / "gate"
    with open_session(path, policy=mcp_policy(LIMIT)) as opened:
        yield opened


def _gate(session: Session) -> ResultGate:
    return ResultGate(mcp_policy(LIMIT), lambda: session.externalizer)


def _whole(result: dict[str, Any]) -> int:
    text = sum(len(b["text"]) for b in result["content"] if b.get("type") == "text")
    structured = result.get("structuredContent")
    return text + (0 if structured is None else len(json.dumps(structured)))


def _lines(count: int, mark: str) -> str:
    return "".join(f"{mark} {n}\n" for n in range(count))


_blocks = st.lists(
    st.one_of(
        st.integers(0, 2_000).map(lambda n: {"type": "text", "text": _lines(n, "t")}),
        st.just(IMAGE),
    ),
    max_size=5,
)
_rules = st.sampled_from([None, StubRule(), StubRule(("content",))])


@settings(max_examples=60)
@given(content=_blocks, structured_rows=st.none() | st.integers(0, 3_000), rule=_rules)
def test_a_gated_result_fits_the_bound_keeps_its_other_blocks_and_stores_the_text(
    session: Session,
    content: list[dict[str, Any]],
    structured_rows: int | None,
    rule: StubRule | None,
) -> None:
    """Under the bound: untouched. Over it: within the bound, nothing else lost."""
    result: dict[str, Any] = {"content": content}
    if structured_rows is not None:
        result["structuredContent"] = {"content": _lines(structured_rows, "s")}
    gated = _gate(session).tool_result("tool", result, rule)
    texts = [block["text"] for block in content if block.get("type") == "text"]
    over = sum(map(len, texts)) > LIMIT - STRUCTURED_ROOM or _whole(result) > LIMIT
    event("spilled" if over else "untouched")
    if not over:
        assert gated is None
        return
    assert gated is not None
    assert _whole(gated) <= LIMIT
    assert [b for b in gated["content"] if b.get("type") != "text"] == [
        b for b in content if b.get("type") != "text"
    ]
    handles = gated["_meta"][META_KEY]
    if "content" in handles:
        stored = session.externalizer.read_artifact_bytes(handles["content"], 0, 10**9)
        assert stored.decode() == "".join(
            t if t.endswith("\n") or i == len(texts) - 1 else t + "\n"
            for i, t in enumerate(texts)
        )
    if structured_rows is not None and rule is None:
        assert "structuredContent" not in gated
    elif structured_rows is not None:
        stub = gated["structuredContent"]
        assert sorted(stub) == sorted(rule.pointer_fields)
        assert all(value.startswith("[structured content") for value in stub.values())


def test_a_structured_copy_equal_to_the_text_is_not_stored_twice(
    session: Session,
) -> None:
    """The filesystem server's `{"content": text}` points at the text's artifact."""
    text = _lines(2_000, "row")
    result = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"content": text},
    }
    gated = _gate(session).tool_result("read", result, StubRule(("content",)))
    assert gated is not None
    handles = gated["_meta"][META_KEY]
    assert handles["structuredContent"] == handles["content"]
    assert gated["structuredContent"]["content"].startswith(
        f"[structured content holds the text stored as {handles['content']}"
    )


def test_an_error_result_keeps_is_error_and_says_so(session: Session) -> None:
    """`isError` stays, and the header marks the stored output as an error."""
    result = {
        "content": [{"type": "text", "text": _lines(2_000, "e")}],
        "isError": True,
    }
    gated = _gate(session).tool_result("tool", result, None)
    assert gated is not None
    assert gated["isError"] is True
    assert "is_error: true" in gated["content"][0]["text"]


def test_existing_meta_is_kept_beside_the_handles(session: Session) -> None:
    """The server's own `_meta` entries survive the gate."""
    result = {
        "content": [{"type": "text", "text": _lines(2_000, "m")}],
        "_meta": {"server/trace": "abc"},
    }
    gated = _gate(session).tool_result("tool", result, None)
    assert gated is not None
    assert gated["_meta"]["server/trace"] == "abc"
    assert set(gated["_meta"][META_KEY]) == {"content"}


def test_resource_contents_are_gated_and_blobs_kept(session: Session) -> None:
    """Text contents over the bound become one preview item; blobs stay."""
    blob = {"uri": "x://b", "blob": "AAAA", "mimeType": "application/octet-stream"}
    result = {
        "contents": [
            {"uri": "x://a", "text": _lines(1_000, "a"), "mimeType": "text/markdown"},
            blob,
            {"uri": "x://c", "text": _lines(1_000, "c")},
        ]
    }
    gated = _gate(session).resource_result(result)
    assert gated is not None
    first, second = gated["contents"]
    assert first["uri"] == "x://a"
    assert first["mimeType"] == "text/plain"
    assert len(first["text"]) <= LIMIT
    assert second == blob
    small = {"contents": [{"uri": "x://s", "text": "short"}]}
    assert _gate(session).resource_result(small) is None


def test_a_result_under_the_bound_never_opens_the_session() -> None:
    """The gate measures with the policy alone: no session for small results."""
    opened = threading.Event()

    def externalizer() -> Any:
        opened.set()
        raise AssertionError

    gate = ResultGate(mcp_policy(LIMIT), externalizer)
    small = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"a": 1}}
    assert gate.tool_result("tool", small, None) is None
    assert gate.resource_result({"contents": [{"uri": "u", "text": "ok"}]}) is None
    assert not opened.is_set()


def test_a_failed_store_passes_the_result_untouched(tmp_path: Path) -> None:
    """S1.2.5: when storing fails, the original is kept, not lost."""
    with open_session(tmp_path / "full", policy=mcp_policy(LIMIT)) as broken:
        ext = broken.externalizer

        def fail(*_args: object, **_kwargs: object) -> Any:
            raise OSError(28, "No space left on device")

        ext._store = fail  # type: ignore[method-assign]
        result = {"content": [{"type": "text", "text": _lines(2_000, "f")}]}
        assert (
            ResultGate(mcp_policy(LIMIT), lambda: ext).tool_result("t", result, None)
            is None
        )


def test_a_lone_surrogate_is_stored_as_a_replacement_character(
    session: Session,
) -> None:
    """JavaScript servers cut emoji in half; the result is still stored, not passed."""
    text = _lines(1_000, "s") + "cut \ud83d here\n"
    result = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"content": text, "extra": 1},
    }
    gated = _gate(session).tool_result("tool", result, StubRule(("content",)))
    assert gated is not None
    handles = gated["_meta"][META_KEY]
    stored = session.externalizer.read_artifact_bytes(handles["content"], 0, 10**9)
    assert stored.decode().endswith("cut \ufffd\ufffd\ufffd here\n")
    assert handles["structuredContent"] != handles["content"]
