"""The survival bench's pure parts: peer cuts, needle marking and matching."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from types import ModuleType

SURVIVAL = Path(__file__).resolve().parents[2] / "bench" / "survival"
KB = 1024


def _load(name: str) -> ModuleType:
    """Import bench/survival/<name>.py under a name no other test uses."""
    spec = importlib.util.spec_from_file_location(
        f"survival_{name}", SURVIVAL / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


scoring = _load("scoring")
needles = _load("needles")

# ------------------------------------------------------------------ peer cuts


def test_claude_code_keeps_the_first_2000_characters() -> None:
    text = "é" * 1500 + "x" * 1500
    assert scoring.claude_code(text) == "é" * 1500 + "x" * 500


def test_gemini_keeps_a_fifth_of_40000_from_the_head_the_rest_from_the_tail() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(50_000))
    cut = scoring.gemini_cli(text)
    assert cut == text[:8_000] + text[-32_000:]
    assert scoring.gemini_cli(text[:40_000]) == text[:40_000]


def test_codex_keeps_5_kb_from_each_end_on_character_boundaries() -> None:
    text = "a" + "€" * 5000 + "z"  # 3-byte characters straddle the 5 KB cuts
    cut = scoring.codex(text)
    assert scoring.byte_size(cut) <= 10 * KB
    assert cut.startswith("a€")
    assert cut.endswith("€z")
    assert len(cut) == 1 + 5119 // 3 + 5119 // 3 + 1
    assert scoring.codex("short") == "short"


def test_opencode_stops_at_2000_lines() -> None:
    text = "\n".join(f"l{i}" for i in range(3000))
    assert scoring.opencode(text) == "\n".join(f"l{i}" for i in range(2000))


def test_opencode_stops_at_50_kb_on_a_whole_line() -> None:
    text = "\n".join("x" * 999 for _ in range(100))  # 1,000 bytes a line
    cut = scoring.opencode(text)
    assert cut == "\n".join("x" * 999 for _ in range(51))


def test_pi_keeps_the_last_2000_lines() -> None:
    text = "\n".join(f"l{i}" for i in range(3000))
    assert scoring.pi(text) == "\n".join(f"l{i}" for i in range(1000, 3000))


def test_deepseek_keeps_25_kb_from_each_end() -> None:
    text = "h" * (30 * KB) + "t" * (30 * KB)
    assert scoring.deepseek(text) == "h" * (25 * KB) + "t" * (25 * KB)
    assert scoring.deepseek("x" * (50 * KB)) == "x" * (50 * KB)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from("ab€\t "), max_size=300), max_size=400
    ).map("\n".join)
)
def test_every_peer_shows_only_a_bounded_head_and_tail(text: str) -> None:
    bounds = {
        scoring.codex: 10 * KB,
        scoring.deepseek: 50 * KB,
        scoring.opencode: 50 * KB,
        scoring.pi: 50 * KB,
    }
    for cut, limit in bounds.items():
        shown = cut(text)
        assert scoring.byte_size(shown) <= limit
        assert any(
            text.startswith(shown[:i]) and text.endswith(shown[i:])
            for i in range(len(shown) + 1)
        )
    assert len(scoring.gemini_cli(text)) <= 40_000
    assert len(scoring.claude_code(text)) <= 2_000


# -------------------------------------------------------- matching, positions


def test_a_needle_matches_trimmed_and_by_its_first_200_characters() -> None:
    needle = "  " + "E" * 200 + " tail that was cut  "
    assert scoring.is_kept(needle, "prefix " + "E" * 200 + " other tail")
    assert not scoring.is_kept("  error: x  ", "error: y")
    assert not scoring.is_kept("   ", "anything")


def test_ours_is_searched_without_key_line_prefixes_and_escapes() -> None:
    preview = "head\nline 5012: \x1b[31mFAILED test_x\x1b[0m\ntail"
    assert scoring.is_kept("FAILED test_x", scoring.searchable(preview, ours=True))
    peer = scoring.searchable("line 12: text", ours=False)
    assert peer == "line 12: text"


@pytest.mark.parametrize(
    ("offset", "where"),
    [(0, "start"), (99, "start"), (100, "middle"), (899, "middle"), (900, "end")],
)
def test_position_is_by_the_tenths_of_the_output(offset: int, where: str) -> None:
    assert scoring.position(offset, 1000) == where


# --------------------------------------------------------------- needle rule

LINES = (
    "collecting",
    "a.py:1: error: one",
    "a.py:1: error: one",  # the same text: one needle
    "a.py:2: error: two",
    "note: quiet",
    "b.py:3: error: planted",
    "  --> b.py:3:1",
    "a.py:4: error: three",
    "a.py:5: error: four",
    "a.py:6: error: five",
    "a.py:7: error: six",
    "Found 7 errors",
    "Found 7 errors in 2 files",
    "/srv/lookup/target.txt",
)
OUTPUT = "\n".join(LINES)


def test_the_rule_marks_five_distinct_diagnostics_planted_summary_and_lookup() -> None:
    rule = needles.Rule(
        diagnostic=r": error: ",
        summary=r"^Found \d+ errors",
        planted=(r"error: planted",),
        lookup=(r"target\.txt$",),
        location_next=r"^\s*--> ",
    )
    marked = needles.mark_needles(OUTPUT, rule)
    assert [(n.line, n.kind) for n in marked] == [
        (2, "diagnostic"),
        (4, "diagnostic"),
        (6, "diagnostic"),
        (7, "diagnostic"),
        (8, "diagnostic"),
        (9, "diagnostic"),
        (13, "diagnostic"),
        (14, "lookup"),
    ]
    assert marked[3].text == "--> b.py:3:1"
    assert marked[2].offset == sum(len(line) + 1 for line in LINES[:5])


def test_offsets_count_utf8_bytes_and_text_drops_escapes() -> None:
    marked = needles.mark_needles(
        "é€\n\x1b[31merror: x\x1b[0m\r", needles.Rule("error")
    )
    assert [(n.text, n.line, n.offset) for n in marked] == [("error: x", 2, 6)]


@pytest.mark.parametrize("field", ["planted", "lookup", "summary"])
def test_a_pattern_matching_no_line_is_a_named_error(field: str) -> None:
    value = "absent" if field == "summary" else ("absent",)
    rule = needles.Rule(**{field: value})
    with pytest.raises(needles.NeedleRuleError, match=f"{field} pattern 'absent'"):
        needles.mark_needles("nothing here", rule)
