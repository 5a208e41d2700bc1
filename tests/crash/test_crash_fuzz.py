"""Crash-point fuzzing: a Hypothesis state machine over the real code (issue 6).

Rules store artifacts, prepare, publish with the owner's failure knobs,
commit, remove, reconcile, expire leases, plan and apply GC, replay stale
publishers (zombie writers), move files as an attacker, and crash: any rule
may carry a crash point (a step offset into it, including the journal's named
checkpoints, so crashes land between the owner tombstone and ABORTED and
between quarantine and unlink) or an injected errno. `CrashWorld.check()`
asserts I1 to I4 after every rule and every recovery; each crash checks I5.

Fast tier (`make test`): 200 examples x 50 steps; `make fuzz`: 3000 x 100
with a random seed (`SPILLVAULT_TEST_TIER=long`).
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from spillvault.domain.enums import ArtifactCleanupStatus

from support.crash_world import CrashWorld, Fault
from support.tiers import LONG, pick

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.domain.cleanup import ArtifactCleanupPlan
    from spillvault.domain.values import ArtifactReference

# Each world's fake clock starts at the real time (`CrashWorld` without a
# start): there is no fixed date for the date-shifted re-runs to move.
CLOCKS_START_AT_REAL_TIME = True

ERRNOS = (errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
KNOBS = (None, "lose_receipt_for", "reject_publish_for")
RECONCILE_KNOBS = ("unknown_for", "move_generation_for", "publish_between_for")

crash_points = st.none() | st.integers(min_value=1, max_value=40)
faults = st.none() | st.builds(
    Fault,
    offset=st.integers(min_value=1, max_value=30),
    error=st.sampled_from((*ERRNOS, "short")),
    persistent=st.booleans(),
)
retain = st.none() | st.sampled_from((0.5, 2.0, 48.0))
TOTALS: Counter[str] = Counter()  # what every example exercised, summed


@pytest.fixture(scope="module", autouse=True)
def print_totals() -> Iterator[None]:
    """Print what the whole run exercised (the README quotes it; `pytest -s`)."""
    yield
    print(f"\ncrash fuzzer totals: {dict(TOTALS)}")  # noqa: T201


@st.composite
def hazards(draw: st.DrawFn) -> dict[str, Any]:
    """At most one of: a crash point, an injected fault, or nothing."""
    kind = draw(st.sampled_from(("none", "none", "crash", "crash", "fault")))
    if kind == "crash":
        return {"crash_in": draw(st.integers(min_value=1, max_value=40))}
    if kind == "fault":
        return {"fault": draw(faults.filter(lambda fault: fault is not None))}
    return {}


class CrashMachine(RuleBasedStateMachine):
    """The session, its owner and GC under crashes, faults and an attacker."""

    artifacts = Bundle("artifacts")
    plans = Bundle("plans")

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="spillvault-fuzz-"))
        self.world: CrashWorld | None = None

    def make_world(self, seed: int) -> CrashWorld:
        """Build the world; a planted-bug variant overrides this (issue 7)."""
        return CrashWorld(self.base, seed=seed)

    @initialize(seed=st.integers(min_value=0, max_value=2**32 - 1))
    def start(self, seed: int) -> None:
        self.world = self.make_world(seed)

    @property
    def w(self) -> CrashWorld:
        assert self.world is not None
        return self.world

    def teardown(self) -> None:
        if self.world is not None:
            TOTALS["examples"] += 1
            TOTALS.update(dataclasses.asdict(self.world.counters))
            self.world.close()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ rules

    @rule(
        target=artifacts,
        size=st.sampled_from((3_000, 40_000, 1_200_000)),
        how=hazards(),
    )
    def store_artifact(self, size: int, how: dict[str, Any]) -> Any:
        reference = self.w.store_artifact(size, **how)
        return multiple() if reference is None else multiple(reference)

    @rule(artifact=artifacts, retain_hours=retain, how=hazards())
    def prepare(
        self, artifact: ArtifactReference, retain_hours: float | None, how: Any
    ) -> None:
        self.w.prepare(artifact, retain_hours, **how)

    @rule(
        artifact=artifacts,
        retain_hours=retain,
        knob=st.sampled_from(KNOBS),
        how=hazards(),
    )
    def publish(
        self,
        artifact: ArtifactReference,
        retain_hours: float | None,
        knob: str | None,
        how: Any,
    ) -> None:
        self.w.publish_flow(artifact, retain_hours, knob, **how)

    @precondition(lambda self: self.world is not None and self.world.transactions)
    @rule(data=st.data(), how=hazards())
    def commit(self, data: st.DataObject, how: Any) -> None:
        tx = data.draw(st.sampled_from(self.w.transactions))
        if self.w.owner.holds(tx):
            self.w.commit(tx, **how)

    @precondition(lambda self: self.world is not None and self.world.transactions)
    @rule(data=st.data(), how=hazards())
    def remove(self, data: st.DataObject, how: Any) -> None:
        tx = data.draw(st.sampled_from(self.w.transactions))
        self.w.remove(tx, **how)

    @rule(
        knobs=st.lists(st.sampled_from(RECONCILE_KNOBS), max_size=3),
        data=st.data(),
        how=hazards(),
    )
    def reconcile(self, knobs: list[str], data: st.DataObject, how: Any) -> None:
        chosen = {}
        if self.w.transactions:
            for knob in knobs:
                chosen[data.draw(st.sampled_from(self.w.transactions))] = knob
        self.w.reconcile(chosen, **how)

    @precondition(lambda self: self.world is not None and self.world.transactions)
    @rule(data=st.data())
    def zombie_publish(self, data: st.DataObject) -> None:
        self.w.zombie_publish(data.draw(st.sampled_from(self.w.transactions)))

    @rule(hours=st.sampled_from((0.25, 1.5, 30.0)))
    def expire(self, hours: float) -> None:
        self.w.advance(hours * 3600)

    @rule(target=plans, how=hazards())
    def gc_plan(self, how: Any) -> Any:
        plan = self.w.gc_plan(**how)
        return multiple() if plan is None else multiple(plan)

    @rule(plan=plans, data=st.data(), how=hazards())
    def lease_planned_artifact(
        self, plan: ArtifactCleanupPlan, data: st.DataObject, how: Any
    ) -> None:
        """A memory system references what a plan wants deleted, before apply."""
        planned = [
            d.filename
            for d in plan.decisions
            if d.status is ArtifactCleanupStatus.PLANNED_DELETE
            and d.filename in self.w.stored
        ]
        if planned:
            name = data.draw(st.sampled_from(planned))
            self.w.publish_flow(self.w.stored[name], None, None, **how)

    @rule(plan=consumes(plans), how=hazards())
    def gc_apply(self, plan: ArtifactCleanupPlan, how: Any) -> None:
        self.w.gc_apply(plan, **how)

    @rule(how=hazards())
    def gc_collect(self, how: Any) -> None:
        """Plan and apply at once (the CLI's `gc --apply`); hazards hit the apply."""
        plan = self.w.gc_plan()
        if plan is not None:
            self.w.gc_apply(plan, **how)

    @rule(
        choice=st.none() | st.sampled_from(("written", "dropped", "torn", "zero")),
        dir_entries=st.sampled_from(("lost", "kept", "random")),
    )
    def crash_and_reopen(self, choice: Any, dir_entries: Any) -> None:
        self.w.crash_and_reopen(choice, dir_entries)

    @rule(artifact=artifacts)
    def attacker_symlink(self, artifact: ArtifactReference) -> None:
        self.w.swap_for_symlink(Path(artifact.path).name)

    @rule(artifact=artifacts)
    def attacker_new_inode(self, artifact: ArtifactReference) -> None:
        self.w.replace_inode(Path(artifact.path).name)

    @invariant()
    def invariants_hold(self) -> None:
        if self.world is not None:
            TOTALS["steps"] += 1
            self.world.check()


CrashMachine.TestCase.settings = settings(
    max_examples=pick(200, 3000),
    stateful_step_count=pick(50, 100),
    deadline=None,
    derandomize=not LONG,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
TestCrashMachine = pytest.mark.slow(CrashMachine.TestCase)
