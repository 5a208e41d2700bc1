"""What a spilled result may carry as `structuredContent` under a tool's schema.

A client validates `structuredContent` against the tool's `outputSchema`; a
spilled result must not carry the huge structured copy, yet must never break
the schema. Each declared schema is judged once, when the tool list passes:

- `{}` is valid: the stub is `{}`;
- an object whose required properties are all plain strings (the
  filesystem server's `{"content": string}`): the stub holds, in each, a
  one-line pointer to the stored copy;
- anything else: the proxy drops `outputSchema` from the forwarded tool, so
  the client validates nothing, and a spilled result carries no structured
  copy; a small result still carries it, untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable

MAX_STUB_PROPERTIES: Final = 4
MAX_PROPERTY_NAME: Final = 64
# Keys that describe a string property without constraining its value.
_PLAIN_STRING_KEYS: Final = frozenset(
    {"type", "title", "description", "default", "examples", "$comment"}
)


@dataclass(frozen=True)
class StubRule:
    """How a spilled result's structured copy is stood in for."""

    pointer_fields: tuple[str, ...] = ()

    def stub(self, pointer: str) -> dict[str, str]:
        """Return the schema-valid stand-in, each field holding `pointer`."""
        return dict.fromkeys(self.pointer_fields, pointer)


def stub_rule(schema: object) -> StubRule | None:
    """Return the rule for a declared `outputSchema`, or None: drop the schema."""
    if not isinstance(schema, dict):
        return None
    try:
        validator_class = validator_for(schema)
        validator_class.check_schema(schema)
        validator = validator_class(schema, registry=Registry())
        if validator.is_valid({}):
            return StubRule()
        fields = _plain_required_strings(schema)
        if fields and validator.is_valid(dict.fromkeys(fields, "[pointer]")):
            return StubRule(fields)
    except (
        SchemaError,
        Unresolvable,
        ValueError,
        TypeError,
        LookupError,
        RecursionError,
    ):
        # An unusable schema: a client could not validate against it either.
        return None
    return None


def _plain_required_strings(schema: dict[str, Any]) -> tuple[str, ...]:
    """Return the required properties if all are unconstrained strings, else ()."""
    required = schema.get("required")
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict):
        return ()
    if not isinstance(required, list) or not 0 < len(required) <= MAX_STUB_PROPERTIES:
        return ()
    for name in required:
        spec = properties.get(name) if isinstance(name, str) else None
        if not isinstance(spec, dict) or len(name) > MAX_PROPERTY_NAME:
            return ()
        if spec.get("type") != "string" or not set(spec) <= _PLAIN_STRING_KEYS:
            return ()
    return tuple(required)


__all__ = ["StubRule", "stub_rule"]
