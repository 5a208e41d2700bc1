"""A conformance test case for memory-owner adapters, shipped in the package (S8.3).

Subclass `ArtifactReferenceOwnerTestCase`, implement `create_owner()` and let
unittest or pytest run it; when other processes can open the owner's storage
(any real store), subclass `SharedStorageOwnerTestCase` instead and implement
`process_owner_factory()` too, which adds the cross-process fence test.
Prepare the test's storage before `setUp()` creates `self.owner`; override
`reopen_owner()` when a second object on the same storage is not simply
another `create_owner()`:

    class TestMyOwner(SharedStorageOwnerTestCase):
        def setUp(self) -> None:
            self.path = os.path.join(tempfile.mkdtemp(), "owner.db")
            super().setUp()

        def create_owner(self) -> MyOwner:
            return MyOwner(self.path)

        def process_owner_factory(self) -> Callable[[], MyOwner]:
            return functools.partial(MyOwner, self.path)
"""

# A unittest.TestCase for adapter authors: unittest's assertions work under any
# runner and survive `python -O`, so pytest's assert style does not apply here.
# ruff: noqa: PT009, PT027

from __future__ import annotations

import hashlib
import multiprocessing
import random
import threading
from abc import ABC, abstractmethod
from contextlib import suppress
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Protocol
from unittest import TestCase

from spillvault.domain.enums import ArtifactReferencePresence
from spillvault.domain.errors import (
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
)
from spillvault.domain.ports import ArtifactReferenceOwner
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactMemoryReference,
    ArtifactReferenceObservation,
    ArtifactRetentionClaim,
    ArtifactSource,
    ArtifactSourceId,
    artifact_filename,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.synchronize import Event

PUBLISHED = ArtifactReferencePresence.PUBLISHED
ABSENT = ArtifactReferencePresence.ABSENT
PREPARED_AT = datetime(2026, 1, 1, tzinfo=UTC)


class ConformingOwner(ArtifactReferenceOwner, Protocol):
    """The owner port plus the callables the journal takes (S5.1)."""

    def publisher(
        self, memory_reference: ArtifactMemoryReference, transaction_id: str
    ) -> Callable[[], object]:
        """Return a zero-argument publish of the reference."""
        ...

    def remover(self, transaction_id: str) -> Callable[[], object]:
        """Return a zero-argument removal of the reference."""
        ...


def publish_in_child(
    factory: Callable[[], ConformingOwner],
    transaction_id: str,
    reference: ArtifactMemoryReference,
    ready: Event,
    done: Event,
) -> None:
    """Run in a spawned process: open an owner, say so, publish, say so."""
    owner = factory()
    ready.set()
    owner.publish(transaction_id, reference)
    done.set()


class _Failure(Exception):
    """Raised inside a fence to check what survives the block's failure."""


