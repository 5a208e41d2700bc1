"""Lease and Artifact commands in random order against a real SQLite session (S8).

A Hypothesis state machine drives both aggregates through a session opened on
a fresh directory, restarts the session now and then, and checks every outcome
against an oracle typed out by hand from SPEC (S4.3, S4.8, S2.4, S2.6, S6.1,
S6.2), never derived from `specs/` or the `transitions` machine: a legal
trigger records exactly one event; an illegal one raises
`ArtifactLeaseJournalError` before any event exists, and saving the aggregate
then records nothing. After every step each aggregate is reloaded from the
store and compared with the model.

To reach deep cells of the tables (a partial artifact in quarantine, say) as
often as shallow ones, the firing rules draw a place, walk there along the
oracle's shortest legal path, fire every trigger the oracle forbids there,
then one it allows, then a few random ones. With the settings below every
(place, trigger) cell is exercised in a typical run of about 20 s.

One plain test checks that the oracle and the packaged specs agree, as a
cross-check only.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
)

from spillvault.adapters.session import Session, open_session
from spillvault.domain.artifact import Artifact, ArtifactContent
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import ArtifactLeaseJournalError, ArtifactStoreConflict
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    artifact_filename,
)
from spillvault.specs import load_packaged_spec

from support.dates import YEARS_AHEAD, fixed

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from spillvault.adapters.storage.eventstore import SessionStore
    from spillvault.specs import SpecTransition

N = TypeVar("N")

# ---------------------------------------------------------------------------
# The oracle, typed out by hand from SPEC. Anything not listed is illegal.
# ---------------------------------------------------------------------------

LEASE_STATES = ("prepared", "committed", "released", "aborted")
LEASE_TRIGGERS = ("commit", "release", "abort")
LEASE_ORACLE: dict[tuple[str, str], str] = {
    ("prepared", "commit"): "committed",
    ("prepared", "abort"): "aborted",
    ("committed", "release"): "released",
}

ARTIFACT_STATES = (
    "open",
    "sealed",
    "partial",
    "orphan",
    "quarantined",
    "lost",
    "deleted",
)
ARTIFACT_TRIGGERS = (
    "seal",
    "seal_partial",
    "quarantine",
    "restore",
    "delete",
    "mark_lost",
)
# Key: (state, trigger, remembered prior); the prior matters only for `restore`
# (S6.2: GC backs out of a deletion into exactly the state it came from), so
# every other edge is listed with prior None and holds whatever is remembered.
ARTIFACT_ORACLE: dict[tuple[str, str, str | None], str] = {
    ("open", "seal", None): "sealed",
    ("open", "seal_partial", None): "partial",
    ("open", "mark_lost", None): "lost",
    ("sealed", "quarantine", None): "quarantined",
    ("sealed", "mark_lost", None): "lost",
    ("partial", "quarantine", None): "quarantined",
    ("partial", "mark_lost", None): "lost",
    ("orphan", "quarantine", None): "quarantined",
    ("orphan", "mark_lost", None): "lost",
    ("quarantined", "restore", "sealed"): "sealed",
    ("quarantined", "restore", "partial"): "partial",
    ("quarantined", "restore", "orphan"): "orphan",
    ("quarantined", "delete", None): "deleted",
    ("quarantined", "mark_lost", None): "lost",
}
ARTIFACT_CREATIONS = {"store": "sealed", "open_stream": "open", "adopt": "orphan"}
LEASE_TERMINAL = frozenset({"released", "aborted"})
ARTIFACT_TERMINAL = frozenset({"lost", "deleted"})


def lease_next(state: str, trigger: str) -> str | None:
    """Return where the oracle says `trigger` leads, or None when illegal."""
    return LEASE_ORACLE.get((state, trigger))


def artifact_next(state: str, trigger: str, prior: str | None) -> str | None:
    """Return where the oracle says `trigger` leads, or None when illegal."""
    unguarded = ARTIFACT_ORACLE.get((state, trigger, None))
    if unguarded is not None:
        return unguarded
    if prior is None:
        return None
    return ARTIFACT_ORACLE.get((state, trigger, prior))


# An artifact's place in the oracle: its state and, when quarantined, its prior.
Place = tuple[str, str | None]
ARTIFACT_PLACES: tuple[Place, ...] = (
    ("open", None),
    ("sealed", None),
    ("partial", None),
    ("orphan", None),
    ("quarantined", "sealed"),
    ("quarantined", "partial"),
    ("quarantined", "orphan"),
    ("lost", None),
    ("deleted", None),
)


def artifact_step(place: Place, trigger: str) -> Place | None:
    """Return the place `trigger` leads to (entering quarantine remembers it)."""
    state, prior = place
    dest = artifact_next(state, trigger, prior)
    if dest is None:
        return None
    return (dest, state if dest == "quarantined" else None)


def oracle_path(
    start: N, goal: N, triggers: Sequence[str], step: Callable[[N, str], N | None]
) -> list[str] | None:
    """Return the shortest trigger path the oracle allows from `start` to `goal`."""
    paths: dict[N, list[str]] = {start: []}
    frontier = [start]
    while frontier and goal not in paths:
        node = frontier.pop(0)
        for trigger in triggers:
            after = step(node, trigger)
            if after is not None and after not in paths:
                paths[after] = [*paths[node], trigger]
                frontier.append(after)
    return paths.get(goal)


def lease_path(start: str, goal: str) -> list[str] | None:
    """Return the legal trigger path between two lease states, if any."""
    return oracle_path(start, goal, LEASE_TRIGGERS, lease_next)


def artifact_path(start: Place, goal: Place) -> list[str] | None:
    """Return the legal trigger path between two artifact places, if any."""
    return oracle_path(start, goal, ARTIFACT_TRIGGERS, artifact_step)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

T0 = fixed(2026)
SESSION_NAME = "session-stateful"


def content_of(data: bytes) -> ArtifactContent:
    """Hash `data` the way S2.5 describes: whole digest plus per-1-MiB-chunk facts."""
    chunks = [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]
    newlines = data.count(b"\n")
    trailing = 1 if data and not data.endswith(b"\n") else 0
    return ArtifactContent(
        content_sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        line_count=newlines + trailing,
        chunk_sha256=tuple(hashlib.sha256(c).hexdigest() for c in chunks),
        chunk_newlines=tuple(c.count(b"\n") for c in chunks),
    )


def test_content_helper_matches_the_small_content_rule() -> None:
    assert content_of(b"") == ArtifactContent(
        hashlib.sha256(b"").hexdigest(), 0, 0, (), ()
    )
    data = b"a\nb"
    facts = content_of(data)
    assert facts.chunk_sha256 == (hashlib.sha256(data).hexdigest(),)
    assert (facts.line_count, facts.chunk_newlines) == (2, (1,))
    assert content_of(b"a\n").line_count == 1


contents = st.binary(max_size=300).map(content_of)


def to_fire(
    data: st.DataObject, triggers: Sequence[str], leads: Callable[[str], object]
) -> list[str]:
    """Choose the triggers to fire at one place of the oracle's table.

    First every trigger the oracle forbids there, in a drawn order (each must
    raise and change nothing), then one it allows (if any), then up to two
    more of any kind.
    """
    order = data.draw(st.permutations(triggers), label="forbidden, in order")
    allowed = [t for t in triggers if leads(t) is not None]
    chosen = [data.draw(st.sampled_from(allowed), label="allowed")] if allowed else []
    more = data.draw(st.lists(st.sampled_from(triggers), max_size=2), label="more")
    return [*(t for t in order if leads(t) is None), *chosen, *more]


@dataclass
class LeaseModel:
    """What the oracle expects of one lease: the phases it went through."""

    history: list[str]

    @property
    def state(self) -> str:
        return self.history[-1]


@dataclass
class ArtifactModel:
    """What the oracle expects of one artifact."""

    state: str
    version: int
    prior: str | None = None
    content: ArtifactContent | None = None

    @property
    def place(self) -> Place:
        return (self.state, self.prior)


# ---------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------


class AggregatesMachine(RuleBasedStateMachine):
    """Random Lease and Artifact commands, each checked against the oracle.

    Every example gets a fresh directory and a real SQLite session; `restart`
    closes it and opens the same directory again.
    """

    transactions = Bundle("transactions")
    filenames = Bundle("filenames")

    def __init__(self) -> None:
        super().__init__()
        self.parent = tempfile.mkdtemp(prefix="spillvault-stateful-")
        self.path = Path(self.parent) / SESSION_NAME
        self.clock = T0
        self.tx_counter = 0
        self.artifact_counter = 0
        self.leases: dict[str, LeaseModel] = {}
        self.artifacts: dict[str, ArtifactModel] = {}
        self.session: Session | None = open_session(self.path, recover=False)
        assert self.store.max_position() == 1  # the store identity only

    # plumbing -------------------------------------------------------------

    @property
    def store(self) -> SessionStore:
        assert self.session is not None
        return self.session.store

    def now(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def expected_events(self) -> int:
        """One identity event plus one event per lease phase and artifact step."""
        lease_events = sum(len(lease.history) for lease in self.leases.values())
        artifact_events = sum(a.version for a in self.artifacts.values())
        return 1 + lease_events + artifact_events

    def teardown(self) -> None:
        if self.session is not None:
            self.session.close()
        shutil.rmtree(self.parent, ignore_errors=True)

    @initialize(target=transactions, content=contents)
    def seed_lease(self, content: ArtifactContent) -> str:
        return self.new_lease(content, 1)

    @initialize(target=filenames, content=contents)
    def seed_artifacts(self, content: ArtifactContent) -> MultipleResults[str]:
        """One artifact per creation kind, so every place is reachable early."""
        return multiple(
            *(self.create_artifact(how, content) for how in sorted(ARTIFACT_CREATIONS))
        )

    # restarts -------------------------------------------------------------

    @rule()
    def restart(self) -> None:
        """Close and reopen: every aggregate must come back from its events."""
        assert self.session is not None
        before = self.store.max_position()
        self.session.close()
        self.session = None
        self.session = open_session(self.path, recover=False)
        assert self.store.max_position() == before
        event("restart")

    # leases ---------------------------------------------------------------

    def transaction(
        self, tx_id: str, digest: str, number: int
    ) -> ArtifactLeaseTransaction:
        filename = artifact_filename(number)
        claim = ArtifactRetentionClaim(
            source_id=f"artifact:{SESSION_NAME}:{filename}:{digest[:12]}",
            content_sha256=digest,
        )
        return ArtifactLeaseTransaction(tx_id, claim, self.now())

    def new_lease(self, content: ArtifactContent, number: int) -> str:
        self.tx_counter += 1
        tx_id = f"tx-{self.tx_counter:04d}-{number}"
        before = self.store.max_position()
        lease = self.store.prepare_lease(
            self.transaction(tx_id, content.content_sha256, number)
        )
        assert lease.pending_events == []
        assert (lease.state, lease.version) == ("prepared", 1)
        assert self.store.max_position() == before + 1
        self.leases[tx_id] = LeaseModel(["prepared"])
        return tx_id

    @rule(target=transactions, content=contents, number=st.integers(1, 2000))
    def prepare_lease(self, content: ArtifactContent, number: int) -> str:
        return self.new_lease(content, number)

    @rule(tx_id=transactions, content=contents, number=st.integers(1, 2000))
    def reuse_transaction_id(
        self, tx_id: str, content: ArtifactContent, number: int
    ) -> None:
        """S4.8: a transaction id is used once, whatever its phase."""
        before = self.store.max_position()
        with pytest.raises(ArtifactLeaseJournalError, match="already used"):
            self.store.prepare_lease(
                self.transaction(tx_id, content.content_sha256, number)
            )
        assert self.store.max_position() == before
        event("reused transaction id refused")

    @rule(
        target=transactions,
        tx_id=transactions,
        goal=st.sampled_from(LEASE_STATES),
        via_store=st.booleans(),
        data=st.data(),
    )
    def fire_lease(
        self, tx_id: str, goal: str, via_store: bool, data: st.DataObject
    ) -> MultipleResults[str]:
        """Walk a lease legally to `goal`, then fire triggers there (`to_fire`).

        When `goal` cannot be reached from the lease's phase, a fresh lease is
        prepared (and bundled) and walked instead.
        """
        created = []
        path = lease_path(self.leases[tx_id].state, goal)
        if path is None:
            tx_id = self.new_lease(data.draw(contents), 1)
            created.append(tx_id)
            path = lease_path("prepared", goal)
        assert path is not None
        for trigger in path:
            self.fire_lease_trigger(tx_id, trigger, via_store)
        assert self.leases[tx_id].state == goal
        for trigger in to_fire(data, LEASE_TRIGGERS, lambda t: lease_next(goal, t)):
            self.fire_lease_trigger(tx_id, trigger, via_store)
        return multiple(*created)

    def fire_lease_trigger(self, tx_id: str, trigger: str, via_store: bool) -> None:
        model = self.leases[tx_id]
        dest = lease_next(model.state, trigger)
        event(f"lease {model.state} --{trigger}--> {dest or 'ILLEGAL'}")
        before = self.store.max_position()
        if via_store:
            self.lease_via_store(tx_id, trigger, dest)
        else:
            self.lease_via_aggregate(tx_id, trigger, dest)
        if dest is None:
            assert self.store.max_position() == before
        else:
            assert self.store.max_position() == before + 1
            model.history.append(dest)
        self.check_lease(tx_id)

    def lease_via_aggregate(self, tx_id: str, trigger: str, dest: str | None) -> None:
        lease = self.store.get_lease(tx_id)
        model = self.leases[tx_id]
        assert (lease.state, lease.version) == (model.state, len(model.history))
        command = getattr(lease, trigger)
        if dest is None:
            with pytest.raises(ArtifactLeaseJournalError, match="illegal transition"):
                command(self.now())
            assert lease.pending_events == []
            assert list(lease.collect_events()) == []
            assert (lease.state, lease.version) == (model.state, len(model.history))
        else:
            command(self.now())
            assert len(lease.pending_events) == 1
            assert lease.state == dest
        self.store.save_aggregates(lease)
        assert lease.pending_events == []

    def lease_via_store(self, tx_id: str, trigger: str, dest: str | None) -> None:
        command = getattr(self.store, f"{trigger}_lease")
        if dest is None:
            with pytest.raises(ArtifactLeaseJournalError, match="illegal transition"):
                command(tx_id, self.now())
        else:
            assert command(tx_id, self.now()).state == dest

    # artifacts ------------------------------------------------------------

    def new_artifact(
        self, how: str, filename: str, content: ArtifactContent
    ) -> Artifact:
        at = self.now()
        if how == "store":
            return Artifact.store(
                filename,
                content,
                source_tool="Bash",
                tool_use_id=f"toolu_{filename}",
                is_error=False,
                captured_at=at,
                summary=f"stored {content.size_bytes} bytes",
            )
        if how == "open_stream":
            return Artifact.open_stream(
                filename, source_tool="Bash", tool_use_id=None, opened_at=at
            )
        return Artifact.adopt(filename, content, adopted_at=at)

    def create_artifact(self, how: str, content: ArtifactContent) -> str:
        self.artifact_counter += 1
        filename = artifact_filename(self.artifact_counter)
        before = self.store.max_position()
        artifact = self.new_artifact(how, filename, content)
        state = ARTIFACT_CREATIONS[how]
        assert (artifact.state, artifact.version) == (state, 1)
        self.store.save_aggregates(artifact)
        assert self.store.max_position() == before + 1
        stored = None if how == "open_stream" else content
        self.artifacts[filename] = ArtifactModel(state, 1, content=stored)
        event(f"artifact created {state}")
        return filename

    @rule(
        target=filenames,
        how=st.sampled_from(sorted(ARTIFACT_CREATIONS)),
        content=contents,
    )
    def create(self, how: str, content: ArtifactContent) -> str:
        return self.create_artifact(how, content)

    @rule(
        filename=filenames,
        how=st.sampled_from(sorted(ARTIFACT_CREATIONS)),
        content=contents,
    )
    def recreate(self, filename: str, how: str, content: ArtifactContent) -> None:
        """A filename is never reused: a second creation conflicts on save."""
        before = self.store.max_position()
        artifact = self.new_artifact(how, filename, content)
        with pytest.raises(ArtifactStoreConflict):
            self.store.save_aggregates(artifact)
        assert self.store.max_position() == before
        event("recreated filename refused")

    def command(
        self, artifact: Artifact, trigger: str, content: ArtifactContent
    ) -> None:
        at = self.now()
        if trigger in {"seal", "seal_partial"}:
            getattr(artifact, trigger)(
                content, summary=f"{trigger} summary", sealed_at=at
            )
        elif trigger == "quarantine":
            artifact.quarantine(f"intent-{at.timestamp():.0f}", quarantined_at=at)
        elif trigger == "restore":
            artifact.restore(restored_at=at)
        elif trigger == "delete":
            artifact.delete(deleted_at=at)
        else:
            artifact.mark_lost(detected_at=at)

    def fire_artifact_trigger(
        self, filename: str, trigger: str, content: ArtifactContent
    ) -> None:
        model = self.artifacts[filename]
        after = artifact_step(model.place, trigger)
        event(f"artifact {model.place} --{trigger}--> {after or 'ILLEGAL'}")
        artifact = self.store.get_artifact(filename)
        assert artifact is not None
        assert (artifact.state, artifact.version) == (model.state, model.version)
        before = self.store.max_position()
        if after is None:
            with pytest.raises(ArtifactLeaseJournalError, match="illegal transition"):
                self.command(artifact, trigger, content)
            assert artifact.pending_events == []
            assert list(artifact.collect_events()) == []
            assert (artifact.state, artifact.version) == (model.state, model.version)
            self.store.save_aggregates(artifact)
            assert self.store.max_position() == before
        else:
            self.command(artifact, trigger, content)
            assert len(artifact.pending_events) == 1
            assert artifact.state == after[0]
            self.store.save_aggregates(artifact)
            assert artifact.pending_events == []
            assert self.store.max_position() == before + 1
            model.state, model.prior = after
            model.version += 1
            if trigger in {"seal", "seal_partial"}:
                model.content = content
        self.check_artifact(filename)

    @rule(
        target=filenames,
        filename=filenames,
        goal=st.sampled_from(ARTIFACT_PLACES),
        content=contents,
        data=st.data(),
    )
    def fire_artifact(
        self, filename: str, goal: Place, content: ArtifactContent, data: st.DataObject
    ) -> MultipleResults[str]:
        """Walk an artifact legally to `goal`, then fire triggers there (`to_fire`).

        The walk is the oracle's shortest path; when `goal` cannot be reached
        from where the artifact is, a fresh artifact that can reach it is
        created (and bundled) instead, so deep places such as a partial
        artifact in quarantine are probed as often as shallow ones.
        """
        created = []
        path = artifact_path(self.artifacts[filename].place, goal)
        if path is None:
            how, state = next(
                (how, state)
                for how, state in sorted(ARTIFACT_CREATIONS.items())
                if artifact_path((state, None), goal) is not None
            )
            filename = self.create_artifact(how, content)
            created.append(filename)
            path = artifact_path((state, None), goal)
        assert path is not None
        for trigger in path:
            self.fire_artifact_trigger(filename, trigger, content)
        assert self.artifacts[filename].place == goal
        legal = partial(artifact_step, goal)
        for trigger in to_fire(data, ARTIFACT_TRIGGERS, legal):
            self.fire_artifact_trigger(filename, trigger, content)
        return multiple(*created)

    # checks ---------------------------------------------------------------

    def check_lease(self, tx_id: str) -> None:
        lease = self.store.get_lease(tx_id)
        model = self.leases[tx_id]
        assert (lease.state, lease.version) == (model.state, len(model.history))
        assert lease.phase_history == model.history
        assert lease.transaction_id == tx_id

    def check_artifact(self, filename: str) -> None:
        artifact = self.store.get_artifact(filename)
        assert artifact is not None
        model = self.artifacts[filename]
        assert (artifact.state, artifact.version) == (model.state, model.version)
        assert artifact.filename == filename
        if model.state == "quarantined":
            assert artifact.prior_state == model.prior
        assert artifact.stored_content == model.content

    @invariant()
    def store_matches_the_oracle_model(self) -> None:
        """Every aggregate, reloaded from the store, is where the oracle says."""
        if self.session is None:
            return
        for tx_id in self.leases:
            self.check_lease(tx_id)
        for filename in self.artifacts:
            self.check_artifact(filename)
        assert self.store.max_position() == self.expected_events()
        assert sum(1 for _ in self.store.notifications()) == self.expected_events()


# The date-shifted re-runs (make test-dates) ask whether the aggregates depend
# on the date, not how deep the machine digs: a quarter of the examples answers.
AggregatesMachine.TestCase.settings = settings(
    max_examples=150 // (4 if YEARS_AHEAD else 1),
    stateful_step_count=40,
    deadline=None,
)
TestAggregatesStateful = pytest.mark.slow(AggregatesMachine.TestCase)


# ---------------------------------------------------------------------------
# Cross-check: the hand-written oracle agrees with the packaged specs.
# ---------------------------------------------------------------------------


def test_oracle_agrees_with_the_packaged_specs() -> None:
    lease = load_packaged_spec("lease")
    artifact = load_packaged_spec("artifact")
    assert set(lease.states) == set(LEASE_STATES)
    assert set(lease.triggers) == set(LEASE_TRIGGERS)
    assert set(artifact.states) == set(ARTIFACT_STATES)
    assert set(artifact.triggers) == set(ARTIFACT_TRIGGERS)
    assert lease.creation_states == ("prepared",)
    assert set(artifact.creation_states) == set(ARTIFACT_CREATIONS.values())
    assert set(lease.terminal_states) == LEASE_TERMINAL
    assert set(artifact.terminal_states) == ARTIFACT_TERMINAL

    def spec_next(
        spec_edges: tuple[SpecTransition, ...], prior: str | None
    ) -> str | None:
        for edge in spec_edges:
            if edge.prior is None or edge.prior == prior:
                return str(edge.dest)
        return None

    for state in LEASE_STATES:
        for trigger in LEASE_TRIGGERS:
            expected = spec_next(lease.edges_from(state, trigger), None)
            assert lease_next(state, trigger) == expected, (state, trigger)
    for state in ARTIFACT_STATES:
        for trigger in ARTIFACT_TRIGGERS:
            for prior in (None, *ARTIFACT_STATES):
                expected = spec_next(artifact.edges_from(state, trigger), prior)
                got = artifact_next(state, trigger, prior)
                assert got == expected, (state, trigger, prior)
