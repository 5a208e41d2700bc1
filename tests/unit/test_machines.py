"""specs/ is the only source of state semantics (issue 14): the machines' queries.

Every query is checked against the raw TOML edges, so the tables built through
`transitions` cannot drift from the spec; the enums, the aggregates' commands
and events and the tags the adapters use are checked against the spec too.
"""

from __future__ import annotations

import pytest
from test_aggregates import content
from test_specs import good

import spillvault
import spillvault.domain
from spillvault.domain.artifact import ARTIFACT_STATE_AFTER, Artifact
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactState
from spillvault.domain.errors import ArtifactLeaseJournalError, IllegalTransition
from spillvault.domain.lease import LEASE_PHASE_AFTER, Lease
from spillvault.domain.machines import ARTIFACT_MACHINE, LEASE_MACHINE, StateMachine
from spillvault.specs import MachineSpec, SpecError, load_packaged_spec, parse_spec
from spillvault.specs.protocol_model import LeaseRules

from support.leases import T0, transaction

MACHINES = {"lease": LEASE_MACHINE, "artifact": ARTIFACT_MACHINE}
ENUMS = {"lease": ArtifactLeasePhase, "artifact": ArtifactState}
AGGREGATES = {"lease": Lease, "artifact": Artifact}


def demo() -> StateMachine:
    return StateMachine.from_spec(
        parse_spec({**good(), "tags": {"warm": ["b", "c"], "none": []}})
    )


@pytest.mark.parametrize("name", MACHINES)
def test_the_enums_equal_the_spec_states(name: str) -> None:
    spec = load_packaged_spec(name)
    members = {member.name: member.value for member in ENUMS[name]}
    assert members == {state.upper(): state for state in spec.states}


@pytest.mark.parametrize("name", MACHINES)
def test_every_trigger_of_the_spec_is_a_command_of_its_aggregate(name: str) -> None:
    aggregate = AGGREGATES[name]
    for trigger in load_packaged_spec(name).triggers:
        assert callable(getattr(aggregate, trigger, None)), (aggregate, trigger)


def test_every_event_leads_to_a_state_of_the_spec() -> None:
    lease_topics = {
        event.TOPIC
        for event in (Lease.Prepared, Lease.Committed, Lease.Released, Lease.Aborted)
    }
    assert set(LEASE_PHASE_AFTER) == lease_topics
    assert LEASE_PHASE_AFTER[Lease.Prepared.TOPIC] in LEASE_MACHINE.creation_states
    # Sealed and Restored carry the state decide() returned.
    carried = {Artifact.Sealed.TOPIC, Artifact.Restored.TOPIC}
    artifact_events = {
        value.TOPIC
        for value in vars(Artifact).values()
        if isinstance(value, type) and value is not Artifact.Event
    }
    assert set(ARTIFACT_STATE_AFTER) == artifact_events - carried
    creations = {Artifact.Stored, Artifact.StreamOpened, Artifact.Adopted}
    assert {event.STATE for event in creations} == ARTIFACT_MACHINE.creation_states
    assert set(ARTIFACT_STATE_AFTER.values()) <= set(ARTIFACT_MACHINE.states)


@pytest.mark.parametrize("name", MACHINES)
def test_every_query_agrees_with_the_raw_spec(name: str) -> None:
    spec: MachineSpec = load_packaged_spec(name)
    machine = MACHINES[name]
    edges = spec.transitions
    assert machine.states == spec.states
    assert machine.triggers == spec.triggers
    assert machine.creation_states == set(spec.creation_states)
    assert machine.terminal_states == set(spec.terminal_states)
    assert machine.live_states == set(spec.live_states)
    for state in spec.states:
        assert machine.next_states(state) == tuple(
            dict.fromkeys(t.dest for t in edges if t.source == state)
        )
        for trigger in spec.triggers:
            found = spec.edges_from(state, trigger)
            assert machine.allows(state, trigger) == bool(found)
            for edge in found:
                assert machine.destination(state, trigger, prior=edge.prior) == (
                    edge.dest
                )
            if not found:
                assert machine.destination(state, trigger) is None
    for trigger in spec.triggers:
        assert machine.sources_of(trigger) == {
            t.source for t in edges if t.trigger == trigger
        }
        dests = {t.dest for t in edges if t.trigger == trigger}
        if len(dests) == 1:
            assert machine.state_after(trigger) == dests.pop()
    for tag, states in spec.tags:
        assert machine.tagged(tag) == set(states)


