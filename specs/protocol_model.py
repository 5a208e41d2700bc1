"""Explicit-state model of publication, reconciliation and GC, and a BFS checker.

Run `python -m spillvault.specs.protocol_model` for the table of verdicts.

The model has one artifact, one lease (one transaction id) and five processes:

* writer: re-verifies that the artifact exists and records the lease's creation
  phase (PREPARED) under the session lock, reads the owner's generation, then
  publishes with a CAS on that generation and records COMMITTED, or ABORTED when
  the owner rejects it; it may also give up with its request still in flight.
* zombie: that in-flight publish request, replayed once at any later moment (after
  the writer gave up, after reconciliation decided, after removal).
* reconciler: for a PREPARED lease, observes the owner (generation, reference,
  tombstone); a published reference is committed, an absent one is sealed (CAS
  tombstone against the observed generation) and aborted; it runs again while the
  lease stays PREPARED, and may crash between its seal and its ABORTED record.
* gc: plans without the lock (is the lease live?), then applies under the session
  lock: re-verifies the lease and deletes the artifact.
* owner: holds the reference; removes it (tombstoning the id) and then the lease is
  released (SPEC S4.9).

Every lease phase change (commit, abort, release) is looked up in the transitions
loaded from `lease.toml`; an edge the spec lacks records nothing, exactly as the
domain refuses an illegal transition.  Live phases are the spec's non-terminal
ones.  Four safeguards can be switched off one at a time; with all of them on, no
reachable state violates: "no artifact that a live lease protects is deleted, and
no reference is visible for a deleted artifact".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from .loader import MachineSpec, SpecError, load_packaged_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Sequence

S = TypeVar("S", bound="Hashable")

SAFE = "safe"
UNSAFE = "unsafe"
# The triggers the protocol fires; their edges come from the spec.
TRIGGERS = ("commit", "abort", "release")
NO_LEASE = "none"

# Program counters (the processes' local control state).
FREE, HELD_BY_WRITER, HELD_BY_GC = "free", "writer", "gc"
W_START, W_LOCKED, W_VERIFIED, W_PREPARED = "start", "locked", "verified", "prepared"
W_READY, W_LANDED, W_REJECTED, W_DONE = "ready", "landed", "rejected", "done"
R_IDLE, R_SEEN, R_SEALED, R_ABORTED = "idle", "seen", "sealed", "aborted"
G_IDLE, G_PLANNED, G_LOCKED, G_CLEARED, G_DONE = (
    "idle",
    "planned",
    "locked",
    "cleared",
    "done",
)
O_HOLDING, O_REMOVED, O_DONE = "holding", "removed", "done"


class TransitionSystem(Protocol[S]):
    """What the checker needs: an initial state, labelled successors, a property."""

    def initial(self) -> S:
        """Return the initial state."""
        ...

    def successors(self, state: S) -> Iterable[tuple[str, S]]:
        """Yield (action name, next state) for every enabled action."""
        ...

    def violation(self, state: S) -> str | None:
        """Return why `state` is bad, or None when the property holds."""
        ...


@dataclass(frozen=True)
class CheckResult:
    """A verdict, the states explored and the shortest counterexample (if any)."""

    verdict: str
    states: int
    transitions: int
    depth: int
    trace: tuple[str, ...]
    violation: str | None

    @property
    def safe(self) -> bool:
        """Say whether no reachable state violates the property."""
        return self.verdict == SAFE


def check(system: TransitionSystem[S]) -> CheckResult:
    """Explore breadth-first; stop at the first violating state (a shortest trace)."""
    # BFS discovers states in order of depth, so the first bad state discovered is
    # at minimal depth; for a safe system `depth` is the deepest layer reached.
    start = system.initial()
    # parent[state] = (previous state, action, depth); the start has no parent.
    parent: dict[S, tuple[S | None, str, int]] = {start: (None, "", 0)}
    transitions = 0
    reason = system.violation(start)
    if reason is not None:
        return CheckResult(UNSAFE, 1, 0, 0, (), reason)
    queue: deque[S] = deque([start])
    deepest = 0
    while queue:
        state = queue.popleft()
        depth = parent[state][2] + 1
        for action, nxt in system.successors(state):
            transitions += 1
            if nxt in parent:
                continue
            parent[nxt] = (state, action, depth)
            deepest = depth
            reason = system.violation(nxt)
            if reason is not None:
                trace = _trace_to(parent, nxt)
                return CheckResult(
                    UNSAFE, len(parent), transitions, depth, trace, reason
                )
            queue.append(nxt)
    return CheckResult(SAFE, len(parent), transitions, deepest, (), None)


def _trace_to(parent: dict[S, tuple[S | None, str, int]], state: S) -> tuple[str, ...]:
    actions: list[str] = []
    previous, action, _ = parent[state]
    while previous is not None:
        actions.append(action)
        previous, action, _ = parent[previous]
    return tuple(reversed(actions))


@dataclass(frozen=True)
class Safeguards:
    """The four core safeguards; each can be removed to see the model break."""

    reverify: bool = True  # GC apply re-checks the leases under the session lock
    writer_lock: bool = True  # prepare's re-verify + record hold the session lock
    fence: bool = True  # the owner's seal and publish CAS on the generation
    tomb_first: bool = True  # tombstone before ABORTED, never the reverse

    @property
    def label(self) -> str:
        """Name the configuration: all safeguards, or which one is missing."""
        missing = [f.name.upper() for f in fields(self) if not getattr(self, f.name)]
        return "all safeguards" if not missing else "no " + ", no ".join(missing)


SAFEGUARD_NAMES = tuple(f.name for f in fields(Safeguards))


def configurations() -> tuple[Safeguards, ...]:
    """Return all safeguards on, then each of the four removed alone."""
    full = Safeguards()
    return (full, *(replace(full, **{name: False}) for name in SAFEGUARD_NAMES))


class LeaseRules:
    """The lease transitions of a spec, as the model consults them."""

    def __init__(self, spec: MachineSpec) -> None:
        missing = [t for t in TRIGGERS if t not in spec.triggers]
        if missing:
            raise SpecError(f"{spec.name}: the protocol needs trigger {missing[0]!r}")
        if any(t.prior is not None for t in spec.transitions):
            raise SpecError(f"{spec.name}: the protocol model has no prior guards")
        self.spec = spec
        self.created = spec.creation_states[0]
        self.live = frozenset(spec.live_states)
        self.table = {(t.trigger, t.source): t.dest for t in spec.transitions}

    def fire(self, phase: str, trigger: str) -> str:
        """Return the phase after `trigger`; an edge the spec lacks changes nothing."""
        return self.table.get((trigger, phase), phase)

    def allows(self, phase: str, trigger: str) -> bool:
        """Say whether the spec has an edge for `trigger` out of `phase`."""
        return (trigger, phase) in self.table

    def is_live(self, phase: str) -> bool:
        """Say whether a lease in `phase` protects its artifact."""
        return phase in self.live


class State(NamedTuple):
    """One global state: shared data plus each process's control state."""

    artifact: bool = True  # the artifact file exists
    lease: str = NO_LEASE
    lock: str = FREE
    generation: int = 0  # the owner's generation for this transaction id
    published: bool = False  # the owner's reference is visible
    tombstoned: bool = False
    writer: str = W_START
    writer_generation: int = -1  # the generation the writer read
    in_flight: bool = False  # a publish request exists that the zombie may replay
    zombie_done: bool = False
    reconciler: str = R_IDLE
    seen_generation: int = -1
    seen_published: bool = False
    seen_sealed: bool = False
    gc: str = G_IDLE
    owner: str = O_HOLDING


