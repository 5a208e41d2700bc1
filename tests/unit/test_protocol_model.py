"""The protocol model (issue 7): safe with every safeguard, broken without any one.

The Python BFS checker and Spin must agree on all five configurations; the lease
transitions the model fires are exactly those of `specs/lease.toml`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from importlib import resources
from typing import TYPE_CHECKING

import pytest

from spillvault.specs import (
    SpecError,
    load_packaged_spec,
    load_spec_text,
    protocol_model,
)
from spillvault.specs.protocol_model import (
    SAFE,
    SAFEGUARD_NAMES,
    UNSAFE,
    CheckResult,
    LeaseRules,
    ProtocolModel,
    Safeguards,
    State,
    check,
    configurations,
    main,
    promela_path,
    promela_rules_in,
    render_promela_rules,
    replay,
)

from support.pgserver import in_ci

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# The full protocol must stay a real state space, not a handful of states.
MIN_SAFE_STATES = 300
# SPEC S4.3 says which phases protect an artifact; written here, not derived.
LIVE_PHASES = {"prepared", "committed"}
EVERY_ACTION = {
    "writer.lock", "writer.verify_ok", "writer.refuse", "writer.record_prepared",
    "writer.read_generation", "writer.publish_ok", "writer.publish_rejected",
    "writer.give_up", "writer.commit", "writer.abort",
    "zombie.publish_ok", "zombie.publish_rejected",
    "reconciler.observe", "reconciler.commit", "reconciler.seal",
    "reconciler.seal_stale", "reconciler.abort", "reconciler.crash",
    "gc.plan", "gc.lock", "gc.reverify_ok", "gc.reverify_retain", "gc.delete",
    "owner.remove", "owner.release",
}  # fmt: skip
# An action that moves a lease (creation aside) is named after the trigger it fires.
LEASE_TRIGGERS = {"commit", "abort", "release"}
FLAG_OF = {
    "reverify": "REVERIFY",
    "writer_lock": "WRITER_LOCK",
    "fence": "FENCE",
    "tomb_first": "TOMB_FIRST",
}


def bad(state: State) -> bool:
    """The safety property, restated independently of the model's own check."""
    deleted = not state.artifact
    return deleted and (state.lease in LIVE_PHASES or state.published)


def without(name: str) -> Safeguards:
    return replace(Safeguards(), **{name: False})


def reachable(model: ProtocolModel) -> Iterator[tuple[State, str, State]]:
    """Yield every edge of the reachable graph (a plain set-based search)."""
    seen = {model.initial()}
    stack = [model.initial()]
    while stack:
        state = stack.pop()
        for action, nxt in model.successors(state):
            yield state, action, nxt
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)


def first_bad_layer(model: ProtocolModel, limit: int) -> int | None:
    """Return the least number of steps that reaches a bad state, up to `limit`."""
    layer = {model.initial()}
    seen = set(layer)
    for depth in range(limit + 1):
        if any(bad(state) for state in layer):
            return depth
        layer = {nxt for s in layer for _, nxt in model.successors(s)} - seen
        seen |= layer
    return None


@pytest.fixture(scope="module")
def results() -> dict[Safeguards, CheckResult]:
    return {config: check(ProtocolModel(config)) for config in configurations()}


def test_the_five_configurations_are_all_on_then_each_one_off() -> None:
    configs = configurations()
    assert configs[0] == Safeguards()
    assert configs[0].label == "all safeguards"
    assert [c.label for c in configs[1:]] == [
        f"no {FLAG_OF[name]}" for name in SAFEGUARD_NAMES
    ]
    assert set(SAFEGUARD_NAMES) == set(FLAG_OF)


def test_every_safeguard_on_is_safe_over_a_real_state_space(
    results: dict[Safeguards, CheckResult],
) -> None:
    result = results[Safeguards()]
    assert result.verdict == SAFE
    assert result.safe
    assert result.trace == ()
    assert result.violation is None
    assert result.states >= MIN_SAFE_STATES
    assert result.transitions > result.states
    assert result.depth >= 10
    # An independent exhaustive search agrees on the count and finds no bad state.
    model = ProtocolModel(Safeguards())
    states = {model.initial()} | {nxt for _, _, nxt in reachable(model)}
    assert len(states) == result.states
    assert not any(bad(state) for state in states)


