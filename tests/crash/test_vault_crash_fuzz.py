"""Crash-point fuzzing of a vault session: S3 objects, PostgreSQL events (issue 18).

The object-store counterpart of test_crash_fuzz.py, on the real servers
(SeaweedFS and PostgreSQL). Rules spill outputs through the gate (single puts,
now and then a multipart upload), read them back, prepare, publish with the
owner's failure knobs, commit, remove, reconcile, replay stale publishers,
expire leases, plan and apply GC, and crash. Each example starts from what past
lives left: outputs spilled a day ago, maybe one a crash cut short, maybe a GC
run that died in its delete window. Any rule may carry a hazard: a crash
before or after one of its S3 calls or event saves, or a network fault on an
S3 call. `VaultCrashWorld.check()` asserts I1 to I4 and the object invariants
O1 and O2 after every rule and every recovery; each crash and fault checks I5
and O3 (see `support.vault_crash_world`).

Fast tier (`make test`): 25 examples x 30 steps, about 45 s on two cores; the
long tier (`SPILLVAULT_TEST_TIER=long`): 300 x 60 with a random seed, about
15 minutes. `pytest -s` prints what the run exercised.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass
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

from spillvault.adapters.storage.s3_client import s3_client
from spillvault.domain.enums import ArtifactCleanupStatus

from support.crash_world import ORPHAN_TTL
from support.seaweedfs import s3_environment
from support.tiers import LONG, pick
from support.vault_crash_world import MULTIPART, Hazard, VaultCrashWorld

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.domain.cleanup import ArtifactCleanupPlan
    from spillvault.domain.values import ArtifactReference

    from support.seaweedfs import S3Server

# The fake clock starts at the real time (objects age by the server's clock):
# there is no fixed date for the date-shifted re-runs (make test-dates) to move.
CLOCKS_START_AT_REAL_TIME = True

KNOBS = (None, "lose_receipt_for", "reject_publish_for")
RECONCILE_KNOBS = ("unknown_for", "move_generation_for", "publish_between_for")
SMALL = (40_000, 200_000)
retain = st.none() | st.sampled_from((0.5, 2.0, 48.0))
# GC's orphan TTL: none (everything unprotected goes at once), or ten minutes.
ttls = st.sampled_from((0.0, ORPHAN_TTL))
# Mostly single puts; one spill in 12 is a multipart upload (slow: 9 MiB).
sizes = st.integers(min_value=0, max_value=11).map(
    lambda n: MULTIPART if n == 11 else SMALL[n % 2]
)
VAULT: dict[str, str] = {}
TOTALS: Counter[str] = Counter()  # what every example exercised, summed
_buckets = itertools.count(1)


@pytest.fixture(scope="module", autouse=True)
def vault(
    s3_server: S3Server, postgres_dsn: str, request: pytest.FixtureRequest
) -> Iterator[None]:
    """One bucket for the module, the AWS variables set; totals checked at the end."""
    failed = request.session.testsfailed
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_environment(s3_server).items():
            patch.setenv(name, value)
        bucket = f"vault-crash-fuzz-{next(_buckets)}"
        s3_client().create_bucket(Bucket=bucket)
        VAULT.update(artifacts=f"s3://{bucket}/fuzz", event_store=postgres_dsn)
        yield
    print(f"\nvault crash fuzzer totals: {dict(TOTALS)}")  # noqa: T201
    if TOTALS["examples"] and request.session.testsfailed == failed:
        # Never vacuous: the run crashed, deleted, settled an intent, adopted.
        assert TOTALS["crashes"] > 0, TOTALS
        assert TOTALS["gc_deleted"] > 0, TOTALS
        assert TOTALS["intents_restored"] + TOTALS["intents_finished"] > 0, TOTALS
        assert TOTALS["adopted"] > 0, TOTALS


# Most operations make 2 to 5 calls; a GC apply makes 4 per candidate.
calls = st.integers(min_value=1, max_value=4) | st.integers(min_value=1, max_value=16)


@dataclass(frozen=True)
class Aims:
    """What the hazards of one kind of operation aim at, besides any call.

    Label prefixes of the calls the operation makes (see `CallSeam`); a fault
    aims at S3 calls only. Hypothesis tries the first first: it is the window
    that matters most (an object stored but not recorded, an intent recorded
    but its delete not sent).
    """

    crash: tuple[str, ...]
    fault: tuple[str, ...]


STORE = Aims(
    crash=("save Artifact.", "put_object", "complete_multipart_upload", "upload_part"),
    fault=("put_object", "complete_multipart_upload", "upload_part"),
)
LEASE = Aims(crash=("save Lease.", "head_object"), fault=("head_object",))
EVENTS = Aims(crash=("save Lease.",), fault=())  # no S3 call: crashes only
PLAN = Aims(
    crash=("save Artifact.", "list_objects_v2", "head_object", "get_object"),
    fault=("list_objects_v2", "head_object", "get_object"),
)
READ = Aims(crash=("get_object",), fault=("get_object",))
APPLY = Aims(
    crash=("delete_object", "save Artifact.", "head_object"),
    fault=("delete_object", "head_object"),
)


@st.composite
def hazards(
    draw: st.DrawFn, aims: Aims, kinds: tuple[str, ...] = ("none", "crash", "fault")
) -> dict[str, Any]:
    """At most one of: a crash, a network fault, or nothing."""
    kind = draw(st.sampled_from(kinds if aims.fault else ("none", "crash")))
    if kind == "none":
        return {}
    on = draw(st.sampled_from((*getattr(aims, kind), None)))
    return {
        "hazard": Hazard(
            kind,
            at=draw(calls if on is None else st.integers(min_value=1, max_value=3)),
            after=draw(st.booleans()),
            persistent=kind == "fault" and draw(st.booleans()),
            on=on,
        )
    }


# A spill the process died in: its object up but no event; an upload left open.
CUT_SHORT = (
    (SMALL[0], Hazard("crash", 1, after=False, on="save Artifact.Stored")),
    (MULTIPART, Hazard("crash", 1, after=True, on="upload_part")),
)
# Each leaves GC's first intent unsettled: recorded, its delete sent or not.
DELETE_WINDOW = (
    Hazard("crash", 1, after=True, on="save Artifact.Quarantined"),
    Hazard("crash", 1, after=False, on="delete_object"),
    Hazard("crash", 1, after=True, on="delete_object"),
    Hazard("crash", 1, after=False, on="save Artifact.Deleted"),
    Hazard("fault", 1, after=False, on="delete_object"),
    Hazard("fault", 1, after=True, on="delete_object"),
)


class VaultCrashMachine(RuleBasedStateMachine):
    """A vault session, its owner and GC under crashes and network faults."""

    artifacts = Bundle("artifacts")
    plans = Bundle("plans")

    def __init__(self) -> None:
        super().__init__()
        self.world: VaultCrashWorld | None = None

    @initialize(
        target=artifacts,
        seed=st.integers(min_value=0, max_value=2**32 - 1),
        outputs=st.lists(sizes, min_size=1, max_size=3),
        cut_short=st.sampled_from(CUT_SHORT) | st.none(),
        gc=st.sampled_from(DELETE_WINDOW) | st.none(),
    )
    def start(
        self,
        seed: int,
        outputs: list[int],
        cut_short: tuple[int, Hazard] | None,
        gc: Hazard | None,
    ) -> Any:
        """Open the session as past lives left it: outputs spilled a day ago, maybe
        one more a crash cut short, maybe a GC run that died (or lost the network)
        in its delete window.
        """
        world = self.world = VaultCrashWorld(
            VAULT["artifacts"], VAULT["event_store"], seed=seed
        )
        stored = [world.store_artifact(size) for size in outputs]
        if cut_short is not None:
            world.store_artifact(*cut_short)
        world.advance(25 * 3600)
        if gc is not None:
            world.collect(0.0, gc)
        return multiple(*(reference for reference in stored if reference))

    @property
    def w(self) -> VaultCrashWorld:
        assert self.world is not None
        return self.world

    def teardown(self) -> None:
        if self.world is not None:
            TOTALS["examples"] += 1
            TOTALS.update(dataclasses.asdict(self.world.counters))
            self.world.close()

    # ------------------------------------------------------------------ rules

    @rule(target=artifacts, size=sizes, how=hazards(STORE))
    def store_artifact(self, size: int, how: dict[str, Any]) -> Any:
        reference = self.w.store_artifact(size, **how)
        return multiple() if reference is None else multiple(reference)

    @rule(artifact=artifacts, how=hazards(READ))
    def read_back(self, artifact: ArtifactReference, how: Any) -> None:
        self.w.read_back(artifact, **how)

    @rule(artifact=artifacts, retain_hours=retain, how=hazards(LEASE))
    def prepare(
        self, artifact: ArtifactReference, retain_hours: float | None, how: Any
    ) -> None:
        self.w.prepare(artifact, retain_hours, **how)

    @rule(
        artifact=artifacts,
        retain_hours=retain,
        knob=st.sampled_from(KNOBS),
        how=hazards(LEASE),
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
    @rule(data=st.data(), how=hazards(EVENTS))
    def commit(self, data: st.DataObject, how: Any) -> None:
        tx = data.draw(st.sampled_from(self.w.transactions))
        if self.w.owner.holds(tx):
            self.w.commit(tx, **how)

    @precondition(lambda self: self.world is not None and self.world.transactions)
    @rule(data=st.data(), how=hazards(EVENTS))
    def remove(self, data: st.DataObject, how: Any) -> None:
        tx = data.draw(st.sampled_from(self.w.transactions))
        self.w.remove(tx, **how)

    @rule(
        knobs=st.lists(st.sampled_from(RECONCILE_KNOBS), max_size=3),
        data=st.data(),
        how=hazards(EVENTS),
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

    @rule(target=plans, ttl=ttls, how=hazards(PLAN))
    def gc_plan(self, ttl: float, how: Any) -> Any:
        plan = self.w.gc_plan(ttl, **how)
        return multiple() if plan is None else multiple(plan)

    @rule(plan=plans, data=st.data(), how=hazards(LEASE))
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

    @rule(plan=consumes(plans), how=hazards(APPLY))
    def gc_apply(self, plan: ArtifactCleanupPlan, how: Any) -> None:
        self.w.gc_apply(plan, **how)

    @rule(ttl=ttls, how=hazards(APPLY, kinds=("crash", "crash", "fault")))
    def gc_collect(self, ttl: float, how: Any) -> None:
        """Plan and apply at once (the CLI's `gc --apply`); a hazard hits the apply."""
        self.w.collect(ttl, **how)

    @rule(interrupt=st.booleans(), hours=st.sampled_from((0.0, 30.0)))
    def crash_and_reopen(self, interrupt: bool, hours: float) -> None:
        """The process dies now and restarts `hours` later; recovery may crash too."""
        self.w.crash_and_reopen(interrupt_recovery=interrupt, downtime=hours * 3600)

    @invariant()
    def invariants_hold(self) -> None:
        if self.world is not None:
            TOTALS["steps"] += 1
            if self.world.unchecked:  # every operation checks as it ends
                self.world.check()


VaultCrashMachine.TestCase.settings = settings(
    max_examples=pick(25, 300),
    stateful_step_count=pick(30, 60),
    deadline=None,
    derandomize=not LONG,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    print_blob=True,
)
TestVaultCrashMachine = pytest.mark.slow(VaultCrashMachine.TestCase)
