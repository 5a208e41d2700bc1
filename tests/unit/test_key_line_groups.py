"""Which key lines a preview shows: groups, notes, the ends kept (S1.6)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.key_line_groups import (
    FEW,
    KEEP_PER_GROUP,
    Collapsed,
    GroupTally,
    common_literal,
    group_key,
    plan_key_lines,
)
from spillvault.domain.notice import render_facts, render_key_lines
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.preview import PreviewText, build_preview

from support.previews import preview_source

if TYPE_CHECKING:
    from collections.abc import Callable

MYPY = "src/m{n}.py:{n}: error: Incompatible return value type (got int, expected str)"
RUFF = "src/r{n}.py:{n}:1: E501 Line too long ({n} > 88)"
LINT_ERROR = "src/r{n}.py:{n}:1: error: Line too long ({n} > 88)"


def test_a_group_is_what_a_line_says_not_where() -> None:
    assert group_key(MYPY.format(n=3)) == group_key(MYPY.format(n=4812))
    assert group_key(RUFF.format(n=1)) == group_key(RUFF.format(n=99))
    assert group_key(MYPY.format(n=3)) != group_key(RUFF.format(n=3))


def test_a_line_of_one_word_groups_only_with_its_own_shape() -> None:
    assert group_key("FAILED 3") == group_key("FAILED 4")
    assert group_key("FAILED 3") != group_key("PANIC 3")


def test_the_suggested_literal_is_in_every_member() -> None:
    members = [MYPY.format(n=n) for n in (3, 40, 512)]
    pattern = common_literal(members)
    assert pattern.startswith("error: Incompatible return value type")
    assert all(pattern in line for line in members)


def test_no_literal_is_suggested_that_some_member_lacks() -> None:
    assert common_literal(["x0.py:0: error 0", "x1.py:1: error 1"]) == "error"
    assert common_literal(["ab 1", "cd 2"]) == ""


def test_few_candidates_are_all_shown_in_line_order() -> None:
    pool = [(30, "b error"), (10, "a error"), (20, "c error")]
    assert plan_key_lines(pool, 5) == [
        (10, "a error"),
        (20, "c error"),
        (30, "b error"),
    ]


def test_a_repeated_diagnostic_collapses_and_leaves_room_for_the_rest() -> None:
    pool = [(100 + n, RUFF.format(n=n)) for n in range(40)]
    pool += [(50, "ValueError: the one that matters"), (900, "3 failed, 7 passed")]
    chosen = plan_key_lines(pool, 6)
    lines = [entry for entry in chosen if not isinstance(entry, Collapsed)]
    notes = [entry for entry in chosen if isinstance(entry, Collapsed)]
    assert (50, "ValueError: the one that matters") in lines
    assert (900, "3 failed, 7 passed") in lines
    assert len(notes) == 1
    # Two slots are left over: the group shows its first few, not just one.
    assert [n for n, _ in lines if 100 <= n < 900] == list(range(100, 100 + FEW))
    assert notes[0].more == 40 - FEW
    assert notes[0].like_line == 100 + FEW - 1
    # With no slot to spare it shows its first line only.
    tight = plan_key_lines(pool, 4)
    assert [e for e in tight if isinstance(e, Collapsed)] == [
        Collapsed(100 + KEEP_PER_GROUP - 1, 40 - KEEP_PER_GROUP, "E501 Line too long")
    ]


def test_a_note_renders_a_grep_call_a_model_can_copy() -> None:
    note = Collapsed(like_line=7, more=12, pattern='say "hi"')
    block = render_key_lines([(5, "x error"), note], handle="s-1/2")
    assert block.splitlines() == [
        "[key lines from the omitted part: 2]",
        "line 5: x error",
        (
            "[... 12 more like line 7: grep_artifact("
            'handle="s-1/2", pattern="say \\"hi\\"")]'
        ),
    ]


_WORDS = st.sampled_from(["error", "failed", "E501 Line too long", "panic at"])


@given(
    st.lists(
        st.tuples(st.integers(1, 10_000), _WORDS, st.integers(0, 99)),
        max_size=60,
    ),
    st.integers(0, 25),
)
def test_a_plan_fits_its_slots_and_accounts_for_every_line_it_hides(
    raw: list[tuple[int, str, int]], slots: int
) -> None:
    pool = [(line, f"x{n}.py:{n}: {words} {n}") for line, words, n in raw]
    chosen = plan_key_lines(pool, slots)
    assert len(chosen) <= slots
    at = [e.like_line if isinstance(e, Collapsed) else e[0] for e in chosen]
    assert at == sorted(at)
    candidates = dict(pool)
    for entry in chosen:
        if isinstance(entry, Collapsed):
            members = [
                t
                for t in candidates.values()
                if group_key(t) == group_key(candidates[entry.like_line])
            ]
            assert entry.more > 0
            assert all(entry.pattern in member for member in members)
        else:
            assert candidates[entry[0]] == entry[1]


def _lint_output() -> str:
    filler = [f"checking file {n}" for n in range(6000)]
    for n in range(2000, 2400):
        filler[n] = LINT_ERROR.format(n=n)
    filler[3000] = "src/core.py:12: error: Name 'x' is not defined"
    return "\n".join(filler) + "\n"


def test_a_preview_collapses_repeats_and_keeps_the_lone_error() -> None:
    text = _lint_output()
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True),
        preview_source(text),
        SpillPolicy(),
    )
    assert "line 3001: src/core.py:12: error: Name 'x' is not defined" in preview
    note = re.search(
        r"\[\.\.\. (?:at least )?(\d+) more like line (\d+): grep_", preview
    )
    assert note is not None
    assert 'pattern="error: Line too long' in preview.split(note[0])[1].split("\n")[0]


def test_counts_make_a_facts_line_under_the_first() -> None:
    text = _lint_output()
    counts = (("errors", 1), ("warnings", 400))
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True, counts=counts),
        preview_source(text),
        SpillPolicy(),
    )
    second = preview.split("\n")[1]
    size = f"{len(text.encode()):,}"
    assert second == f"[6,000 lines \u00b7 {size} bytes \u00b7 1 errors, 400 warnings]"
    assert len(preview) <= 30_000


def test_a_facts_line_counts_one_of_a_kind_in_the_singular() -> None:
    text = "ok\n" * 3000 + "x.py:1: error: one\n" + "ok\n" * 3000 + "y"
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True),
        preview_source(text),
        SpillPolicy(),
    )
    assert preview.split("\n")[1] == "[6,001 lines \u00b7 18,020 bytes \u00b7 1 error]"
    one = replace(preview_source("y"), total_lines=1, counts=(("failed", 2),))
    assert render_facts(one) == "[1 line \u00b7 1 byte \u00b7 2 failed]\n"


def _mypy_sea() -> str:
    lines = [
        f"pkg/m{n}.py:{n}: error: Function is missing a type annotation"
        for n in range(3000)
    ]
    lines[1700] = 'pkg/shlex.py:354: error: Name "missing_suffix" is not defined'
    lines += ["Found 3000 errors in 3000 files (checked 3000 source files)"]
    return "\n".join(lines) + "\n"


def test_a_lone_diagnostic_in_a_sea_of_one_kind_reaches_the_preview() -> None:
    text = _mypy_sea()
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True),
        preview_source(text),
        SpillPolicy(),
    )
    assert 'line 1701: pkg/shlex.py:354: error: Name "missing_suffix"' in preview
    # The head shows the sea: the block gives it one line and a note with the
    # count over the whole output.
    assert re.search(r"\[\.\.\. 2998 more like line \d+: grep_artifact", preview)


def test_errors_outrank_warnings_when_slots_run_short() -> None:
    lines = [f"w.c:{n}:1: warning: unused variable v{n}" for n in range(4000)]
    lines[1000] = "w.c:1000:5: error: invalid use of undefined type"
    lines[2000] = "w.c:2000:5: error: expected expression before token"
    lines[3000] = "w.c:3000:5: error: conflicting types for main"
    lines[1500] = "w.c:1500:5: warning: comparison is always true"
    text = "\n".join(lines) + "\n"
    policy = SpillPolicy(max_key_lines=3)
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True), preview_source(text), policy
    )
    shown = re.findall(r"^line (\d+): ", preview, re.MULTILINE)
    assert set(shown) == {"1001", "2001", "3001"}


def test_a_location_line_stays_with_its_diagnostic() -> None:
    lines = [f"filler {n}" for n in range(5000)]
    lines[2500] = "error[E0382]: borrow of moved value: `manifest`"
    lines[2501] = "   --> route.rs:1408:5"
    for n in range(110, 4900, 40):
        lines[n] = f"warning: unused variable: `v{n}`"
    text = "\n".join(lines) + "\n"
    preview = build_preview(
        PreviewText(head=text, tail=text, whole=True),
        preview_source(text),
        SpillPolicy(max_key_lines=4),
    )
    assert (
        "line 2501: error[E0382]: borrow of moved value: `manifest`\n"
        "line 2502:    --> route.rs:1408:5\n"
    ) in preview


def test_a_tally_tracks_a_bounded_number_of_groups() -> None:
    tally = GroupTally(max_groups=2)
    asked: list[int] = []

    def number(n: int) -> Callable[[], int]:
        return lambda: asked.append(n) or n

    for n, text in enumerate(["a b one", "a b one", "c d two", "e f three", "a b one"]):
        tally.add(text, number(n))
    assert tally.counts() == {"a b one": 3, "c d two": 1}
    assert tally.untracked == 1
    kept = [line[:2] for line in tally.members()]
    assert kept == [(0, "a b one"), (1, "a b one"), (4, "a b one"), (2, "c d two")]
    assert asked == [0, 1, 2, 4]  # numbers are asked for only of kept lines