def test_every_step_of_every_process_is_reachable_with_all_safeguards() -> None:
    actions = {action for _, action, _ in reachable(ProtocolModel(Safeguards()))}
    assert actions == EVERY_ACTION


@pytest.mark.parametrize("config", configurations(), ids=lambda c: c.label)
def test_action_names_are_unique_in_every_state(config: Safeguards) -> None:
    # A trace is a list of names, so each state must offer each name once at most.
    model = ProtocolModel(config)
    seen: set[State] = set()
    for state, _, _ in reachable(model):
        if state in seen:
            continue
        seen.add(state)
        names = [name for name, _ in model.successors(state)]
        assert len(names) == len(set(names)), (state, names)


@pytest.mark.parametrize("name", SAFEGUARD_NAMES)
def test_removing_one_safeguard_gives_a_shortest_replayable_counterexample(
    name: str, results: dict[Safeguards, CheckResult]
) -> None:
    config = without(name)
    result = results[config]
    assert result.verdict == UNSAFE
    assert not result.safe
    assert result.violation is not None
    assert result.trace
    assert result.depth == len(result.trace)
    # Replay by hand: each step must be enabled exactly once where it is taken.
    model = ProtocolModel(config)
    state = model.initial()
    path = [state]
    for action in result.trace:
        matches = [nxt for label, nxt in model.successors(state) if label == action]
        assert len(matches) == 1, (action, state)
        state = matches[0]
        path.append(state)
    assert bad(path[-1])
    assert not any(bad(s) for s in path[:-1])
    assert replay(model, result.trace) == path
    # No shorter interleaving reaches a bad state, and this one exists.
    assert first_bad_layer(model, len(result.trace)) == len(result.trace)
    # The same trace is harmless once the safeguard is back.
    assert not any(bad(s) for s in _replay_prefix(ProtocolModel(Safeguards()), result))


def no_bad_path_shorter_than(model: ProtocolModel, length: int) -> bool:
    """Brute force: walk every interleaving of fewer than `length` steps, no memo."""

    def clean(state: State, budget: int) -> bool:
        if bad(state):
            return False
        if budget == 0:
            return True
        return all(clean(nxt, budget - 1) for _, nxt in model.successors(state))

    return clean(model.initial(), length - 1)


@pytest.mark.parametrize("name", ["reverify", "writer_lock"])
def test_the_short_counterexamples_are_shortest_by_brute_force(
    name: str, results: dict[Safeguards, CheckResult]
) -> None:
    # Only the 6-step traces: every path is enumerated, so the longer ones would
    # cost millions of paths; the layered search above covers those.
    model = ProtocolModel(without(name))
    length = len(results[without(name)].trace)
    assert length <= 6
    assert no_bad_path_shorter_than(model, length)
    assert not no_bad_path_shorter_than(model, length + 1)


class Doubling:
    """A toy system: from 1, add one or double (below 20); 12 is bad in 4 steps."""

    def initial(self) -> int:
        return 1

    def successors(self, state: int) -> list[tuple[str, int]]:
        return [(f"inc->{state + 1}", state + 1), (f"dbl->{state * 2}", state * 2)][
            : 2 if state < 20 else 0
        ]

    def violation(self, state: int) -> str | None:
        return "twelve" if state == 12 else None


def test_the_checker_returns_a_shortest_trace_on_a_toy_system() -> None:
    result = check(Doubling())
    assert result.verdict == UNSAFE
    assert result.violation == "twelve"
    assert result.trace == ("inc->2", "inc->3", "dbl->6", "dbl->12")
    assert result.depth == 4
    # Every sequence of three steps or fewer misses 12.
    layer = {1}
    for _ in range(3):
        layer = {n for s in layer for _, n in Doubling().successors(s)}
        assert 12 not in layer


