"""One module-level `transitions` machine per packaged spec, consulted by `decide()`.

No machine is ever bound to an aggregate (that breaks snapshots and deep copies):
commands look the transition up here and only then record an event. Every other
fact about states (which are live, stored or readable, where a trigger leads,
which trigger enters a state) is a query on the same machine, computed once
when it is built, so `specs/` stays the only place these facts are written.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from transitions import Machine

from spillvault.specs import MachineSpec, SpecError, load_packaged_spec

from .errors import IllegalTransition

if TYPE_CHECKING:
    from typing import Any

    from transitions.core import Transition

# A guarded edge carries one condition named `prior_is_<state>`: the state the
# aggregate was in before entering a state that remembers its prior.
_PRIOR_GUARD = "prior_is_"

Edge = tuple[str | None, str]
"""One way out of a state by one trigger: its `prior` guard (or None), its dest."""


def _build_machine(spec: MachineSpec) -> Machine:
    edges: list[dict[str, Any]] = []
    for edge in spec.transitions:
        entry: dict[str, Any] = {
            "trigger": edge.trigger,
            "source": edge.source,
            "dest": edge.dest,
        }
        if edge.prior is not None:
            entry["conditions"] = [_PRIOR_GUARD + edge.prior]
        edges.append(entry)
    return Machine(
        model=None,
        states=[
            {"name": state, "final": state in spec.terminal_states}
            for state in spec.states
        ],
        transitions=edges,
        initial=spec.creation_states[0],
        auto_transitions=False,
        name=spec.name,
    )


def _prior_of(transition: Transition) -> str | None:
    for condition in transition.conditions:
        name = str(condition.func)
        if name.startswith(_PRIOR_GUARD):
            return name[len(_PRIOR_GUARD) :]
    return None


class StateMachine:
    """A spec, the one shared `transitions.Machine` built from it, and its queries.

    Every query is a lookup in a table built here once: commands and
    projections ask them per event.
    """

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.machine = _build_machine(spec)
        self.states: tuple[str, ...] = tuple(self.machine.states)
        self.creation_states = frozenset(spec.creation_states)
        self.terminal_states = frozenset(
            name for name, state in self.machine.states.items() if state.final
        )
        self.live_states = frozenset(self.states) - self.terminal_states
        self.triggers: tuple[str, ...] = tuple(self.machine.get_triggers(*self.states))
        edges: dict[tuple[str, str], list[Edge]] = {}
        for trigger in self.triggers:
            for transition in self.machine.get_transitions(trigger=trigger):
                key = (str(transition.source), trigger)
                edges.setdefault(key, []).append(
                    (_prior_of(transition), str(transition.dest))
                )
        self._edges = {key: tuple(found) for key, found in edges.items()}
        self._sources = {
            trigger: frozenset(s for s, t in self._edges if t == trigger)
            for trigger in self.triggers
        }
        self._dests = {
            trigger: tuple(
                dict.fromkeys(
                    dest
                    for (_, t), found in self._edges.items()
                    if t == trigger
                    for _, dest in found
                )
            )
            for trigger in self.triggers
        }
        self._entering = {
            state: tuple(t for t in self.triggers if state in self._dests[t])
            for state in self.states
        }
        self._next = {
            state: tuple(
                dict.fromkeys(
                    dest
                    for trigger in self.machine.get_triggers(state)
                    for _, dest in self._edges[state, trigger]
                )
            )
            for state in self.states
        }
        self._reachable = {state: self._walk(state) for state in self.states}
        self._tags = {tag: frozenset(states) for tag, states in spec.tags}

    @classmethod
    def from_spec(cls, spec: MachineSpec) -> StateMachine:
        """Build the shared machine for `spec`."""
        return cls(spec)

    def _walk(self, start: str) -> frozenset[str]:
        reached = {start}
        queue = deque([start])
        while queue:
            for dest in self._next[queue.popleft()]:
                if dest not in reached:
                    reached.add(dest)
                    queue.append(dest)
        return frozenset(reached)

    # ---------------------------------------------------------------- queries

    def allows(self, state: str, trigger: str) -> bool:
        """Say whether the spec has an edge for `trigger` out of `state` (any guard)."""
        return (state, trigger) in self._edges

    def sources_of(self, trigger: str) -> frozenset[str]:
        """Return the states `trigger` may leave; empty for a trigger the spec lacks."""
        return self._sources.get(trigger, frozenset())

    def destination(
        self, state: str, trigger: str, *, prior: str | None = None
    ) -> str | None:
        """Return where `trigger` leads from `state` given `prior`; None if nowhere."""
        for guard, dest in self._edges.get((state, trigger), ()):
            if guard is None or guard == prior:
                return dest
        return None

    def state_after(self, trigger: str) -> str:
        """Return the one state `trigger` leads to from every source it has."""
        dests = self._dests.get(trigger, ())
        if len(dests) != 1:
            msg = (
                f"{self.spec.name}: trigger {trigger!r} leads to "
                f"{len(dests)} states, not one"
            )
            raise SpecError(msg)
        return dests[0]

    def trigger_into(self, state: str) -> str | None:
        """Return the one trigger that enters `state`; None when none does."""
        entering = self._entering.get(state, ())
        if len(entering) > 1:
            msg = f"{self.spec.name}: {len(entering)} triggers enter {state!r}"
            raise SpecError(msg)
        return entering[0] if entering else None

    def next_states(self, state: str) -> tuple[str, ...]:
        """Return the states one transition away from `state`, in the spec's order."""
        return self._next[state]

    def reachable_from(self, state: str) -> frozenset[str]:
        """Return `state` and every state any sequence of transitions leads to."""
        return self._reachable[state]

    def tagged(self, tag: str) -> frozenset[str]:
        """Return the states the spec tags `tag` (see the spec's `[tags]`)."""
        try:
            return self._tags[tag]
        except KeyError:
            msg = f"{self.spec.name}: no tag {tag!r}"
            raise SpecError(msg) from None

    # --------------------------------------------------------------- commands

    def check_creation(self, state: str) -> None:
        """Raise unless an aggregate may be created in `state`."""
        if state not in self.creation_states:
            msg = f"illegal creation: {self.spec.name} cannot be created {state!r}"
            raise IllegalTransition(msg)

    def decide(self, state: str, trigger: str, *, prior: str | None = None) -> str:
        """Return where `trigger` leads from `state`, or raise before recording."""
        dest = self.destination(state, trigger, prior=prior)
        if dest is not None:
            return dest
        msg = f"illegal transition: {self.spec.name} cannot {trigger} from {state!r}"
        if self.allows(state, trigger):
            msg += f" (remembered prior state {prior!r})"
        raise IllegalTransition(msg)


LEASE_MACHINE = StateMachine.from_spec(load_packaged_spec("lease"))
ARTIFACT_MACHINE = StateMachine.from_spec(load_packaged_spec("artifact"))
