"""Which stand-in a spilled result's structured copy gets, by the tool's schema."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from spillvault.adapters.mcp.structured import MAX_STUB_PROPERTIES, stub_rule

FILESYSTEM = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"content": {"type": "string"}},
    "required": ["content"],
    "additionalProperties": False,
}

_leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "string", "description": "text"},
        {"type": "string", "maxLength": 5},
        {"type": "string", "enum": ["a", "b"]},
        {"type": "number"},
        {"type": "array", "items": {"type": "string"}},
        {"type": "boolean"},
    ]
)
_names = st.text(alphabet="abcdefgh", min_size=1, max_size=6)


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """Object schemas with a mix of property kinds and required lists."""
    properties = draw(st.dictionaries(_names, _leaf, max_size=6))
    required = (
        draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
        if properties
        else []
    )
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    if draw(st.booleans()):
        schema["minProperties"] = draw(st.integers(0, 3))
    return schema


@given(object_schemas(), st.text(max_size=300))
def test_every_stub_a_rule_gives_is_valid_under_its_schema(
    schema: dict[str, Any], pointer: str
) -> None:
    """Whatever the pointer says, a kept schema accepts the stub: never a violation."""
    rule = stub_rule(schema)
    if rule is not None:
        validator = validator_for(schema)(schema)
        assert validator.is_valid(rule.stub(pointer))


@given(object_schemas())
def test_a_schema_is_kept_exactly_when_an_empty_or_pointer_stub_fits(
    schema: dict[str, Any],
) -> None:
    """Dropped means neither `{}` nor plain required strings would validate."""
    validator = validator_for(schema)(schema)
    required = schema.get("required", [])
    plain = (
        0 < len(required) <= MAX_STUB_PROPERTIES
        and all(
            schema["properties"][name]
            in ({"type": "string"}, {"type": "string", "description": "text"})
            for name in required
        )
        and validator.is_valid(dict.fromkeys(required, "x"))
    )
    assert (stub_rule(schema) is not None) == (validator.is_valid({}) or plain)


def test_the_filesystem_servers_schema_gets_a_pointer_in_content() -> None:
    """`{"content": string}` required: the stub puts the pointer there."""
    rule = stub_rule(FILESYSTEM)
    assert rule is not None
    assert rule.stub("[stored as s/1]") == {"content": "[stored as s/1]"}


def test_unusable_schemas_are_dropped() -> None:
    """A schema that is no JSON Schema, or not an object at all, gets no stub."""
    assert stub_rule({"type": 12}) is None
    assert stub_rule("not a schema") is None
    assert stub_rule({"type": "array"}) is None
    assert stub_rule({"$ref": "#/definitions/missing"}) is None
