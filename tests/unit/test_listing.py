"""A listing's structural summary: counts per top-level path, author (S1.6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.listing import SAMPLE_CHARS, ListingCounter, listing_summary
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


def tar_verbose_line(path: str, kind: str = "-rw-r--r--", size: str = "1234") -> str:
    return f"{kind} root/root {size:>9} 2026-01-01 12:00 {path}\n"


def test_tar_verbose_paths_are_counted_without_link_targets() -> None:
    text = tar_verbose_line("./", "drwxr-xr-x", "0")
    text += tar_verbose_line("./lib/", "drwxr-xr-x", "0")
    text += "".join(tar_verbose_line(f"./lib/m{i}.py") for i in range(25))
    text += tar_verbose_line("./python -> /usr/bin/python3.11", "lrwxrwxrwx", "0")
    text += tar_verbose_line("./copy link to ./lib/m0.py", "hrw-r--r--", "0")
    text += tar_verbose_line("./null", "crw-rw-rw-", "1,3")
    assert listing_summary(text) == (
        "[listing: 29 paths, 4 top-level paths; "
        "most: lib/ 26, python 1, copy 1, null 1]"
    )


def ls_entry(name: str, kind: str = "-rw-r--r--") -> str:
    return f"{kind} 1 ada staff {len(name):>5} Jan  1 12:00 {name}\n"


def ls_section(directory: str, entries: list[str]) -> str:
    return f"{directory}:\ntotal {4 * len(entries)}\n{''.join(entries)}\n"


def ls_recursive(root: str) -> str:
    """Return an `ls -lR root`: 26 entries in four directories and an empty one."""
    under = root.rstrip("/")
    top = [ls_entry(f"f{i}.txt") for i in range(2)]
    top += [ls_entry(d, "drwxr-xr-x") for d in ("docs", "src")]
    top.append(ls_entry("latest -> /srv/old/src", "lrwxrwxrwx"))
    return (
        ls_section(root, top)
        + ls_section(f"{under}/docs", [ls_entry(f"d{i}.md") for i in range(3)])
        + ls_section(f"{under}/docs/empty", [])
        + ls_section(f"{under}/src", [ls_entry(f"s{i}.py") for i in range(12)])
        + ls_section(f"{under}/src/deep", [ls_entry(f"x{i}.py") for i in range(6)])
    ).rstrip("\n")


@pytest.mark.parametrize(
    ("root", "under"),
    [("/srv/app", " under /srv/app/"), ("/srv/app/", " under /srv/app/"), (".", "")],
)
def test_ls_recursive_entries_count_under_their_section_header(
    root: str, under: str
) -> None:
    assert listing_summary(ls_recursive(root)) == (
        f"[listing: 26 entries, 3 top-level paths{under}; most: src/ 18, ./ 5, docs/ 3]"
    )


def test_ls_recursive_entries_after_a_cut_keep_the_header_before_it() -> None:
    text = ls_section("/data", [ls_entry(d, "drwxr-xr-x") for d in "ab"])
    text += ls_section("/data/a", [ls_entry(f"a{i:04}.txt") for i in range(2000)])
    text += ls_section("/data/b", [ls_entry(f"b{i:04}.txt") for i in range(1000)])
    middle_of_a, in_header_b = 80_000, text.index("/data/b:") + 3
    # The first piece settles the shape; the cut splits an entry of /data/a.
    assert SAMPLE_CHARS < middle_of_a < text.index("/data/b:")
    assert text[middle_of_a - 1] != "\n"
    counter = ListingCounter()
    counter.feed_text(text[:middle_of_a])
    counter.feed_text(text[middle_of_a:in_header_b])
    counter.feed_text(text[in_header_b:])
    expected = (
        "[listing: 3,002 entries, 3 top-level paths under /data/; "
        "most: a/ 2,000, b/ 1,000, ./ 2]"
    )
    assert counter.summary() == expected == listing_summary(text)


def test_a_short_ls_of_one_directory_is_no_listing() -> None:
    entries = [ls_entry(f"file{i}.txt") for i in range(17)]
    assert listing_summary(ls_section("/srv/app", entries)) is None
    assert listing_summary(f"total 68\n{''.join(entries)}") is None


def test_an_ls_without_section_headers_is_no_listing() -> None:
    entries = "".join(ls_entry(f"file{i}.txt") for i in range(300))
    assert listing_summary(f"total 1200\n{entries}") is None


def test_a_log_of_permission_like_lines_is_no_listing() -> None:
    log = "".join(f"-rw-r--r-- kept on /srv/f{i}: 12 KB\n" for i in range(300))
    assert listing_summary(log) is None
    half = "".join(
        tar_verbose_line(f"srv/f{i}") + f"2026-01-01 12:00 INFO synced f{i}\n"
        for i in range(150)
    )
    assert listing_summary(half) is None


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
    st.sampled_from(["grep", "find", "log", "tar", "ls", "plain"]),
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
        "tar": "".join(
            tar_verbose_line(f"./p{i % 4}/l{i} -> ../é{i}", "lrwxrwxrwx")
            if i % 7 == 0
            else tar_verbose_line(f"./p{i % 4}/é{i}.txt")
            for i in range(1500)
        ),
        "ls": ls_section(".", [ls_entry(f"p{d}", "drwxr-xr-x") for d in range(4)])
        + "".join(
            ls_section(f"./p{d % 4}/é{d}", [ls_entry(f"f{i}") for i in range(d % 6)])
            for d in range(800)
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
