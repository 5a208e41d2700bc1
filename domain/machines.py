"""One module-level `transitions` machine per packaged spec, consulted by `decide()`.

No machine is ever bound to an aggregate (that breaks snapshots and deep copies):
commands look the transition up here and only then record an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from transitions import Machine

from spillvault.specs import MachineSpec, load_packaged_spec

from .errors import ArtifactLeaseJournalError

if TYPE_CHECKING:
    from typing import Any

# A guarded edge carries one condition named `prior_is_<state>`: the state the
# aggregate was in before entering a state that remembers its prior.
_PRIOR_GUARD = "prior_is_"


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
        states=list(spec.states),
        transitions=edges,
        initial=spec.creation_states[0],
        auto_transitions=False,
        name=spec.name,
    )


@dataclass(frozen=True)
class StateMachine:
    """A spec and the one shared `transitions.Machine` built from it."""

    spec: MachineSpec
    machine: Machine

    @classmethod
    def from_spec(cls, spec: MachineSpec) -> StateMachine:
        """Build the shared machine for `spec`."""
        return cls(spec, _build_machine(spec))

    def check_creation(self, state: str) -> None:
        """Raise unless an aggregate may be created in `state`."""
        if state not in self.spec.creation_states:
            msg = f"illegal creation: {self.spec.name} cannot be created {state!r}"
            raise ArtifactLeaseJournalError(msg)

    def decide(self, state: str, trigger: str, *, prior: str | None = None) -> str:
        """Return where `trigger` leads from `state`, or raise before recording."""
        event = self.machine.events.get(trigger)
        candidates = event.transitions.get(state, []) if event is not None else []
        for candidate in candidates:
            required = [c.func for c in candidate.conditions]
            if all(self._guard_holds(str(name), prior) for name in required):
                return str(candidate.dest)
        msg = f"illegal transition: {self.spec.name} cannot {trigger} from {state!r}"
        if candidates:
            msg += f" (remembered prior state {prior!r})"
        raise ArtifactLeaseJournalError(msg)

    @staticmethod
    def _guard_holds(name: str, prior: str | None) -> bool:
        return name.startswith(_PRIOR_GUARD) and name[len(_PRIOR_GUARD) :] == prior


LEASE_MACHINE = StateMachine.from_spec(load_packaged_spec("lease"))
ARTIFACT_MACHINE = StateMachine.from_spec(load_packaged_spec("artifact"))
