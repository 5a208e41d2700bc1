"""The spec loader rejects malformed machines by name; diagrams stay generated (S8)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import pytest

from spillvault.specs import (
    PACKAGED_SPECS,
    SpecError,
    load_packaged_spec,
    load_spec_text,
    parse_spec,
    render_mermaid,
)


def good() -> dict:
    return {
        "name": "Demo",
        "states": ["a", "b", "c", "q", "z"],
        "creation_states": ["a"],
        "terminal_states": ["z"],
        "remembers_prior": ["q"],
        "transitions": [
            {"trigger": "go", "source": "a", "dest": "b"},
            {"trigger": "go", "source": "b", "dest": "c"},
            {"trigger": "hold", "source": ["b", "c"], "dest": "q"},
            {"trigger": "back", "source": "q", "dest": "b", "prior": "b"},
            {"trigger": "back", "source": "q", "dest": "c", "prior": "c"},
            {"trigger": "end", "source": ["c", "q"], "dest": "z"},
        ],
    }


def test_a_good_spec_loads_with_its_edges_expanded() -> None:
    spec = parse_spec(good())
    assert spec.creation_states == ("a",)
    assert [(t.trigger, t.source, t.dest) for t in spec.edges_from("q", "back")] == [
        ("back", "q", "b"),
        ("back", "q", "c"),
    ]
    assert spec.triggers == ("go", "hold", "back", "end")


def mutate(path: tuple, value: object) -> dict:
    data = good()
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


MALFORMED = [
    pytest.param(mutate(("states",), ["a", "b", "a"]), "duplicate state 'a'", id="dup-state"),
    pytest.param(mutate(("creation_states",), ["x"]), "unknown state 'x'", id="unknown-creation"),
    pytest.param(mutate(("creation_states",), []), "must not be empty", id="no-creation"),
    pytest.param(mutate(("terminal_states",), ["nope"]), "unknown state 'nope'", id="unknown-terminal"),
    pytest.param(mutate(("transitions", 0, "dest"), "zz"), "transition 1 (go): unknown state 'zz'", id="unknown-dest"),
    pytest.param(mutate(("transitions", 2, "source"), ["b", "ghost"]), "unknown state 'ghost'", id="unknown-source"),
    pytest.param(mutate(("transitions", 1, "trigger"), "Go!"), "invalid trigger 'Go!'", id="bad-trigger"),
    pytest.param(mutate(("transitions", 0, "when"), "x"), "transition 1: unknown key 'when'", id="unknown-transition-key"),
    pytest.param(mutate(("colour",), "red"), "unknown key 'colour'", id="unknown-top-key"),
    pytest.param(mutate(("name",), KeyError), "missing key 'name'", id="missing-name"),
    pytest.param(mutate(("transitions",), []), "non-empty list", id="no-transitions"),
    pytest.param(mutate(("states",), ["a", "b", "c", "q", "z", "island"]), "unreachable state 'island'", id="unreachable"),
    pytest.param(mutate(("terminal_states",), ["c", "z"]), "trigger 'hold' from 'c': transition out of terminal state", id="out-of-terminal"),
    pytest.param(mutate(("transitions", 1, "source"), "a"), "trigger 'go' from 'a': duplicate trigger from one state", id="duplicate-trigger"),
    pytest.param(mutate(("transitions", 4, "prior"), "b"), "trigger 'back' from 'q': duplicate trigger from one state", id="duplicate-guarded"),
    pytest.param(mutate(("transitions", 3, "prior"), "a"), "prior 'a' never enters 'q'", id="impossible-prior"),
    pytest.param(mutate(("remembers_prior",), []), "'prior' on a state that remembers none", id="prior-unremembered"),
    pytest.param(mutate(("transitions", 4, "prior"), None), "unguarded beside guarded", id="mixed-guards"),
    pytest.param(mutate(("terminal_states",), []), "state 'z' has no transition and is not terminal", id="dead-end"),
    pytest.param(mutate(("tags",), ["a"]), "'tags' must be a table of state lists", id="tags-not-a-table"),
    pytest.param(mutate(("tags",), {"Hot!": ["a"]}), "invalid tag name 'Hot!'", id="bad-tag-name"),
    pytest.param(mutate(("tags",), {"hot": "a"}), "'tags.hot' must be a list of state names", id="tag-not-a-list"),
    pytest.param(mutate(("tags",), {"hot": ["a", "nope"]}), "'tags.hot': unknown state 'nope'", id="unknown-tagged-state"),
    pytest.param(mutate(("tags",), {"hot": ["a", "a"]}), "'tags.hot': duplicate state 'a'", id="duplicate-tagged-state"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "culprit"), MALFORMED)
def test_malformed_specs_are_rejected_naming_the_culprit(
    data: dict, culprit: str
) -> None:
    # A None prior means "absent" in this table.
    for edge in data.get("transitions", []):
        if isinstance(edge, dict) and "prior" in edge and edge["prior"] is None:
            del edge["prior"]
    with pytest.raises(SpecError, match=r"^demo\.toml: ") as caught:
        parse_spec(data, origin="demo.toml")
    assert culprit in str(caught.value)


def test_invalid_toml_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"x\.toml: invalid TOML"):
        load_spec_text("name = [", origin="x.toml")


def test_unknown_packaged_spec_is_refused() -> None:
    with pytest.raises(SpecError, match="unknown spec 'nope'"):
        load_packaged_spec("nope")


def test_packaged_specs_state_the_lifecycles_of_spec() -> None:
    lease = load_packaged_spec("lease")
    assert lease.creation_states == ("prepared",)
    assert set(lease.terminal_states) == {"released", "aborted"}
    artifact = load_packaged_spec("artifact")
    assert artifact.creation_states == ("open", "sealed", "orphan")
    assert "quarantined" in artifact.remembers_prior


@pytest.mark.parametrize("name", PACKAGED_SPECS)
def test_mermaid_diagram_is_up_to_date(name: str) -> None:
    shipped = resources.files("spillvault.specs").joinpath(f"{name}.mmd").read_text()
    assert shipped == render_mermaid(load_packaged_spec(name)), (
        f"specs/{name}.mmd is stale: run `python -m spillvault.specs --write`"
    )


def test_diagram_names_every_edge_and_guard() -> None:
    text = render_mermaid(parse_spec(good()))
    assert "  [*] --> a\n" in text
    assert "  q --> c: back [prior = c]\n" in text
    assert "  z --> [*]\n" in text


def test_tags_load_in_order_and_appear_in_the_diagram() -> None:
    spec = parse_spec(mutate(("tags",), {"warm": ["c", "b"], "none": []}))
    assert spec.tags == (("warm", ("c", "b")), ("none", ()))
    assert spec.live_states == ("a", "b", "c", "q")
    text = render_mermaid(spec)
    assert "%% tag warm: c, b\n%% tag none:\nstateDiagram-v2\n" in text


def test_check_command_reports_stale_diagrams(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spillvault.specs"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
