"""Corpus builders: test runners (pytest, unittest, node --test, cargo test)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from capture import (
    Run,
    run,
    venv,
    write,
)
from needles import Rule

if TYPE_CHECKING:
    from pathlib import Path


def pytest_project(
    root: Path, modules: int, per_module: int, planted: dict[int, str]
) -> None:
    """Write `modules` test files of `per_module` parametrized cases; plant failures."""
    for m in range(1, modules + 1):
        body = planted.get(m, "")
        write(
            root / "tests" / f"test_ledger_{m:02d}.py",
            "import pytest\n\n\n"
            "def running_total(values):\n"
            "    total = 0\n"
            "    for value in values:\n"
            "        total += value\n"
            "    return total\n\n\n"
            f"@pytest.mark.parametrize('n', range({per_module}))\n"
            "def test_running_total(n):\n"
            "    assert running_total(range(n)) == n * (n - 1) // 2\n" + body,
        )
    write(root / "pytest.ini", "[pytest]\naddopts = -p no:cacheprovider\n")


PYTEST_PLANTS = {
    2: (
        "\n\ndef test_invoice_rounding():\n"
        "    assert round(2.675, 2) == 2.68, 'invoice total rounds half up'\n"
    ),
    16: (
        "\n\ndef lookup(prices, sku):\n    return prices[sku]\n\n\n"
        "def test_price_lookup():\n"
        "    assert lookup({'sku-1': 3}, 'sku-4411') == 3\n"
    ),
    30: (
        "\n\ndef test_average_of_empty_cart():\n"
        "    items = []\n"
        "    assert sum(items) / len(items) == 0\n"
    ),
}


def build_pytest_tbno(work: Path) -> Run:
    """`pytest -v --tb=no` on 3,000 cases with three planted failures."""
    pytest_project(work, 30, 100, PYTEST_PLANTS)
    rule = Rule(
        diagnostic=r"\sFAILED\b|^FAILED ",
        summary=r"^=+ .*\d+ (failed|passed)",
        planted=(
            r"test_invoice_rounding",
            r"test_price_lookup",
            r"test_average_of_empty_cart",
        ),
    )
    return run([venv("pytest"), "-v", "--tb=no"], work, rule)


def build_pytest_locals(work: Path) -> Run:
    """`pytest -v -l` (long tracebacks, locals) on 1,500 cases, three failures."""
    plants = {
        1: PYTEST_PLANTS[2],
        8: PYTEST_PLANTS[16] + "\n\ndef test_bulk_price_table():\n"
        "    table = {f'sku-{i}': i for i in range(400)}\n"
        "    assert lookup(table, 'sku-9999') == 0\n",
        15: PYTEST_PLANTS[30],
    }
    pytest_project(work, 15, 100, plants)
    rule = Rule(
        diagnostic=r"\sFAILED\b|^FAILED |^E\s+\w*(Error|Exception)\b",
        summary=r"^=+ .*\d+ (failed|passed)",
        planted=(
            r"^E\s+AssertionError: invoice total rounds half up",
            r"^E\s+KeyError: 'sku-4411'",
            r"^E\s+KeyError: 'sku-9999'",
            r"^E\s+ZeroDivisionError",
        ),
    )
    return run([venv("pytest"), "-v", "-l", "--tb=long"], work, rule)


def unittest_module(count: int, plants: dict[int, str], *, noisy: bool) -> str:
    """A unittest module of `count` tests; `plants` replaces some bodies."""
    lines = [
        "import logging",
        "import unittest",
        "",
        "log = logging.getLogger('inventory')",
        "",
        "class InventoryTest(unittest.TestCase):",
    ]
    for i in range(count):
        lines.append(f"    def test_restock_{i:04d}(self):")
        if noisy:
            lines.append(f"        print('restock batch {i}: 12 pallets, 3 bays, ok')")
        lines.append(
            plants.get(
                i, f"        self.assertEqual(sum(range({i})), {i * (i - 1) // 2})"
            )
        )
    return "\n".join(lines) + "\n"


UNITTEST_PLANTS = {
    3: "        self.assertEqual(len('pallet-A7'), 8, 'pallet label length')",
    1000: "        stock = {'A7': 3}\n        self.assertEqual(stock['B9'], 3)",
    1996: "        raise RuntimeError('restock queue closed unexpectedly')",
}


def build_unittest(work: Path) -> Run:
    """`python -m unittest -v` on 2,000 tests: a FAIL, an ERROR, a FAIL planted."""
    write(
        work / "test_inventory.py", unittest_module(2000, UNITTEST_PLANTS, noisy=False)
    )
    rule = Rule(
        diagnostic=r"\.\.\. (FAIL|ERROR)$|^(FAIL|ERROR): |^\w+(Error|Exception): ",
        summary=r"^FAILED \(",
        planted=(
            r"^AssertionError: 9 != 8 : pallet label length",
            r"^KeyError: 'B9'",
            r"^RuntimeError: restock queue closed unexpectedly",
        ),
    )
    return run([sys.executable, "-m", "unittest", "-v", "test_inventory"], work, rule)


def build_unittest_noisy(work: Path) -> Run:
    """`python -m unittest -v` where every test prints a line (unbuffered)."""
    plants = {
        40: "        self.assertTrue(0.1 + 0.2 == 0.3, 'float restock weights add up')",
        700: "        raise ValueError('bay 17 reports negative stock: -4')",
        1390: "        self.assertIn('C3', ['A1', 'B2'])",
    }
    write(work / "test_inventory.py", unittest_module(1400, plants, noisy=True))
    rule = Rule(
        diagnostic=r"\.\.\. (FAIL|ERROR)$|^(FAIL|ERROR): |^\w+(Error|Exception): ",
        summary=r"^FAILED \(",
        planted=(
            r"^AssertionError: False is not true : float restock weights",
            r"^ValueError: bay 17 reports negative stock",
            r"^AssertionError: 'C3' not found in",
        ),
    )
    return run(
        [sys.executable, "-m", "unittest", "-v", "test_inventory"],
        work,
        rule,
        env={"PYTHONUNBUFFERED": "1"},
    )


def node_tests(work: Path, plants: dict[int, str]) -> None:
    """Four node:test files of 500 tests each; `plants` replaces some bodies."""
    for f in range(4):
        lines = [
            "import test from 'node:test';",
            "import assert from 'node:assert/strict';",
            "",
        ]
        for i in range(f * 500, f * 500 + 500):
            body = plants.get(
                i, f"  assert.equal([...Array({i % 50}).keys()].length, {i % 50});"
            )
            lines += [f"test('ships order {i}', () => {{", body, "});"]
        write(work / f"orders{f}.test.mjs", "\n".join(lines) + "\n")


NODE_PLANTS = {
    6: "  assert.equal(Math.round(1.005 * 100) / 100, 1.01);",
    1001: "  assert.deepEqual({ carrier: 'ups', kg: 12 }, { carrier: 'dhl', kg: 12 });",
    1995: "  throw new TypeError('parcel.dimensions is undefined');",
}


def build_node_tap(work: Path) -> Run:
    """`node --test --test-reporter=tap` on 2,000 tests, three failing."""
    node_tests(work, NODE_PLANTS)
    rule = Rule(
        diagnostic=r"^\s*not ok \d+|^\s*error: '|^\s*location: ",
        summary=r"^# fail \d+",
        planted=(r"not ok \d+ - ships order (6|1001|1995)\b",),
    )
    files = [f"orders{f}.test.mjs" for f in range(4)]
    return run(["node", "--test", "--test-reporter=tap", *files], work, rule)


def build_node_spec(work: Path) -> Run:
    """`node --test --test-reporter=spec` on 2,000 tests, three failing."""
    node_tests(
        work, {90: NODE_PLANTS[6], 1200: NODE_PLANTS[1001], 1930: NODE_PLANTS[1995]}
    )
    rule = Rule(
        diagnostic=r"^\s*✖ |Error \[ERR_|^\s*\w*Error\b.*:",
        summary=r"^\u2139 fail \d+",
        planted=(r"✖ ships order (90|1200|1930)\b",),
    )
    files = [f"orders{f}.test.mjs" for f in range(4)]
    return run(["node", "--test", "--test-reporter=spec", *files], work, rule)


def build_cargo_test(work: Path) -> Run:
    """`cargo test` on a crate with 1,500 tests, three failing."""
    write(
        work / "Cargo.toml",
        '[package]\nname = "freight"\nversion = "0.1.0"\nedition = "2021"\n',
    )
    plants = {
        5: '        assert_eq!(rate_cents(12, 7), 85, "zone 7 rate for 12 kg");',
        750: "        let zones: Vec<u32> = vec![];\n"
        '        assert!(zones.iter().any(|z| *z == 9), "zone 9 missing from table");',
        1490: "        let weight: Option<u32> = None;\n"
        '        weight.expect("parcel weight was never measured");',
    }
    lines = [
        "pub fn rate_cents(kg: u32, zone: u32) -> u32 { kg * 7 + zone }",
        "",
        "#[cfg(test)]",
        "mod tests {",
        "    use super::*;",
    ]
    for i in range(1500):
        lines.append("    #[test]")
        lines.append(f"    fn rate_case_{i:04d}() {{")
        lines.append(
            plants.get(
                i, f"        assert_eq!(rate_cents({i % 40}, 1), {i % 40 * 7 + 1});"
            )
        )
        lines.append("    }")
    lines.append("}")
    write(work / "src" / "lib.rs", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r"\.\.\. FAILED$|^thread '.*' panicked at|^error: ",
        summary=r"^test result: ",
        planted=(
            r"zone 7 rate for 12 kg",
            r"zone 9 missing from table",
            r"parcel weight was never measured",
        ),
    )
    return run(
        ["cargo", "test", "--offline", "--", "--test-threads=1"],
        work,
        rule,
        env={"CARGO_TARGET_DIR": str(work / "target"), "CARGO_TERM_COLOR": "never"},
    )
