"""A listing's structural summary: counts per top-level path, author (S1.6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.listing import ListingCounter, listing_summary
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.preview import PreviewText, build_preview

from support.previews import preview_source


def grep_output(root: str = "/repo/") -> str:
    lines = [f"{root}src/m{i % 7}.py:{i}:    import os" for i in range(900)]
    lines += [f"{root}tests/t{i}.py:{i}: import pytest" for i in range(100)]
    lines += [f"{root}setup.py:{i}:import setuptools" for i in range(3)]
    return "\n".join(lines) + "\n"


def test_grep_matches_are_counted_under_their_common_directory() -> None:
    assert listing_summary(grep_output()) == (
        "[listing: 1,003 matches, 3 top-level paths under /repo/; "
        "most: src/ 900, tests/ 100, setup.py 3]"
    )


def test_find_paths_are_counted_by_top_directory() -> None:
    paths = [f"./pkg{i % 9}/mod{i}.py" for i in range(400)] + ["./README.md"]
    summary = listing_summary("\n".join(paths))
    assert summary is not None
    assert summary.startswith("[listing: 401 paths, 10 top-level paths; most: ")
    assert summary.endswith("; 5 more]")


def test_git_log_counts_commits_by_author() -> None:
    log = "".join(
        f"commit {i:040x}\nAuthor: {'Ada' if i % 3 else 'Bob'} <a@b>\n"
        f"Date:   Mon Jan 1\n\n    change {i}\n\n"
        for i in range(60)
    )
    assert listing_summary(log) == (
        "[listing: 60 commits, 2 authors; most: Ada 40, Bob 20]"
    )


@given(st.sampled_from(["ab\n", "para\n\n", "ERROR x\n", "ok 1 - test\n"]))
def test_other_outputs_are_no_listing(line: str) -> None:
    assert listing_summary(line * 3000) is None


def test_a_log_with_colons_and_numbers_is_no_listing() -> None:
    log = "".join(
        f"2026-12-02 10:{i % 60:02d}:00 INFO worker {i} done\n" for i in range(500)
    )
    assert listing_summary(log) is None


def test_a_listing_preview_says_where_the_matches_are() -> None:
    text = grep_output() * 40
    source = preview_source(text)
    preview = build_preview(PreviewText(text, text, whole=True), source, SpillPolicy())
    assert preview.split("\n")[1] == (
        "[listing: 40,120 matches, 3 top-level paths under /repo/; "
        "most: src/ 36,000, tests/ 4,000, setup.py 120]"
    )
    assert len(preview) <= 30_000


@given(
    st.sampled_from(["grep", "find", "log", "plain"]),
    st.lists(st.integers(1, 5000), min_size=1, max_size=30),
)
def test_a_stream_in_any_pieces_counts_what_the_whole_text_does(
    kind: str, cuts: list[int]
) -> None:
    text = {
        "grep": grep_output("./"),
        "find": "".join(f"./p{i % 4}/é{i}.txt\n" for i in range(3000)),
        "log": "".join(
            f"commit {i:040x}\nAuthor: A <a>\n\n    m\n\n" for i in range(900)
        ),
        "plain": "row\n" * 20_000,
    }[kind]
    data = text.encode()
    counter = ListingCounter()
    start = 0
    for cut in sorted(cuts):
        counter.feed(data[start:cut])
        start = max(start, cut)
    counter.feed(data[start:])
    assert counter.summary() == listing_summary(text)
    assert (counter.summary() is None) == (kind == "plain")