class ArtifactReferenceOwnerTestCase(TestCase, ABC):
    """What every memory-owner adapter must do (S5.1, S5.3, S5.6)."""

    session_id = "s1"
    #: How long a write that must wait for a fence is watched, expecting no finish.
    blocked_seconds = 0.5
    #: The generous bound for anything that must finish.
    timeout_seconds = 30.0

    owner: ConformingOwner

    @abstractmethod
    def create_owner(self) -> ConformingOwner:
        """Return an owner on this test's storage (fresh for each test)."""

    def reopen_owner(self) -> ConformingOwner:
        """Return another owner object on the same storage, as a new process would."""
        return self.create_owner()

    def setUp(self) -> None:
        """Create `self.owner`."""
        super().setUp()
        self.owner = self.create_owner()

    # builders -------------------------------------------------------------

    def make_reference(self, number: int = 1) -> ArtifactMemoryReference:
        """Return a valid memory reference to artifact `number` of the session."""
        filename = artifact_filename(number)
        digest = hashlib.sha256(f"artifact {number}".encode()).hexdigest()
        source_id = ArtifactSourceId.for_artifact(self.session_id, filename, digest)
        return ArtifactMemoryReference(
            summary=f"output of tool call {number}",
            artifact_path=f"/sessions/{self.session_id}/tool-results/{filename}",
            content_sha256=digest,
            source_tool="bash",
            source=ArtifactSource(
                source_id=str(source_id),
                title=f"bash output {number}",
                captured_at=PREPARED_AT.isoformat(),
            ),
        )

    def make_transaction(
        self, transaction_id: str, reference: ArtifactMemoryReference | None = None
    ) -> ArtifactLeaseTransaction:
        """Return the prepared transaction publishing `reference` under the id."""
        claim = ArtifactRetentionClaim.from_memory_reference(
            reference or self.make_reference()
        )
        return ArtifactLeaseTransaction(transaction_id, claim, PREPARED_AT)

    def observe(
        self, transaction_id: str, owner: ConformingOwner | None = None
    ) -> ArtifactReferenceObservation:
        """Return the owner's fenced observation of the id."""
        with (owner or self.owner).inspect_fenced(
            self.make_transaction(transaction_id)
        ) as fence:
            return fence.observation

    def seal(self, transaction_id: str) -> ArtifactReferenceObservation:
        """Seal the id's absence through a fence; return the sealed observation."""
        with self.owner.inspect_fenced(self.make_transaction(transaction_id)) as fence:
            return fence.seal_absent()

    def run_in_thread(
        self, function: Callable[[], object]
    ) -> tuple[threading.Event, list[BaseException]]:
        """Start `function` on a thread; return its done event and its errors."""
        done = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                function()
            except BaseException as error:  # noqa: BLE001 - reported to the test
                errors.append(error)
            finally:
                done.set()

        threading.Thread(target=run, daemon=True).start()
        return done, errors

    # the port ---------------------------------------------------------------

    def test_owner_satisfies_the_port(self) -> None:
        """The owner is an `ArtifactReferenceOwner`."""
        self.assertIsInstance(self.owner, ArtifactReferenceOwner)

    def test_never_seen_id_is_absent_at_generation_zero(self) -> None:
        """An id never written is ABSENT, generation 0, not sealed."""
        self.assertEqual(
            self.observe("tx-never-seen"),
            ArtifactReferenceObservation("tx-never-seen", 0, ABSENT),
        )

    def test_publish_reports_the_reference_with_its_identity(self) -> None:
        """A published reference is PUBLISHED with its source id and digest."""
        reference = self.make_reference()
        self.owner.publish("tx-publish", reference)
        observation = self.observe("tx-publish")
        self.assertIs(observation.presence, PUBLISHED)
        self.assertEqual(observation.source_id, reference.source.source_id)
        self.assertEqual(observation.content_sha256, reference.content_sha256)
        self.assertGreater(observation.generation, 0)
        self.assertFalse(observation.absence_sealed)

    def test_publishing_the_same_reference_again_changes_nothing(self) -> None:
        """A replayed publish of the same reference is idempotent."""
        reference = self.make_reference()
        self.owner.publish("tx-replay", reference)
        first = self.observe("tx-replay")
        self.owner.publish("tx-replay", reference)
        self.assertEqual(self.observe("tx-replay"), first)

    def test_publishing_a_different_reference_is_a_conflict(self) -> None:
        """Another reference under a published id is a ValueError, not a rejection."""
        self.owner.publish("tx-conflict", self.make_reference(1))
        before = self.observe("tx-conflict")
        with self.assertRaises(ValueError):
            self.owner.publish("tx-conflict", self.make_reference(2))
        self.assertEqual(self.observe("tx-conflict"), before)

    def test_remove_seals_the_id_at_a_higher_generation(self) -> None:
        """Removal leaves a sealed absence; removing again is a no-op."""
        self.owner.publish("tx-remove", self.make_reference())
        published = self.observe("tx-remove")
        self.owner.remove("tx-remove")
        removed = self.observe("tx-remove")
        self.assertIs(removed.presence, ABSENT)
        self.assertTrue(removed.absence_sealed)
        self.assertGreater(removed.generation, published.generation)
        self.owner.remove("tx-remove")
        self.owner.remove("tx-never-written")
        self.assertEqual(self.observe("tx-remove"), removed)
        self.assertEqual(self.observe("tx-never-written").generation, 0)

    def test_a_removed_id_refuses_a_late_publish(self) -> None:
        """A zombie writer's replay cannot revive a removed reference (S5.3)."""
        reference = self.make_reference()
        late_retry = self.owner.publisher(reference, "tx-zombie")
        late_retry()
        self.owner.remove("tx-zombie")
        removed = self.observe("tx-zombie")
        with self.assertRaises(ArtifactPublicationRejected):
            late_retry()
        with self.assertRaises(ArtifactPublicationRejected):
            self.reopen_owner().publisher(reference, "tx-zombie")()
        self.assertEqual(self.observe("tx-zombie"), removed)

    # sealing ----------------------------------------------------------------

    def test_seal_tombstones_an_absent_id_once(self) -> None:
        """A seal advances the generation; sealing again returns the same seal."""
        with self.owner.inspect_fenced(self.make_transaction("tx-seal")) as fence:
            observed = fence.observation
            sealed = fence.seal_absent()
            self.assertEqual(fence.seal_absent(), sealed)
        self.assertIs(sealed.presence, ABSENT)
        self.assertTrue(sealed.absence_sealed)
        self.assertGreater(sealed.generation, observed.generation)
        with self.owner.inspect_fenced(self.make_transaction("tx-seal")) as fence:
            self.assertEqual(fence.observation, sealed)
            self.assertEqual(fence.seal_absent(), sealed)

    def test_seal_after_a_removal_returns_the_removal_seal(self) -> None:
        """Sealing a removed id seals nothing more: the removal sealed it."""
        self.owner.publish("tx-removed", self.make_reference())
        self.owner.remove("tx-removed")
        removed = self.observe("tx-removed")
        self.assertEqual(self.seal("tx-removed"), removed)

    def test_a_tombstone_refuses_publication_and_writes_nothing(self) -> None:
        """After the seal, publish raises ArtifactPublicationRejected forever."""
        sealed = self.seal("tx-late")
        reference = self.make_reference()
        with self.assertRaises(ArtifactPublicationRejected):
            self.owner.publish("tx-late", reference)
        with self.assertRaises(ArtifactPublicationRejected):
            self.reopen_owner().publisher(reference, "tx-late")()
        self.owner.remove("tx-late")
        self.assertEqual(self.observe("tx-late"), sealed)

    def test_seal_of_a_published_reference_raises_generation_changed(self) -> None:
        """Sealing a PUBLISHED observation refuses and changes nothing."""
        self.owner.publish("tx-present", self.make_reference())
        with self.owner.inspect_fenced(self.make_transaction("tx-present")) as fence:
            published = fence.observation
            self.assertIs(published.presence, PUBLISHED)
            with self.assertRaises(ArtifactOwnerGenerationChanged):
                fence.seal_absent()
        self.assertEqual(self.observe("tx-present"), published)

    def test_seal_is_durable_when_it_returns(self) -> None:
        """An error later in the fence does not undo a seal (tombstone first)."""
        transaction = self.make_transaction("tx-durable")
        sealed = None
        with (
            self.assertRaises(_Failure),
            self.owner.inspect_fenced(transaction) as fence,
        ):
            sealed = fence.seal_absent()
            raise _Failure
        self.assertEqual(self.observe("tx-durable", self.reopen_owner()), sealed)

    def test_seal_after_the_fence_exited_is_refused(self) -> None:
        """A fence cannot seal once its block has exited."""
        with self.owner.inspect_fenced(self.make_transaction("tx-exited")) as fence:
            pass
        with self.assertRaises(RuntimeError):
            fence.seal_absent()
        self.assertFalse(self.observe("tx-exited").absence_sealed)

    def test_generation_never_decreases(self) -> None:
        """Over any sequence of operations each id's generation only grows."""
        rng = random.Random(20260101)  # noqa: S311 - a fixed, replayable sequence
        references = [self.make_reference(1), self.make_reference(2)]
        last = {tx: self.observe(tx) for tx in ("tx-g1", "tx-g2", "tx-g3")}
        for step in range(60):
            transaction_id = rng.choice(sorted(last))
            action = rng.choice(["publish", "publish", "remove", "seal", "inspect"])
            with suppress(
                ArtifactPublicationRejected, ArtifactOwnerGenerationChanged, ValueError
            ):
                if action == "publish":
                    self.owner.publish(transaction_id, rng.choice(references))
                elif action == "remove":
                    self.owner.remove(transaction_id)
                elif action == "seal":
                    self.seal(transaction_id)
            now = self.observe(transaction_id)
            before = last[transaction_id]
            where = f"step {step}: {action} {transaction_id}"
            self.assertGreaterEqual(now.generation, before.generation, where)
            if (now.presence, now.source_id, now.absence_sealed) != (
                before.presence,
                before.source_id,
                before.absence_sealed,
            ):
                self.assertGreater(now.generation, before.generation, where)
            last[transaction_id] = now

    # the fence --------------------------------------------------------------

    def test_fence_holds_off_a_publish_until_it_exits(self) -> None:
        """A publish of the fenced id, by another owner object, waits for the fence."""
        other = self.reopen_owner()
        reference = self.make_reference()
        with self.owner.inspect_fenced(self.make_transaction("tx-fenced")) as fence:
            self.assertIs(fence.observation.presence, ABSENT)
            done, errors = self.run_in_thread(
                partial(other.publish, "tx-fenced", reference)
            )
            finished_early = done.wait(self.blocked_seconds)
        self.assertFalse(finished_early, "publish completed while the fence was held")
        self.assertTrue(done.wait(self.timeout_seconds), "publish never completed")
        self.assertEqual(errors, [])
        self.assertIs(self.observe("tx-fenced").presence, PUBLISHED)

    def test_fence_holds_off_another_fence_until_it_exits(self) -> None:
        """A second reconciler waits, then finds the first one's seal."""
        other = self.reopen_owner()
        transaction = self.make_transaction("tx-two-fences")
        seen: list[ArtifactReferenceObservation] = []

        def second_reconciler() -> None:
            with other.inspect_fenced(transaction) as fence:
                seen.append(fence.observation)
                seen.append(fence.seal_absent())

        with self.owner.inspect_fenced(transaction) as fence:
            done, errors = self.run_in_thread(second_reconciler)
            finished_early = done.wait(self.blocked_seconds)
            sealed = fence.seal_absent()
        self.assertFalse(finished_early, "a second fence entered while one was held")
        self.assertTrue(done.wait(self.timeout_seconds), "second fence never entered")
        self.assertEqual(errors, [])
        self.assertEqual(seen, [sealed, sealed])

    # storage ----------------------------------------------------------------

    def test_state_survives_reopening(self) -> None:
        """Published, removed and sealed ids read the same from a reopened owner."""
        self.owner.publish("tx-kept", self.make_reference(1))
        self.owner.publish("tx-gone", self.make_reference(2))
        self.owner.remove("tx-gone")
        self.seal("tx-sealed")
        before = [self.observe(tx) for tx in ("tx-kept", "tx-gone", "tx-sealed")]
        reopened = self.reopen_owner()
        after = [
            self.observe(tx, reopened) for tx in ("tx-kept", "tx-gone", "tx-sealed")
        ]
        self.assertEqual(after, before)
        with self.assertRaises(ArtifactPublicationRejected):
            reopened.publish("tx-sealed", self.make_reference(3))

    def test_odd_transaction_ids_work(self) -> None:
        """Unicode, quotes, SQL-ish text and long ids are just ids."""
        odd = [
            "tx-ünïcødé-✓-数据",
            "tx-'quoted'-\"double\"-`back`",
            "tx'); DROP TABLE artifact_references; --",
            "x" * 300,
        ]
        for number, transaction_id in enumerate(odd, start=1):
            reference = self.make_reference(number)
            self.owner.publish(transaction_id, reference)
            observation = self.observe(transaction_id)
            self.assertEqual(observation.transaction_id, transaction_id)
            self.assertEqual(observation.source_id, reference.source.source_id)
        self.assertEqual(
            [self.observe(tx).presence for tx in odd], [PUBLISHED] * len(odd)
        )

    def test_publisher_and_remover_callables(self) -> None:
        """`publisher()` and `remover()` build the journal's zero-argument calls."""
        reference = self.make_reference()
        publish = self.owner.publisher(reference, "tx-callables")
        remove = self.owner.remover("tx-callables")
        self.assertEqual(self.observe("tx-callables").generation, 0)
        publish()
        self.assertEqual(
            self.observe("tx-callables").source_id, reference.source.source_id
        )
        remove()
        self.assertIs(self.observe("tx-callables").presence, ABSENT)


