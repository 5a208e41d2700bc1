"""The planted-bug gate: with any one safeguard off, the tests fail (issue 7).

Each safeguard is switched off from the tests only: through
`open_session(safeguards=...)`, the filesystem seam (`PlantedFS`) or an
injected owner (`UncheckedFenceOwner`). The crash fuzzer of issue 6, run on
the variant, must find a failure within its CI budget; with every safeguard
on it passes (`test_crash_fuzz.py`). Concurrency safeguards are driven by
interleaving hooks that start the competitor on another thread mid-operation.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from test_crash_enumeration import run, scene_in_tmp, steps_of
from test_crash_fuzz import CrashMachine

from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.safeguards import Safeguards
from spillvault.domain.values import ArtifactRetentionClaim

from support.crash_world import CrashWorld
from support.crashfs import CrashFS
from support.locks import BlockingWitness
from support.planted import UncheckedFenceOwner, planted_fs
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

FUZZ_BUDGET = 200  # examples: the fast tier's own count
# Issue 7's safeguards, each with the test that fails without it.
CAUGHT_BY = {
    "directory fsync after publish": "test_the_crash_fuzzer_catches_the_planted_bug",
    "tombstone before ABORTED": "test_the_crash_fuzzer_catches_the_planted_bug",
    "generation check in seal_absent": "test_the_crash_fuzzer_catches_the_planted_bug",
    "truncate before append": (
        "test_the_enumeration_catches_an_append_glued_onto_a_torn_tail"
    ),
    "re-verification in GC apply": (
        "test_the_enumeration_catches_gc_apply_without_reverification"
    ),
    "session lock in publication": (
        "test_without_the_publication_lock_gc_deletes_a_prepared_artifact"
    ),
    "nlink check": "test_gc_refuses_a_file_with_a_second_link",
}


@dataclass(frozen=True)
class Plant:
    """One safeguard switched off, and the world that has it off."""

    safeguard: str
    world: Callable[[Path, int], CrashWorld]


PLANTS = [
    Plant(
        "directory fsync after publish",
        lambda base, seed: CrashWorld(
            base, seed=seed, fs_factory=planted_fs("no_publish_dir_fsync")
        ),
    ),
    Plant(
        "tombstone before ABORTED",
        lambda base, seed: CrashWorld(
            base, seed=seed, safeguards=Safeguards(tombstone_first=False)
        ),
    ),
    Plant(
        "generation check in seal_absent",
        lambda base, seed: CrashWorld(
            base, seed=seed, owner=UncheckedFenceOwner(lock_timeout=5)
        ),
    ),
]


def fuzz(plant: Plant) -> tuple[BaseException | None, float]:
    """Run the crash fuzzer on `plant`'s world; return its failure and the time."""

    class Planted(CrashMachine):
        def make_world(self, seed: int) -> CrashWorld:
            return plant.world(self.base, seed)

    began = time.perf_counter()
    try:
        run_state_machine_as_test(
            Planted,
            settings=settings(
                max_examples=FUZZ_BUDGET,
                stateful_step_count=50,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],  # finding is the point, not shrinking
                suppress_health_check=list(HealthCheck),
            ),
        )
    except Exception as error:
        return error, time.perf_counter() - began
    return None, time.perf_counter() - began


@pytest.mark.slow
@pytest.mark.real_time  # the fuzzer's worlds start at the real time
# Coverage of code with a safeguard switched off says nothing of the real code
# (and measuring it costs the hunt half again its time).
@pytest.mark.no_cover
@pytest.mark.parametrize("plant", PLANTS, ids=[p.safeguard for p in PLANTS])
def test_the_crash_fuzzer_catches_the_planted_bug(plant: Plant) -> None:
    failure, seconds = fuzz(plant)
    print(  # noqa: T201 - the README's figures
        f"\nplanted bug [{plant.safeguard}]: "
        f"{'caught' if failure else 'MISSED'} in {seconds:.1f} s"
        + (f": {str(failure).splitlines()[0]}" if failure else "")
    )
    assert failure is not None, f"the fuzzer missed: {plant.safeguard}"


# --------------------------------------------------- enumeration: GC re-verify

RACE_OPERATIONS = ("gc_plan", "lease_orphan", "gc_apply")


def enumeration_failures(**world: Any) -> list[str]:
    """Run every workload of 1-3 GC/lease operations; return the failures."""
    failures = []
    for length in (1, 2, 3):
        for workload in itertools.product(RACE_OPERATIONS, repeat=length):
            with scene_in_tmp(**world) as scene:
                try:
                    for operation in workload:
                        run(scene, operation, {})
                except AssertionError as error:
                    failures.append(f"{workload}: {str(error).splitlines()[0]}")
    return failures


def test_the_enumeration_catches_gc_apply_without_reverification() -> None:
    assert enumeration_failures() == []
    failures = enumeration_failures(
        safeguards=Safeguards(reverify_claims_at_apply=False)
    )
    print(f"\nplanted bug [re-verification in GC apply]: caught: {failures[0]}")  # noqa: T201
    assert failures
    assert all("I1: protected artifact" in failure for failure in failures)


# ------------------------------------- enumeration: truncate before append