def test_the_protocol_model_and_the_domain_agree_on_live_phases() -> None:
    assert LeaseRules(load_packaged_spec("lease")).live == LEASE_MACHINE.live_states


def test_the_queries_of_a_small_machine() -> None:
    machine = demo()
    assert machine.terminal_states == {"z"}
    assert machine.live_states == {"a", "b", "c", "q"}
    assert machine.allows("q", "back")
    assert not machine.allows("a", "hold")
    assert machine.sources_of("hold") == {"b", "c"}
    assert machine.sources_of("nope") == frozenset()
    assert machine.destination("q", "back", prior="c") == "c"
    assert machine.destination("q", "back", prior="a") is None
    assert machine.state_after("hold") == "q"
    assert machine.trigger_into("q") == "hold"
    assert machine.trigger_into("a") is None
    assert machine.next_states("q") == ("b", "c", "z")
    assert machine.reachable_from("b") == {"b", "c", "q", "z"}
    assert machine.reachable_from("z") == {"z"}
    assert machine.tagged("warm") == {"b", "c"}
    assert machine.tagged("none") == frozenset()


@pytest.mark.parametrize(
    ("query", "culprit"),
    [
        (lambda m: m.state_after("go"), "trigger 'go' leads to 2 states, not one"),
        (lambda m: m.state_after("nope"), "trigger 'nope' leads to 0 states"),
        (lambda m: m.trigger_into("b"), "2 triggers enter 'b'"),
        (lambda m: m.tagged("cold"), "no tag 'cold'"),
    ],
)
def test_a_query_the_spec_cannot_answer_is_a_spec_error(query, culprit: str) -> None:
    with pytest.raises(SpecError, match=f"^Demo: {culprit}"):
        query(demo())


def test_the_artifact_tags_nest_and_match_what_gc_and_recovery_may_do() -> None:
    readable = ARTIFACT_MACHINE.tagged("readable")
    stored = ARTIFACT_MACHINE.tagged("stored")
    publishable = ARTIFACT_MACHINE.tagged("publishable")
    assert publishable <= stored <= readable <= ARTIFACT_MACHINE.live_states
    # GC plans to collect exactly what its apply may quarantine...
    assert stored == ARTIFACT_MACHINE.sources_of("quarantine")
    # ...and recovery may record as lost every file that belongs in tool-results/.
    assert readable <= ARTIFACT_MACHINE.sources_of("mark_lost")


def test_an_illegal_transition_is_its_own_error_and_still_a_journal_error() -> None:
    assert issubclass(IllegalTransition, ArtifactLeaseJournalError)
    assert spillvault.IllegalTransition is IllegalTransition
    assert spillvault.domain.IllegalTransition is IllegalTransition
    assert "IllegalTransition" in spillvault.__all__
    artifact = Artifact.open_stream(
        "tool_result_001.txt", source_tool="bash", tool_use_id=None, opened_at=T0
    )
    with pytest.raises(IllegalTransition, match="Artifact cannot delete from 'open'"):
        artifact.delete(deleted_at=T0)
    artifact.seal(content(b"x"), summary="x", sealed_at=T0)
    artifact.quarantine("intent", quarantined_at=T0)
    with pytest.raises(IllegalTransition, match=r"prior state 'open'\)$"):
        ARTIFACT_MACHINE.decide("quarantined", "restore", prior="open")
    lease = Lease.prepare(transaction("s", "tx"))
    with pytest.raises(IllegalTransition, match="Lease cannot release from"):
        lease.release(T0)
    with pytest.raises(IllegalTransition, match="illegal creation"):
        LEASE_MACHINE.check_creation("committed")