Step = list[tuple[str, State]]


class ProtocolModel:
    """The protocol as a transition system, for one choice of safeguards."""

    def __init__(self, safeguards: Safeguards, rules: LeaseRules | None = None) -> None:
        self.safeguards = safeguards
        self.rules = (
            rules if rules is not None else LeaseRules(load_packaged_spec("lease"))
        )
        # (process, program counter) -> the step that process may take there.
        self._steps: dict[tuple[str, str], Callable[[State], Step]] = {
            ("writer", W_START): self._writer_start,
            ("writer", W_LOCKED): self._writer_verify,
            ("writer", W_VERIFIED): self._writer_record,
            ("writer", W_PREPARED): self._writer_read_generation,
            ("writer", W_READY): self._writer_publish,
            ("writer", W_LANDED): self._writer_commit,
            ("writer", W_REJECTED): self._writer_abort,
            ("reconciler", R_IDLE): self._reconciler_observe,
            ("reconciler", R_SEEN): self._reconciler_decide,
            ("reconciler", R_SEALED): self._reconciler_abort_sealed,
            ("reconciler", R_ABORTED): self._reconciler_seal_late,
            ("gc", G_IDLE): self._gc_plan,
            ("gc", G_PLANNED): self._gc_lock,
            ("gc", G_LOCKED): self._gc_reverify,
            ("gc", G_CLEARED): self._gc_delete,
            ("owner", O_HOLDING): self._owner_remove,
            ("owner", O_REMOVED): self._owner_release,
        }

    def initial(self) -> State:
        """Return the state before anything ran: artifact on disk, no lease."""
        return State()

    def violation(self, state: State) -> str | None:
        """Return why `state` breaks the safety property, or None."""
        if state.artifact:
            return None
        if self.rules.is_live(state.lease):
            return f"artifact deleted while its lease is {state.lease}"
        if state.published:
            return "owner reference visible for a deleted artifact"
        return None

    def successors(self, state: State) -> Step:
        """Return every enabled action, each with a name unique in this state."""
        found = self._zombie(state)
        # The order only picks which of several shortest traces BFS reports.
        for process, pc in (
            ("reconciler", state.reconciler),
            ("writer", state.writer),
            ("gc", state.gc),
            ("owner", state.owner),
        ):
            step = self._steps.get((process, pc))
            if step is not None:
                found += step(state)
        return found

    def _accepts_publish(self, s: State, generation: int) -> bool:
        # A tombstone refuses every write of the id; the fence also refuses a
        # request built on a generation that has moved since it was read.
        if s.tombstoned:
            return False
        return not self.safeguards.fence or s.generation == generation

    def _unlock_after_prepare(self, s: State) -> str:
        return FREE if self.safeguards.writer_lock else s.lock

    def _writer_start(self, s: State) -> Step:
        # With the lock on, the writer holds it from re-verify through record, so
        # GC apply cannot run between them; with it off the steps interleave.
        if not self.safeguards.writer_lock:
            return self._writer_verify(s)
        if s.lock != FREE:
            return []
        return [("writer.lock", s._replace(lock=HELD_BY_WRITER, writer=W_LOCKED))]

    def _writer_verify(self, s: State) -> Step:
        if not s.artifact:
            refused = s._replace(writer=W_DONE, lock=self._unlock_after_prepare(s))
            return [("writer.refuse", refused)]
        return [("writer.verify_ok", s._replace(writer=W_VERIFIED))]

    def _writer_record(self, s: State) -> Step:
        prepared = s._replace(
            lease=self.rules.created,
            writer=W_PREPARED,
            lock=self._unlock_after_prepare(s),
        )
        return [("writer.record_prepared", prepared)]

    def _writer_read_generation(self, s: State) -> Step:
        ready = s._replace(writer=W_READY, writer_generation=s.generation)
        return [("writer.read_generation", ready)]

    def _writer_publish(self, s: State) -> Step:
        # Giving up (a timeout, any error but a rejection) leaves PREPARED and the
        # request in flight: the zombie may deliver it later.
        gave_up = ("writer.give_up", s._replace(writer=W_DONE, in_flight=True))
        if not self._accepts_publish(s, s.writer_generation):
            rejected = s._replace(writer=W_REJECTED, in_flight=True)
            return [("writer.publish_rejected", rejected), gave_up]
        landed = s._replace(
            writer=W_LANDED,
            in_flight=True,
            published=True,
            generation=s.generation + 1,
        )
        return [("writer.publish_ok", landed), gave_up]

    def _writer_commit(self, s: State) -> Step:
        done = s._replace(writer=W_DONE, lease=self.rules.fire(s.lease, "commit"))
        return [("writer.commit", done)]

    def _writer_abort(self, s: State) -> Step:
        done = s._replace(writer=W_DONE, lease=self.rules.fire(s.lease, "abort"))
        return [("writer.abort", done)]

    def _zombie(self, s: State) -> Step:
        # The writer's request, delivered (again) late with the generation it read.
        if not s.in_flight or s.zombie_done:
            return []
        if not self._accepts_publish(s, s.writer_generation):
            return [("zombie.publish_rejected", s._replace(zombie_done=True))]
        landed = s._replace(
            zombie_done=True, published=True, generation=s.generation + 1
        )
        return [("zombie.publish_ok", landed)]

    def _reconciler_observe(self, s: State) -> Step:
        # Only a lease still in its creation phase (PREPARED) is reconciled.
        if s.lease != self.rules.created:
            return []
        seen = s._replace(
            reconciler=R_SEEN,
            seen_generation=s.generation,
            seen_published=s.published,
            seen_sealed=s.tombstoned,
        )
        return [("reconciler.observe", seen)]

    def _reconciler_decide(self, s: State) -> Step:
        if s.seen_published:
            committed = _idle(s._replace(lease=self.rules.fire(s.lease, "commit")))
            return [("reconciler.commit", committed)]
        if s.seen_sealed:
            aborted = _idle(s._replace(lease=self.rules.fire(s.lease, "abort")))
            return [("reconciler.abort", aborted)]
        if self.safeguards.tomb_first:
            return [self._seal(s)]
        # Without TOMB_FIRST, ABORTED is recorded before the tombstone exists.
        early = s._replace(
            reconciler=R_ABORTED, lease=self.rules.fire(s.lease, "abort")
        )
        return [("reconciler.abort", early)]

    def _seal(self, s: State) -> tuple[str, State]:
        # The CAS tombstone of S5.1: refused when the generation moved or the
        # reference appeared; without the fence it is a blind write.
        fenced = self.safeguards.fence
        if fenced and (s.generation != s.seen_generation or s.published):
            return "reconciler.seal_stale", _idle(s)
        sealed = s._replace(tombstoned=True, generation=s.generation + 1)
        if self.safeguards.tomb_first:
            return "reconciler.seal", sealed._replace(reconciler=R_SEALED)
        return "reconciler.seal", _idle(sealed)

    def _reconciler_abort_sealed(self, s: State) -> Step:
        aborted = _idle(s._replace(lease=self.rules.fire(s.lease, "abort")))
        # A crash here leaves a sealed id with a PREPARED lease; the next pass
        # sees "absent, already sealed" and aborts without a second seal.
        return [("reconciler.abort", aborted), ("reconciler.crash", _idle(s))]

    def _reconciler_seal_late(self, s: State) -> Step:
        return [self._seal(s)]

    def _gc_plan(self, s: State) -> Step:
        # Planning reads the leases without the lock: a snapshot that may go stale.
        if not s.artifact or self.rules.is_live(s.lease):
            return []
        return [("gc.plan", s._replace(gc=G_PLANNED))]

    def _gc_lock(self, s: State) -> Step:
        if s.lock != FREE:
            return []
        after = G_LOCKED if self.safeguards.reverify else G_CLEARED
        return [("gc.lock", s._replace(gc=after, lock=HELD_BY_GC))]

    def _gc_reverify(self, s: State) -> Step:
        if self.rules.is_live(s.lease):
            return [("gc.reverify_retain", s._replace(gc=G_IDLE, lock=FREE))]
        return [("gc.reverify_ok", s._replace(gc=G_CLEARED))]

    def _gc_delete(self, s: State) -> Step:
        # Quarantine, verify and unlink collapse to one step: all under the lock.
        return [("gc.delete", s._replace(gc=G_DONE, artifact=False, lock=FREE))]

    def _owner_remove(self, s: State) -> Step:
        # The owner removes a reference whose lease the spec lets it release;
        # removal tombstones the id so no late publish revives it.
        if not s.published or not self.rules.allows(s.lease, "release"):
            return []
        removed = s._replace(
            owner=O_REMOVED,
            published=False,
            tombstoned=True,
            generation=s.generation + 1,
        )
        return [("owner.remove", removed)]

    def _owner_release(self, s: State) -> Step:
        released = s._replace(owner=O_DONE, lease=self.rules.fire(s.lease, "release"))
        return [("owner.release", released)]