def torn_tail_failures(**world: Any) -> list[str]:
    """Crash at every step of a publication (zeroed writes), append, reopen."""
    steps = steps_of(("publish",))
    failures = []
    for crash_step in range(1, steps + 1):
        with scene_in_tmp(**world) as scene:
            scene.world.crash_choice = "zero"  # a NUL run: a torn tail, no newline
            try:
                run(scene, "publish", {"crash_in": crash_step})
                run(scene, "publish", {})  # the next append after recovery
                scene.world.reopen()  # J5: every complete line must verify
                scene.world.session.journal.verify()
                if scene.world.counters.journals_refused:
                    failures.append(f"step {crash_step}: journal refused")
            except (AssertionError, ArtifactLeaseJournalError) as error:
                failures.append(f"step {crash_step}: {str(error).splitlines()[0]}")
    return failures


def test_the_enumeration_catches_an_append_glued_onto_a_torn_tail() -> None:
    assert torn_tail_failures() == []
    failures = torn_tail_failures(fs_factory=planted_fs("no_truncate_before_append"))
    print(f"\nplanted bug [truncate before append]: caught: {failures[0]}")  # noqa: T201
    assert failures


# ------------------------------------------- interleaving: the publication lock


@dataclass
class Race:
    """What an interleaving test saw: who finished when, and the invariant."""

    order: list[str]
    violation: str | None


def prepare_racing_gc(safeguards: Safeguards) -> Race:
    """Start GC apply on another thread between re-verification and PREPARED."""
    order: list[str] = []
    with scene_in_tmp(safeguards=safeguards) as scene:
        world = scene.world
        orphan = os.path.basename(scene.orphan.path)
        plan = scene.plan
        assert orphan in {d.filename for d in plan.candidates()}

        def apply_gc() -> None:
            world.session.externalizer.apply_cleanup_from_journal(
                plan, world.session.journal, now=world.clock.now()
            )
            order.append("gc finished")

        competitor = threading.Thread(target=apply_gc)
        lock = world.session.lock
        witness = BlockingWitness(lock._mutex)
        lock._mutex = witness  # type: ignore[assignment]

        def after_close(path: str) -> None:
            # The re-verification has just read the orphan: start GC now and
            # wait until it has finished or has to wait for the session lock
            # (a state, not a time: the machine's speed cannot change it).
            if path.endswith(orphan) and not competitor.is_alive() and not order:
                order.append("verified")
                competitor.start()
                deadline = time.monotonic() + HANG_GUARD_SECONDS
                while competitor.is_alive() and not witness.blocked.is_set():
                    assert time.monotonic() < deadline, (
                        "hang guard: GC neither ran nor waited"
                    )
                    competitor.join(timeout=0.001)

        world.fs.on_close = after_close
        claim = ArtifactRetentionClaim.from_memory_reference(scene.orphan.for_memory())
        world.session.journal.prepare(claim, transaction_id="tx-race")
        order.append("prepared")
        world.fs.on_close = None
        competitor.join(timeout=HANG_GUARD_SECONDS)
        assert not competitor.is_alive()
        lock._mutex = witness.inner
        try:
            world.check()
        except AssertionError as error:
            return Race(order, str(error).splitlines()[0])
        return Race(order, None)


def test_gc_waits_for_the_publication_lock() -> None:
    held = prepare_racing_gc(Safeguards())
    assert held.order == ["verified", "prepared", "gc finished"], held
    assert held.violation is None


def test_without_the_publication_lock_gc_deletes_a_prepared_artifact() -> None:
    race = prepare_racing_gc(Safeguards(publication_lock=False))
    print(f"\nplanted bug [session lock in publication]: caught: {race}")  # noqa: T201
    assert race.order == ["verified", "gc finished", "prepared"], race
    assert race.violation is not None
    assert "I1: protected artifact" in race.violation


# ------------------------------------------------------- the GC's nlink check


def apply_with_a_second_link(fs_factory: Callable[..., CrashFS]) -> str:
    """Plan GC, hard-link the candidate from outside the session, apply."""
    with scene_in_tmp(fs_factory=fs_factory) as scene:
        world = scene.world
        name = os.path.basename(scene.orphan.path)
        os.link(scene.orphan.path, world.base / "outside" / "a-second-name")
        report = world.session.externalizer.apply_cleanup_from_journal(
            scene.plan, world.session.journal, now=world.clock.now()
        )
        return {d.filename: d.status.value for d in report.decisions}[name]


def test_gc_refuses_a_file_with_a_second_link() -> None:
    assert apply_with_a_second_link(CrashFS) == "race_detected"
    planted = apply_with_a_second_link(planted_fs("no_nlink_check"))
    print(f"\nplanted bug [nlink check]: caught: GC {planted} a hard-linked file")  # noqa: T201
    assert planted == "deleted"


def test_every_safeguard_has_a_test_that_fails_without_it() -> None:
    """N of N: the gate covers all seven safeguards issue 7 names."""
    assert len(CAUGHT_BY) == 7
    fuzzed = {plant.safeguard for plant in PLANTS}
    assert fuzzed == {
        name
        for name, test in CAUGHT_BY.items()
        if test == "test_the_crash_fuzzer_catches_the_planted_bug"
    }
    for test in CAUGHT_BY.values():
        assert callable(globals()[test]), test
