"""The gate on MCP results: tool results and resource reads, in wire form.

A result's text blocks together are the output: under the bound they pass
untouched; over it they are stored as one artifact (blocks in order, each
starting on a new line) and replaced, where the first of them stood, by one text
block with the preview and notice. Image, audio, resource and resource-link
blocks stay as they are, where they are. `isError` is kept, and the header
says so. A structured copy is measured with the text: when the two together
would pass the bound, the copy is stored too (unless it holds nothing but the
stored text) and replaced as `structured` decides. A result the gate cannot
store passes untouched (S1.2.5): losing output is worse than a long one.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any, Final

from spillvault.adapters.mcp.limits import STRUCTURED_ROOM
from spillvault.domain.notice import READ_TOOL, SUGGESTED_READ_LIMIT, call_argument

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from spillvault.adapters.mcp.structured import StubRule
    from spillvault.adapters.services.externalizer import SessionExternalizer
    from spillvault.domain.policy import SpillPolicy

logger = logging.getLogger(__name__)

RESOURCE_TOOL: Final = "resources/read"
META_KEY: Final = "io.spillvault/handles"
"""The `_meta` key of a gated result: which handle holds what was replaced."""


class ResultGate:
    """Gates results through a session created on the first spill."""

    def __init__(
        self,
        policy: SpillPolicy,
        externalizer: Callable[[], SessionExternalizer],
        *,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        # The bound is the policy's, known without the session: a result under
        # it must not create one.
        self._text_limit = policy.default_limit.limit
        self._externalizer = externalizer
        # The session is shared with the read tools, which run on other threads.
        self._lock = lock or contextlib.nullcontext()

    def tool_result(
        self, tool: str, result: dict[str, Any], rule: StubRule | None
    ) -> dict[str, Any] | None:
        """Return the gated `CallToolResult`, or None when it passes untouched."""
        with self._lock:
            return self._tool_result(tool, result, rule)

    def resource_result(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """Return the gated `ReadResourceResult`, or None when it passes untouched."""
        with self._lock:
            return self._resource_result(result)

    def _tool_result(
        self, tool: str, result: dict[str, Any], rule: StubRule | None
    ) -> dict[str, Any] | None:
        content = result.get("content")
        if not isinstance(content, list):
            return None
        texts = [i for i, block in enumerate(content) if _is_text_block(block)]
        text_size = sum(len(content[i]["text"]) for i in texts)
        structured = result.get("structuredContent")
        has_structured = "structuredContent" in result and structured is not None
        spill_text = bool(texts) and text_size > self._text_limit
        # Measured only when the text stays: a spilled text takes its copy along.
        over_with_structured = has_structured and (
            spill_text
            or text_size + len(_json(structured)) > self._text_limit + STRUCTURED_ROOM
        )
        if not spill_text and not over_with_structured:
            return None
        ext = self._externalizer()
        gated = dict(result)
        handles: dict[str, str] = {}
        joined = _joined([content[i]["text"] for i in texts])
        if spill_text:
            is_error = result.get("isError") is True
            outcome = ext.process(_storable(joined), tool, is_error=is_error)
            if outcome.artifact is None:
                return None
            handles["content"] = outcome.artifact.handle
            block = {"type": "text", "text": str(outcome.content)}
            gated["content"] = _replace_blocks(content, texts, block)
        if has_structured:
            handle = self._store_structured(ext, tool, structured, joined, handles)
            if handle is None:
                return None
            handles["structuredContent"] = handle
            pointer = _pointer(handle, is_the_text=handle == handles.get("content"))
            if rule is None:
                gated.pop("structuredContent", None)
            else:
                gated["structuredContent"] = rule.stub(pointer)
            if not spill_text:
                gated["content"] = [*content, {"type": "text", "text": pointer}]
        return _with_meta(gated, handles)

    def _resource_result(self, result: dict[str, Any]) -> dict[str, Any] | None:
        contents = result.get("contents")
        if not isinstance(contents, list):
            return None
        texts = [i for i, item in enumerate(contents) if _is_text_item(item)]
        if sum(len(contents[i]["text"]) for i in texts) <= self._text_limit:
            return None
        joined = _joined([contents[i]["text"] for i in texts])
        outcome = self._externalizer().process(_storable(joined), RESOURCE_TOOL)
        if outcome.artifact is None:
            return None
        first = contents[texts[0]]
        item = {"uri": first.get("uri"), "mimeType": "text/plain"}
        item["text"] = str(outcome.content)
        gated = dict(result)
        gated["contents"] = _replace_blocks(contents, texts, item)
        return _with_meta(gated, {"contents": outcome.artifact.handle})

    @staticmethod
    def _store_structured(
        ext: SessionExternalizer,
        tool: str,
        structured: object,
        joined: str,
        handles: dict[str, str],
    ) -> str | None:
        """Store the structured copy, or name the text artifact that holds it."""
        text_handle = handles.get("content")
        if text_handle is not None and _only_the_text(structured, joined):
            return text_handle
        try:
            pretty = json.dumps(structured, ensure_ascii=False, indent=1)
            return ext.externalize(_storable(pretty) + "\n", tool).artifact.handle
        except Exception as error:  # noqa: BLE001 - S1.2.5: keep the output
            logger.warning("spillvault: storing structured content failed: %s", error)
            return None


def _is_text_block(block: object) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _is_text_item(item: object) -> bool:
    return isinstance(item, dict) and isinstance(item.get("text"), str)


def _joined(texts: list[str]) -> str:
    """Join blocks as lines: a newline between two only where the first lacks one."""
    parts = [text if text.endswith("\n") else text + "\n" for text in texts[:-1]]
    return "".join([*parts, *texts[-1:]])


def _storable(text: str) -> str:
    """Return `text` as UTF-8 can hold it: a lone surrogate becomes U+FFFD.

    JSON from JavaScript servers carries them (a string cut inside an emoji);
    UTF-8 cannot, and a store that fails would pass the whole result on.
    """
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _only_the_text(structured: object, joined: str) -> bool:
    """Tell whether the structured copy is nothing but the text, field by field."""
    return (
        isinstance(structured, dict)
        and bool(structured)
        and all(value == joined for value in structured.values())
    )


def _replace_blocks(
    items: list[Any], replaced: list[int], new: dict[str, Any]
) -> list[Any]:
    """Put `new` where the first replaced item stood and drop the others."""
    gone = set(replaced)
    out = []
    for i, item in enumerate(items):
        if i == replaced[0]:
            out.append(new)
        elif i not in gone:
            out.append(item)
    return out


def _pointer(handle: str, *, is_the_text: bool) -> str:
    """Return the one line that says where the structured copy is stored."""
    what = "holds the text stored as" if is_the_text else "stored as JSON in"
    call = f"handle={call_argument(handle)}, start_line=1, limit={SUGGESTED_READ_LIMIT}"
    return f"[structured content {what} {handle}; read: {READ_TOOL}({call})]"


def _with_meta(result: dict[str, Any], handles: dict[str, str]) -> dict[str, Any]:
    own = result.get("_meta")
    meta = dict(own) if isinstance(own, dict) else {}
    meta[META_KEY] = handles
    return {**result, "_meta": meta}


__all__ = ["META_KEY", "RESOURCE_TOOL", "ResultGate"]
