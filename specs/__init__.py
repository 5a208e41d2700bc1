"""State machines as data: the packaged specs, their loader and diagrams."""

from .loader import (
    PACKAGED_SPECS,
    MachineSpec,
    SpecError,
    SpecTransition,
    load_packaged_spec,
    load_spec_text,
    parse_spec,
)
from .mermaid import render_mermaid

__all__ = [
    "PACKAGED_SPECS",
    "MachineSpec",
    "SpecError",
    "SpecTransition",
    "load_packaged_spec",
    "load_spec_text",
    "parse_spec",
    "render_mermaid",
]