class SharedStorageOwnerTestCase(ArtifactReferenceOwnerTestCase):
    """What an owner whose storage other processes open must also do."""

    @abstractmethod
    def process_owner_factory(self) -> Callable[[], ConformingOwner]:
        """Return a picklable factory of owners on this test's storage."""

    def test_fence_holds_off_a_publish_from_another_process(self) -> None:
        """A publish from a spawned process waits for the fence too."""
        factory = self.process_owner_factory()
        context = multiprocessing.get_context("spawn")
        ready, done = context.Event(), context.Event()
        reference = self.make_reference()
        child = context.Process(
            target=publish_in_child,
            args=(factory, "tx-other-process", reference, ready, done),
            daemon=True,
        )
        transaction = self.make_transaction("tx-other-process")
        try:
            with self.owner.inspect_fenced(transaction):
                child.start()
                opened = ready.wait(self.timeout_seconds)
                finished_early = done.wait(self.blocked_seconds)
            self.assertTrue(opened, "the child never opened the owner")
            self.assertFalse(finished_early, "the child published through the fence")
            self.assertTrue(
                done.wait(self.timeout_seconds), "the child never published"
            )
            child.join(self.timeout_seconds)
            self.assertEqual(child.exitcode, 0)
        finally:
            if child.is_alive():
                child.kill()
                child.join()
        self.assertEqual(
            self.observe("tx-other-process").source_id, reference.source.source_id
        )
