"""Load and validate the state machines that `specs/` keeps as data."""

from __future__ import annotations

import re
import tomllib
from collections import deque
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

PACKAGED_SPECS = ("lease", "artifact")
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*\Z")
_TOP_LEVEL_KEYS = frozenset(
    {
        "name",
        "states",
        "creation_states",
        "terminal_states",
        "remembers_prior",
        "tags",
        "transitions",
    }
)
_REQUIRED_KEYS = _TOP_LEVEL_KEYS - {"remembers_prior", "tags"}
_TRANSITION_KEYS = frozenset({"trigger", "source", "dest", "prior"})


class SpecError(ValueError):
    """A state-machine spec is malformed; the message names the culprit."""


@dataclass(frozen=True)
class SpecTransition:
    """One edge: `trigger` moves `source` to `dest`, optionally guarded by `prior`."""

    trigger: str
    source: str
    dest: str
    prior: str | None = None


@dataclass(frozen=True)
class MachineSpec:
    """A validated state machine: states, creation and terminal states, edges, tags."""

    name: str
    states: tuple[str, ...]
    creation_states: tuple[str, ...]
    terminal_states: tuple[str, ...]
    remembers_prior: tuple[str, ...]
    transitions: tuple[SpecTransition, ...]
    tags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Each tag's name and the states it names, in the order the spec lists them."""

    @property
    def triggers(self) -> tuple[str, ...]:
        """Return the trigger names in order of first appearance."""
        return tuple(dict.fromkeys(t.trigger for t in self.transitions))

    @property
    def live_states(self) -> tuple[str, ...]:
        """Return the states that are not terminal, in the spec's order."""
        return tuple(s for s in self.states if s not in self.terminal_states)

    def edges_from(self, state: str, trigger: str) -> tuple[SpecTransition, ...]:
        """Return the transitions `trigger` may take out of `state`."""
        return tuple(
            t for t in self.transitions if t.source == state and t.trigger == trigger
        )


def load_packaged_spec(name: str) -> MachineSpec:
    """Load one of the specs shipped in this package (`lease`, `artifact`)."""
    if name not in PACKAGED_SPECS:
        msg = f"unknown spec {name!r}; packaged specs are {', '.join(PACKAGED_SPECS)}"
        raise SpecError(msg)
    text = resources.files(__package__).joinpath(f"{name}.toml").read_text("utf-8")
    return load_spec_text(text, origin=f"{name}.toml")