def test_the_checker_reports_a_bad_initial_state_with_an_empty_trace() -> None:
    class BadStart(Doubling):
        def violation(self, state: int) -> str | None:
            return "bad from the start" if state == 1 else None

    result = check(BadStart())
    assert (result.verdict, result.states, result.depth, result.trace) == (
        UNSAFE,
        1,
        0,
        (),
    )


def test_the_checker_exhausts_a_safe_toy_system() -> None:
    class NeverBad(Doubling):
        def violation(self, state: int) -> str | None:
            return None

    result = check(NeverBad())
    assert result.safe
    # States 1..20 by increments, plus the doublings of 11..19 (20 has no step).
    assert result.states == 20 + 9


def _replay_prefix(model: ProtocolModel, result: CheckResult) -> list[State]:
    """Replay `result.trace` as far as the model allows it (it may diverge)."""
    states = [model.initial()]
    for action in result.trace:
        nxt = dict(model.successors(states[-1])).get(action)
        if nxt is None:
            break
        states.append(nxt)
    return states


# The steps, in order, of the race each safeguard exists to prevent.
RACES = {
    "reverify": ["gc.plan", "writer.record_prepared", "gc.lock", "gc.delete"],
    "writer_lock": ["writer.verify_ok", "gc.reverify_ok", "writer.record_prepared"],
    "fence": ["reconciler.observe", "writer.publish_ok", "reconciler.seal"],
    "tomb_first": ["reconciler.abort", "writer.publish_ok", "gc.delete"],
}


@pytest.mark.parametrize(("name", "needle"), RACES.items())
def test_each_counterexample_shows_the_race_its_safeguard_prevents(
    name: str, needle: list[str], results: dict[Safeguards, CheckResult]
) -> None:
    trace = list(results[without(name)].trace)
    positions = [trace.index(step) for step in needle]
    assert positions == sorted(positions), trace


def test_without_tomb_first_aborted_is_recorded_before_any_seal(
    results: dict[Safeguards, CheckResult],
) -> None:
    trace = results[without("tomb_first")].trace
    assert "reconciler.abort" in trace
    assert "reconciler.seal" not in trace
    assert results[without("tomb_first")].violation == (
        "owner reference visible for a deleted artifact"
    )


def test_the_model_fires_exactly_the_lease_transitions_of_the_spec() -> None:
    spec = load_packaged_spec("lease")
    rules = LeaseRules(spec)
    assert rules.table == {(t.trigger, t.source): t.dest for t in spec.transitions}
    assert ProtocolModel(Safeguards()).rules.spec == spec
    legal = {(t.trigger, t.source, t.dest) for t in spec.transitions}
    fired: set[tuple[str, str, str]] = set()
    for config in configurations():
        for before, action, after in reachable(ProtocolModel(config)):
            if before.lease == after.lease:
                continue
            if before.lease == "none":
                assert after.lease in spec.creation_states
                assert action == "writer.record_prepared"
                continue
            trigger = action.split(".")[1]
            assert trigger in LEASE_TRIGGERS, action
            fired.add((trigger, before.lease, after.lease))
    # Every edge the model took is in the spec, and every spec edge is taken.
    assert fired == legal


def altered_lease_spec() -> str:
    """Lease spec where commit wrongly ends the lease (committed stays reachable)."""
    text = resources.files("spillvault.specs").joinpath("lease.toml").read_text()
    edge = 'trigger = "commit"\nsource = "prepared"\ndest = "committed"'
    assert edge in text
    text = text.replace(edge, edge.replace('"committed"', '"released"'))
    return (
        text
        + '\n[[transitions]]\ntrigger = "adopt"\nsource = "prepared"\n'
        + ('dest = "committed"\n')
    )


def test_altering_the_loaded_spec_changes_the_verdict() -> None:
    rules = LeaseRules(load_spec_text(altered_lease_spec(), origin="altered"))
    model = ProtocolModel(Safeguards(), rules)
    result = check(model)
    # A commit that ends the lease lets GC delete a published artifact.
    assert result.verdict == UNSAFE
    assert "writer.commit" in result.trace
    assert bad(replay(model, result.trace)[-1])
    assert render_promela_rules(rules) != render_promela_rules(
        LeaseRules(load_packaged_spec("lease"))
    )


