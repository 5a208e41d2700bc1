"""Exhaustive crash enumeration of small workloads (issue 6, ALICE/CrashMonkey style).

Every workload of one to three operations drawn from {store, prepare, publish,
commit, reconcile, gc_plan, gc_apply, release} (584 workloads) runs from the
same prepared session; a crash lands at every step the workload takes
(file operations and the journal's named checkpoints, so also between the
owner tombstone and ABORTED and between quarantine and unlink), and each crash
rebuilds the files with every pending write written, dropped, torn at 4 KiB,
zero-filled or garbage. After the crash `CrashWorld` checks I5 (recovery
interrupted at a random step ends where a straight recovery does), reopens,
and checks I1 to I4.

`make fuzz` runs every case; the fast tier runs a fixed sample (the counts are
printed and stated in the README).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from support.crash_world import CrashWorld
from support.crashfs import CHOICES
from support.dates import YEARS_AHEAD, fixed
from support.tiers import LONG, sample

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.domain.cleanup import ArtifactCleanupPlan
    from spillvault.domain.values import ArtifactReference

OPERATIONS = (
    "store",
    "prepare",
    "publish",
    "commit",
    "reconcile",
    "gc_plan",
    "gc_apply",
    "release",
)
WORKLOADS = [
    workload
    for length in (1, 2, 3)
    for workload in itertools.product(OPERATIONS, repeat=length)
]
START = fixed(2026, 11, 30, 12)
FAST_WORKLOADS = 48
# The date-shifted re-runs (make test-dates) ask whether a case depends on the
# date, not how many cases there are: a quarter of the sample answers that.
FAST_CASES = 360 // (4 if YEARS_AHEAD else 1)


@dataclass
class Scene:
    """The prepared session every workload starts from."""

    world: CrashWorld
    latest: ArtifactReference
    orphan: ArtifactReference  # unleased and past the TTL: GC's candidate
    committed: str  # a committed lease on `latest` (release removes it)
    received: str  # PREPARED, the owner holds it: its receipt was lost (commit)
    plan: ArtifactCleanupPlan  # planned before the workload (gc_apply alone)
    planned: list[ArtifactCleanupPlan] = field(default_factory=list)


def set_scene(base: Path, **world: Any) -> Scene:
    """Store, lease and age artifacts so that every operation has work to do."""
    world = CrashWorld(base, seed=20261130, start=START, **world)
    kept = world.store_artifact(40_000)
    orphan = world.store_artifact(40_000)
    assert kept is not None
    assert orphan is not None
    committed = world.publish_flow(kept, None, None)
    world.prepare(kept, None)  # reconciliation seals and aborts it
    received = world.publish_flow(kept, None, "lose_receipt_for")
    world.owner.lose_receipt_for.clear()
    world.advance(2 * 3600)  # the orphan outlives the TTL
    plan = world.gc_plan()
    assert plan is not None
    world.oracle.exposed.clear()
    return Scene(world, kept, orphan, committed, received, plan)


def run(scene: Scene, operation: str, how: dict[str, Any]) -> bool:
    """Run one operation of a workload; say whether it crashed."""
    world = scene.world
    before = world.counters.crashes
    if operation == "store":
        stored = world.store_artifact(40_000, **how)
        if stored is not None:
            scene.latest = stored
    elif operation == "prepare":
        world.prepare(scene.latest, None, **how)
    elif operation == "publish":
        world.publish_flow(scene.latest, None, None, **how)
    elif operation == "commit":
        world.commit(scene.received, **how)
    elif operation == "reconcile":
        world.reconcile({}, **how)
    elif operation == "gc_plan":
        plan = world.gc_plan(**how)
        if plan is not None:
            scene.planned.append(plan)
    elif operation == "gc_apply":
        world.gc_apply(scene.planned.pop() if scene.planned else scene.plan, **how)
    elif operation == "release":
        world.remove(scene.committed, **how)
    elif operation == "lease_orphan":  # the planted-bug gate's extra operation
        world.publish_flow(scene.orphan, None, None, **how)
    else:
        msg = f"unknown operation {operation!r}"
        raise ValueError(msg)
    return world.counters.crashes > before


@contextmanager
def scene_in_tmp(**world: Any) -> Iterator[Scene]:
    base = Path(tempfile.mkdtemp(prefix="spillvault-enum-"))
    scene = set_scene(base, **world)
    try:
        yield scene
    finally:
        scene.world.close()
        shutil.rmtree(base, ignore_errors=True)


def steps_of(workload: tuple[str, ...]) -> int:
    """Count the steps a workload's operations take with no crash."""
    with scene_in_tmp() as scene:
        total = 0
        for operation in workload:
            run(scene, operation, {})
            total += scene.world.last_steps
        return total


