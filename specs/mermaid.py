"""Render a spec as a Mermaid `stateDiagram-v2` (kept beside it as `<name>.mmd`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .loader import MachineSpec


def render_mermaid(spec: MachineSpec) -> str:
    """Return the diagram text for `spec`; byte-stable for one spec."""
    lines = [
        f"%% {spec.name} state machine, generated from {spec.name.lower()}.toml.",
        "%% Regenerate with: python -m spillvault.specs --write",
    ]
    # Mermaid has no notation for a named set of states: list them as comments.
    lines += [
        f"%% tag {tag}: {', '.join(states)}".rstrip() for tag, states in spec.tags
    ]
    lines += ["stateDiagram-v2", "  direction LR"]
    lines += [f"  [*] --> {state}" for state in spec.creation_states]
    for edge in spec.transitions:
        guard = f" [prior = {edge.prior}]" if edge.prior else ""
        lines.append(f"  {edge.source} --> {edge.dest}: {edge.trigger}{guard}")
    lines += [f"  {state} --> [*]" for state in spec.terminal_states]
    return "\n".join(lines) + "\n"
