"""The official SDKs' own objects in a history, made plain JSON-ready dicts.

`anthropic` and `openai` answer with pydantic models (`Message`, `TextBlock`,
`ToolUseBlock`, `ChatCompletionMessage`, its tool calls) that callers append to
their histories as they are. Neither the SDKs nor pydantic are dependencies:
a model can only be in a history if pydantic is already imported.
"""

from __future__ import annotations

import copy
import sys
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

if TYPE_CHECKING:
    from collections.abc import Sequence

# The fields of the request message types: anthropic's `MessageParam` and
# openai's `ChatCompletionMessageParam` (all roles). A response message also
# carries fields no request declares (anthropic's id, model, usage, stop
# reason...; openai's annotations and a `parse()` result), which the APIs
# refuse or, at best, ignore.
_MESSAGE_KEYS = {
    "anthropic": frozenset({"role", "content"}),
    "openai": frozenset(
        {
            "role",
            "content",
            "name",
            "refusal",
            "audio",
            "function_call",
            "tool_calls",
            "tool_call_id",
        }
    ),
}


class _Model(Protocol):
    """The part of a pydantic (v2) model used here."""

    def model_dump(
        self, *, mode: str, by_alias: bool, exclude_none: bool, exclude: object
    ) -> dict[str, Any]:
        """Return the model as a dict."""


def plain_history(messages: Sequence[object], *, fmt: str) -> list[dict[str, Any]]:
    """Return the history as a new list of plain dicts, SDK objects converted.

    A dict holding no model is kept as it is (the caller's object); a model,
    or a dict holding one anywhere, becomes a new dict sharing nothing with the
    input. Raises TypeError naming the path and type of any message, block or
    tool call that is neither a dict nor a model.
    """
    plain = []
    for index, message in enumerate(messages):
        path = f"messages[{index}]"
        if _is_model(message):
            converted = _request_message(_dump(message), fmt, path)
        elif isinstance(message, dict):
            converted = _plain_copy(message) if _holds_model(message) else message
        else:
            raise TypeError(_not_an_item(path, message))
        _check_message(converted, path)
        plain.append(converted)
    return plain


def _is_model(value: object) -> TypeGuard[_Model]:
    # Nothing can be a model of a pydantic that was never imported.
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _dump(model: _Model) -> dict[str, Any]:
    """Return a model in the JSON form the SDKs send it in, without nulls.

    The SDKs encode a model in a request as JSON-mode, by wire name (alias),
    less its `__api_exclude__` fields, and less its unset fields. Nulls are
    left out here instead of unset fields: a model parsed from a response
    counts every null it came with as set, a model built in code does not,
    and every nullable field of the SDKs' request types may as well be
    absent. So a block has one form however it was made. A null inside a
    dict field (a tool call's input) is data and stays.
    """
    return model.model_dump(
        mode="json",
        by_alias=True,
        exclude_none=True,
        exclude=getattr(model, "__api_exclude__", None),
    )


def _request_message(dumped: dict[str, Any], fmt: str, path: str) -> dict[str, Any]:
    """Return a dumped response message as the request message it stands for."""
    if "role" not in dumped:
        msg = f"{path} is an SDK object without a role, not a message"
        raise TypeError(msg)
    message = {key: dumped[key] for key in dumped if key in _MESSAGE_KEYS[fmt]}
    audio = message.get("audio")
    if isinstance(audio, dict):
        # A request names an earlier audio reply by id only: the response's
        # base64 data, transcript and expiry are no request fields.
        message["audio"] = {"id": audio["id"]}
    return message


def _holds_model(value: object) -> bool:
    if _is_model(value):
        return True
    if isinstance(value, dict):
        return any(_holds_model(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_model(item) for item in value)
    return False


def _plain_copy(value: object) -> Any:
    """Return a deep copy of `value` with every model dumped."""
    if _is_model(value):
        return _dump(value)
    if isinstance(value, dict):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_copy(item) for item in value]
    return copy.deepcopy(value)


def _check_message(message: dict[str, Any], path: str) -> None:
    """Check that the blocks and tool calls of a converted message are dicts."""
    content = message.get("content")
    if isinstance(content, list):
        for index, block in enumerate(content):
            _check_block(block, f'{path}["content"][{index}]')
    elif content is not None and not isinstance(content, str):
        raise TypeError(_not_content(f'{path}["content"]', content))
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list):
        msg = f'{path}["tool_calls"] must be a list, not {type(calls).__name__}'
        raise TypeError(msg)
    for index, call in enumerate(calls):
        if not isinstance(call, dict):
            raise TypeError(_not_an_item(f'{path}["tool_calls"][{index}]', call))


def _check_block(block: object, path: str) -> None:
    if not isinstance(block, dict):
        raise TypeError(_not_an_item(path, block))
    if block.get("type") != "tool_result":
        return
    content = block.get("content", "")
    if isinstance(content, list):
        for index, inner in enumerate(content):
            if not isinstance(inner, dict):
                raise TypeError(_not_an_item(f'{path}["content"][{index}]', inner))
    elif not isinstance(content, str):
        raise TypeError(_not_content(f'{path}["content"]', content))


def _not_an_item(path: str, value: object) -> str:
    return f"{path} must be a dict or a pydantic model, not {type(value).__name__}"


def _not_content(path: str, value: object) -> str:
    return f"{path} must be a string or a list of blocks, not {type(value).__name__}"


__all__ = ["plain_history"]