def test_a_spec_without_a_trigger_the_protocol_fires_is_refused() -> None:
    text = resources.files("spillvault.specs").joinpath("lease.toml").read_text()
    spec = load_spec_text(text.replace('"release"', '"retire"'), origin="renamed")
    with pytest.raises(SpecError, match="needs trigger 'release'"):
        LeaseRules(spec)


def test_the_promela_lease_rules_are_generated_from_the_spec() -> None:
    text = promela_path().read_text("utf-8")
    wanted = render_promela_rules(LeaseRules(load_packaged_spec("lease")))
    assert promela_rules_in(text) == wanted
    for flag in FLAG_OF.values():
        assert f"#ifdef {flag}" in text


def test_write_promela_rules_rewrites_only_the_generated_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "protocol.pml"
    shutil.copy(promela_path(), copy)
    monkeypatch.setattr(protocol_model, "promela_path", lambda: copy)
    altered = LeaseRules(load_spec_text(altered_lease_spec(), origin="altered"))
    before = copy.read_text("utf-8")
    assert protocol_model.write_promela_rules(altered)
    after = copy.read_text("utf-8")
    assert promela_rules_in(after) == render_promela_rules(altered)
    assert after.replace(promela_rules_in(after), "") == before.replace(
        promela_rules_in(before), ""
    )
    assert not protocol_model.write_promela_rules(altered)


def test_main_prints_the_table_and_exits_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--traces"]) == 0
    out = capsys.readouterr().out
    for config in configurations():
        assert f"| {config.label} | " in out
    assert out.count("| unsafe |") == 4
    assert "1. writer." in out


# --- Spin cross-check --------------------------------------------------------


@dataclass(frozen=True)
class SpinRun:
    """What `./pan` reported for one configuration."""

    errors: int
    states: int
    assertion_violated: bool
    output: str


def spin_flags(config: Safeguards) -> list[str]:
    return [f"-D{FLAG_OF[name]}" for name in SAFEGUARD_NAMES if getattr(config, name)]


def run_spin(config: Safeguards, workdir: Path) -> SpinRun:
    workdir.mkdir()
    shutil.copy(promela_path(), workdir / "protocol.pml")

    def run(*argv: str) -> str:
        done = subprocess.run(
            argv, cwd=workdir, capture_output=True, text=True, check=False, timeout=120
        )
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done.stdout

    run("spin", "-a", *spin_flags(config), "protocol.pml")
    # -O0 compiles in a third of -O2's time and the search takes milliseconds.
    run("gcc", "-O0", "-DSAFETY", "-o", "pan", "pan.c")
    out = run("./pan", "-w18")
    errors = re.search(r"errors: (\d+)", out)
    states = re.search(r"(\d+) states, stored", out)
    assert errors is not None, out
    assert states is not None, out
    return SpinRun(
        int(errors.group(1)), int(states.group(1)), "assertion violated" in out, out
    )


@pytest.fixture(scope="module")
def spin_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[Safeguards, SpinRun]:
    missing = [tool for tool in ("spin", "gcc") if shutil.which(tool) is None]
    if missing:
        message = f"{' and '.join(missing)} not installed (make system-deps)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("spin")
    configs = configurations()
    with ThreadPoolExecutor(max_workers=len(configs)) as pool:
        runs = pool.map(
            lambda pair: run_spin(pair[1], root / f"config{pair[0]}"),
            enumerate(configs),
        )
        return dict(zip(configs, runs, strict=True))


@pytest.mark.parametrize("config", configurations(), ids=lambda c: c.label)
def test_spin_gives_the_same_verdict_as_the_python_checker(
    config: Safeguards,
    spin_runs: dict[Safeguards, SpinRun],
    results: dict[Safeguards, CheckResult],
) -> None:
    spin = spin_runs[config]
    if results[config].safe:
        assert spin.errors == 0, spin.output
        assert not spin.assertion_violated
        assert spin.states >= MIN_SAFE_STATES
    else:
        # The one error is the safety assertion, not a deadlock or a bad end state.
        assert spin.errors == 1, spin.output
        assert spin.assertion_violated, spin.output