def crash_case(workload: tuple[str, ...], crash_step: int, choice: str) -> CrashWorld:
    """Run `workload` with a crash at its `crash_step`-th step; return the world."""
    with scene_in_tmp() as scene:
        world = scene.world
        world.crash_choice = choice  # type: ignore[assignment]
        remaining = crash_step
        for operation in workload:
            if run(scene, operation, {"crash_in": remaining}):
                return world
            remaining -= world.last_steps
        msg = f"{workload}: no crash at step {crash_step}"
        raise AssertionError(msg)


@dataclass
class Enumeration:
    """The cases of this tier and the size of the whole space."""

    cases: list[tuple[tuple[str, ...], int, str]]
    workloads: int
    space: int


def enumerate_cases() -> Enumeration:
    workloads = sample(WORKLOADS, FAST_WORKLOADS, seed=6)
    cases = []
    for workload in workloads:
        steps = steps_of(workload)
        cases += [
            (workload, crash_step, choice)
            for crash_step in range(1, steps + 1)
            for choice in CHOICES
        ]
    space = len(cases)
    return Enumeration(sample(cases, FAST_CASES, seed=7), len(workloads), space)


@pytest.fixture(scope="module")
def enumeration() -> Enumeration:
    return enumerate_cases()


@pytest.mark.slow
def test_every_crash_point_of_small_workloads_recovers(
    enumeration: Enumeration,
) -> None:
    refused = 0
    for workload, crash_step, choice in enumeration.cases:
        world = crash_case(workload, crash_step, choice)
        assert world.counters.crashes == 1, world.history
        refused += world.counters.journals_refused
    tier = "long" if LONG else "fast"
    print(  # noqa: T201 - the figures the README quotes
        f"\n{tier} tier: {len(enumeration.cases)} crash cases run of "
        f"{enumeration.space} in {enumeration.workloads} workloads "
        f"(all {len(WORKLOADS)} workloads in the long tier); "
        f"journals refused then repaired: {refused}"
    )
    assert len(enumeration.cases) == min(FAST_CASES, enumeration.space) or LONG


def crash_points_of(workload: tuple[str, ...]) -> list[str]:
    """Crash at every step of `workload`; return the step each crash replaced."""
    points = []
    for crash_step in range(1, steps_of(workload) + 1):
        points += crash_case(workload, crash_step, "written").crash_points
    return points


def test_crashes_land_between_the_owner_tombstone_and_aborted() -> None:
    """S5.3's gap holds no file operation: the checkpoint is the crash point."""
    points = crash_points_of(("reconcile",))
    assert "mark after_owner_absence_sealed" in points, points
    sealed = points.index("mark after_owner_absence_sealed")
    # then the ABORTED record's journal append, each of its steps a crash point
    after = [point.split()[0] for point in points[sealed + 1 :]]
    assert {"write", "fsync", "mark"} <= set(after), points


def test_crashes_land_between_quarantine_and_unlink() -> None:
    points = crash_points_of(("gc_apply",))
    moved = [i for i, p in enumerate(points) if p.startswith("rename")]
    unlinked = [i for i, p in enumerate(points) if p.startswith("unlink .quarantine")]
    assert moved, points
    assert unlinked, points
    assert min(moved) < max(unlinked), points