def _idle(s: State) -> State:
    # Forget the observation once a reconciliation pass ends: fewer states.
    return s._replace(
        reconciler=R_IDLE, seen_generation=-1, seen_published=False, seen_sealed=False
    )


def replay(model: ProtocolModel, trace: Sequence[str]) -> list[State]:
    """Follow `trace` by action name from the initial state; return every state."""
    states = [model.initial()]
    for step, action in enumerate(trace, start=1):
        found = [nxt for name, nxt in model.successors(states[-1]) if name == action]
        if len(found) != 1:
            raise ValueError(f"step {step}: {action!r} is not enabled exactly once")
        states.append(found[0])
    return states


PROMELA_BEGIN = "/* BEGIN lease rules"
PROMELA_END = "/* END lease rules */"


def render_promela_rules(rules: LeaseRules) -> str:
    """Render the spec's lease rules as the Promela block `protocol.pml` embeds."""
    phases = {state: state.upper() for state in rules.spec.states}
    lines = [
        f"{PROMELA_BEGIN}: generated from lease.toml by",
        "   python -m spillvault.specs.protocol_model --write-promela */",
        "#define NO_LEASE 0",
    ]
    lines += [f"#define {name} {n}" for n, name in enumerate(phases.values(), start=1)]
    lines.append(f"#define CREATED {phases[rules.created]}")

    def any_of(states: Iterable[str]) -> str:
        terms = [f"p == {phases[s]}" for s in rules.spec.states if s in set(states)]
        return "(" + (" || ".join(terms) or "false") + ")"

    lines.append(f"#define LIVE(p) {any_of(rules.live)}")
    releasable = [s for s in rules.spec.states if rules.allows(s, "release")]
    lines.append(f"#define CAN_RELEASE(p) {any_of(releasable)}")
    for trigger in TRIGGERS:
        # A missing edge records nothing, as in the Python model.
        lines += [f"inline fire_{trigger}() {{", "  if"]
        lines += [
            f"  :: lease == {phases[source]} -> lease = {phases[dest]}"
            for (name, source), dest in rules.table.items()
            if name == trigger
        ]
        lines += ["  :: else -> skip", "  fi", "}"]
    lines.append(PROMELA_END)
    return "\n".join(lines) + "\n"