def load_spec_text(text: str, *, origin: str = "<spec>") -> MachineSpec:
    """Parse TOML text into a validated spec."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        msg = f"{origin}: invalid TOML: {error}"
        raise SpecError(msg) from error
    return parse_spec(data, origin=origin)


def parse_spec(data: Mapping[str, Any], *, origin: str = "<spec>") -> MachineSpec:
    """Validate a spec mapping, raising `SpecError` that names what is wrong."""
    return _Validator(origin).validate(data)


class _Validator:
    """Checks one spec; every failure message starts with the spec's origin."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, message: str) -> SpecError:
        return SpecError(f"{self.origin}: {message}")

    def validate(self, data: Mapping[str, Any]) -> MachineSpec:
        if not isinstance(data, dict):
            raise self.fail("a spec must be a table")
        unknown = sorted(set(data) - _TOP_LEVEL_KEYS)
        if unknown:
            raise self.fail(f"unknown key {unknown[0]!r}")
        missing = sorted(_REQUIRED_KEYS - set(data))
        if missing:
            raise self.fail(f"missing key {missing[0]!r}")
        name = data["name"]
        if not isinstance(name, str) or not name.strip():
            raise self.fail("'name' must be a non-empty string")
        states = self.state_list(data, "states", allow_empty=False)
        known = set(states)
        creation = self.state_list(data, "creation_states", allow_empty=False)
        terminal = self.state_list(data, "terminal_states", allow_empty=True)
        remembering = self.state_list(data, "remembers_prior", allow_empty=True)
        for key, listed in (
            ("creation_states", creation),
            ("terminal_states", terminal),
            ("remembers_prior", remembering),
        ):
            self.require_known(listed, known, key)
        transitions = self.transitions(data["transitions"], known)
        spec = MachineSpec(
            name=name,
            states=states,
            creation_states=creation,
            terminal_states=terminal,
            remembers_prior=remembering,
            transitions=transitions,
            tags=self.tags(data.get("tags", {}), known),
        )
        self.check_structure(spec)
        return spec

    def state_list(
        self, data: Mapping[str, Any], key: str, *, allow_empty: bool
    ) -> tuple[str, ...]:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise self.fail(f"{key!r} must be a list of state names")
        if not value and not allow_empty:
            raise self.fail(f"{key!r} must not be empty")
        for state in value:
            if not _IDENTIFIER.match(state):
                raise self.fail(f"{key!r}: invalid state name {state!r}")
        duplicates = sorted({s for s in value if value.count(s) > 1})
        if duplicates:
            raise self.fail(f"{key!r}: duplicate state {duplicates[0]!r}")
        return tuple(value)

    def require_known(self, listed: Iterable[str], known: set[str], key: str) -> None:
        for state in listed:
            if state not in known:
                raise self.fail(f"{key!r}: unknown state {state!r}")

    def tags(
        self, raw: object, known: set[str]
    ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if not isinstance(raw, dict):
            raise self.fail("'tags' must be a table of state lists")
        tags = []
        for tag in raw:
            if not _IDENTIFIER.match(tag):
                raise self.fail(f"invalid tag name {tag!r}")
            key = f"tags.{tag}"
            listed = self.state_list({key: raw[tag]}, key, allow_empty=True)
            self.require_known(listed, known, key)
            tags.append((tag, listed))
        return tuple(tags)

    def transitions(self, raw: object, known: set[str]) -> tuple[SpecTransition, ...]:
        if not isinstance(raw, list) or not raw:
            raise self.fail("'transitions' must be a non-empty list of tables")
        edges: list[SpecTransition] = []
        for number, entry in enumerate(raw, start=1):
            edges.extend(self.transition(number, entry, known))
        return tuple(edges)

    def transition(
        self, number: int, entry: object, known: set[str]
    ) -> list[SpecTransition]:
        where = f"transition {number}"
        if not isinstance(entry, dict):
            raise self.fail(f"{where}: must be a table")
        unknown = sorted(set(entry) - _TRANSITION_KEYS)
        if unknown:
            raise self.fail(f"{where}: unknown key {unknown[0]!r}")
        trigger = entry.get("trigger")
        if not isinstance(trigger, str) or not _IDENTIFIER.match(trigger):
            raise self.fail(f"{where}: invalid trigger {trigger!r}")
        where = f"transition {number} ({trigger})"
        sources = entry.get("source")
        if isinstance(sources, str):
            sources = [sources]
        if not isinstance(sources, list) or not sources:
            raise self.fail(f"{where}: 'source' must be a state or list of states")
        dest = entry.get("dest")
        prior = entry.get("prior")
        named = [*sources, dest, *([] if prior is None else [prior])]
        for state in named:
            if not isinstance(state, str) or state not in known:
                raise self.fail(f"{where}: unknown state {state!r}")
        return [SpecTransition(trigger, s, str(dest), prior) for s in sources]

    def check_structure(self, spec: MachineSpec) -> None:
        self.check_edges(spec)
        reached = _reachable(spec)
        for state in spec.states:
            if state not in reached:
                raise self.fail(f"unreachable state {state!r}")
        for state in spec.states:
            has_exit = any(t.source == state for t in spec.transitions)
            if state not in spec.terminal_states and not has_exit:
                raise self.fail(
                    f"state {state!r} has no transition and is not terminal"
                )

    def check_edges(self, spec: MachineSpec) -> None:
        seen: set[tuple[str, str, str | None]] = set()
        for edge in spec.transitions:
            where = f"trigger {edge.trigger!r} from {edge.source!r}"
            if edge.source in spec.terminal_states:
                raise self.fail(f"{where}: transition out of terminal state")
            key = (edge.trigger, edge.source, edge.prior)
            if key in seen:
                raise self.fail(f"{where}: duplicate trigger from one state")
            seen.add(key)
            if edge.prior is None:
                continue
            if edge.source not in spec.remembers_prior:
                raise self.fail(f"{where}: 'prior' on a state that remembers none")
            if not any(
                t.dest == edge.source and t.source == edge.prior
                for t in spec.transitions
            ):
                raise self.fail(
                    f"{where}: prior {edge.prior!r} never enters {edge.source!r}"
                )
        for trigger, source, _ in seen:
            guards = [t.prior for t in spec.edges_from(source, trigger)]
            if len(guards) > 1 and None in guards:
                raise self.fail(
                    f"trigger {trigger!r} from {source!r}: "
                    "duplicate trigger from one state (unguarded beside guarded)"
                )


def _reachable(spec: MachineSpec) -> set[str]:
    reached = set(spec.creation_states)
    queue = deque(spec.creation_states)
    while queue:
        state = queue.popleft()
        for edge in spec.transitions:
            if edge.source == state and edge.dest not in reached:
                reached.add(edge.dest)
                queue.append(edge.dest)
    return reached