def promela_rules_in(text: str) -> str:
    """Return the generated block found in a Promela source (markers included)."""
    begin = text.index(PROMELA_BEGIN)
    end = text.index(PROMELA_END, begin) + len(PROMELA_END)
    return text[begin:end] + "\n"


def promela_path() -> Path:
    """Return the path of `protocol.pml`, kept beside this module."""
    return Path(__file__).resolve().with_name("protocol.pml")


def write_promela_rules(rules: LeaseRules) -> bool:
    """Rewrite the generated block of `protocol.pml`; say whether it changed."""
    path = promela_path()
    text = path.read_text("utf-8")
    current = promela_rules_in(text)
    wanted = render_promela_rules(rules)
    if current == wanted:
        return False
    path.write_text(text.replace(current, wanted), "utf-8")
    return True


@dataclass(frozen=True)
class Row:
    """One line of the verdict table."""

    safeguards: Safeguards
    result: CheckResult
    seconds: float


def run_all(rules: LeaseRules | None = None) -> list[Row]:
    """Check the five configurations."""
    rows = []
    for safeguards in configurations():
        began = time.perf_counter()
        result = check(ProtocolModel(safeguards, rules))
        rows.append(Row(safeguards, result, time.perf_counter() - began))
    return rows


def render_table(rows: Sequence[Row]) -> str:
    """Render the rows as a Markdown table."""
    lines = [
        "| configuration | verdict | states | transitions | depth | ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        r = row.result
        lines.append(
            f"| {row.safeguards.label} | {r.verdict} | {r.states} | {r.transitions}"
            f" | {r.depth} | {row.seconds * 1000:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the verdict table; exit 1 unless exactly the full protocol is safe."""
    parser = argparse.ArgumentParser(prog="python -m spillvault.specs.protocol_model")
    parser.add_argument(
        "--traces", action="store_true", help="print each shortest counterexample"
    )
    parser.add_argument(
        "--write-promela",
        action="store_true",
        help="regenerate the lease rules block of protocol.pml from lease.toml",
    )
    args = parser.parse_args(argv)
    if args.write_promela:
        rules = LeaseRules(load_packaged_spec("lease"))
        changed = write_promela_rules(rules)
        sys.stdout.write("rewrote protocol.pml\n" if changed else "up to date\n")
        return 0
    rows = run_all()
    out = [render_table(rows)]
    if args.traces:
        for row in rows:
            if row.result.safe:
                continue
            out.append(f"\n{row.safeguards.label}: {row.result.violation}\n")
            out += [f"  {n}. {a}\n" for n, a in enumerate(row.result.trace, start=1)]
    sys.stdout.write("".join(out))
    expected = [row.safeguards == Safeguards() for row in rows]
    return 0 if [row.result.safe for row in rows] == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
