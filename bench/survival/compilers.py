"""Corpus builders: compilers and builds (gcc, g++, make, rustc, clippy, javac, tsc)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from capture import (
    NODE_BIN,
    SEED,
    Run,
    run,
    write,
)
from needles import Rule

if TYPE_CHECKING:
    from pathlib import Path


def c_source(seed: int, functions: int, errors: dict[int, str]) -> str:
    """A C file of `functions` functions full of warnings; `errors` plants errors."""
    lines = ["#include <stdio.h>", "#include <string.h>", ""]
    for i in range(functions):
        lines.append(f"int shelf_{i}(int count, unsigned limit, const char *label) {{")
        lines.append(f"    int unused_{i} = {(seed + i * 37) % 99 + 1};")
        lines.append("    int spare;")
        lines.append("    if (count < limit) { count += strlen(label); }")
        if i in errors:
            lines.append(errors[i])
        lines.append("    return count;")
        lines.append("}")
    lines.append('int main(void) { return shelf_0(1, 2u, "a"); }')
    return "\n".join(lines) + "\n"


def build_gcc(work: Path) -> Run:
    """`gcc -Wall -Wextra -c` on one file: 1,200 functions of warnings, 3 errors."""
    errors = {
        4: "    count += undeclared_bin_total;",
        600: "    struct pallet *p = 0; count += p->weight;",
        1195: "    count = label * 2;",
    }
    write(work / "warehouse.c", c_source(SEED, 1200, errors))
    rule = Rule(
        diagnostic=r": error: ",
        planted=(
            r"error: .undeclared_bin_total",
            r"invalid use of undefined type .struct pallet.",
            r"invalid operands to binary \*",
        ),
    )
    return run(
        ["gcc", "-Wall", "-Wextra", "-c", "warehouse.c", "-o", "warehouse.o"],
        work,
        rule,
    )


def build_gxx(work: Path) -> Run:
    """`g++ -std=c++17 -Wall -Wextra -c`: warnings, two template errors deep inside."""
    lines = [
        "#include <map>",
        "#include <string>",
        "#include <vector>",
        "#include <algorithm>",
        "",
    ]
    for i in range(500):
        lines += [
            f"int route_{i}(std::vector<int> &stops, unsigned n) {{",
            f"    int unused_{i} = {(SEED + i * 7) % 9 + 1};",
            "    for (int k = 0; k < stops.size(); ++k) { n += stops[k]; }",
            "    return static_cast<int>(n);",
            "}",
        ]
        if i == 250:
            lines += [
                "struct Stop { std::string name; };",
                "void order_stops(std::vector<Stop> &stops) {",
                "    std::sort(stops.begin(), stops.end()); }",
            ]
        if i == 495:
            lines += [
                "int depot_count(const std::map<std::string, int> &m) {",
                '    return m["depot"]; }',
            ]
    write(work / "routes.cpp", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r": error: ",
        planted=(r"error: no match for .operator<", r"error: passing .const std::map"),
    )
    return run(
        ["g++", "-std=c++17", "-Wall", "-Wextra", "-c", "routes.cpp", "-o", "routes.o"],
        work,
        rule,
    )


def build_make(work: Path) -> Run:
    """`make -k` compiling 120 C files with gcc: warnings, three files fail."""
    errors = {
        3: "    count += missing_in_file_three;",
        61: "    count += label->size;",
        118: "    count = count +;",
    }
    names = []
    for f in range(120):
        err = {2: errors[f]} if f in errors else {}
        src = c_source(SEED + f, 6, err).replace(
            "int main(void)", f"int main_{f}(void)"
        )
        write(work / "src" / f"unit_{f:03d}.c", src)
        names.append(f"obj/unit_{f:03d}.o")
    write(
        work / "Makefile",
        "CFLAGS = -Wall -Wextra -O0\n"
        f"OBJS = {' '.join(names)}\n\n"
        "all: $(OBJS)\n\n"
        "obj/%.o: src/%.c\n\t@mkdir -p obj\n\tgcc $(CFLAGS) -c $< -o $@\n",
    )
    rule = Rule(
        diagnostic=r": error: |\*\*\* ",
        summary=r"not remade because of errors",
        planted=(
            r"error: .missing_in_file_three",
            r"unit_061\.c:.*error",
            r"unit_118\.c:.*error",
            r"\*\*\* \[.*unit_(003|061|118)\.o\]",
        ),
    )
    return run(["make", "-k"], work, rule)


def build_rustc(work: Path) -> Run:
    """`rustc` on one file: borrow errors among hundreds of unused-code warnings."""
    lines = []
    for i in range(700):
        lines += [
            f"fn leg_{i}(km: u32) -> u32 {{",
            f"    let detour_{i} = km * 2;",
            "    km + 1",
            "}",
        ]
        if i == 350:
            lines += [
                "fn reuse_manifest() -> usize {",
                '    let manifest = vec![String::from("crate-7")];',
                "    let moved = manifest;",
                "    manifest.len() + moved.len()",
                "}",
            ]
        if i == 690:
            lines += [
                "fn fuel_total(legs: &mut Vec<u32>) -> u32 {",
                "    let first = &legs[0];",
                "    legs.push(3);",
                "    *first",
                "}",
            ]
    lines.append('fn main() { println!("{}", leg_0(1)); }')
    write(work / "route.rs", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r"^error(\[E\d+\])?: ",
        summary=r"^error: aborting due to",
        planted=(
            r"^error\[E0382\]: borrow of moved value: `manifest`",
            r"^error\[E0502\]: cannot borrow `\*legs` as mutable",
        ),
        location_next=r"^\s*--> ",
    )
    return run(
        ["rustc", "--edition", "2021", "--color", "never", "route.rs"], work, rule
    )


def build_clippy(work: Path) -> Run:
    """`cargo clippy` with pedantic lints as warnings, two denied lints planted."""
    write(
        work / "Cargo.toml",
        '[package]\nname = "depot"\nversion = "0.1.0"\nedition = "2021"\n',
    )
    lines = ["#![warn(clippy::pedantic)]", ""]
    for i in range(400):
        lines += [
            f"pub fn bay_{i}(v: &Vec<u64>) -> u64 {{",
            "    let mut total = 0;",
            "    for i in 0..v.len() { total += v[i] as u64; }",
            "    return total;",
            "}",
        ]
        if i == 200:
            lines += [
                "#[deny(clippy::float_cmp)]",
                "pub fn same_weight(a: f64, b: f64) -> bool { a == b }",
            ]
        if i == 395:
            lines += [
                "#[deny(clippy::unwrap_used)]",
                "pub fn first_bay(v: &[u64]) -> u64 { *v.first().unwrap() }",
            ]
    write(work / "src" / "lib.rs", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r"^error(\[E\d+\])?: ",
        summary=r"^error: could not compile",
        planted=(
            r"^error: strict comparison of `f32` or `f64`",
            r"^error: used `unwrap\(\)` on an `Option` value",
        ),
        location_next=r"^\s*--> ",
    )
    return run(
        ["cargo", "clippy", "--offline"],
        work,
        rule,
        env={"CARGO_TARGET_DIR": str(work / "target"), "CARGO_TERM_COLOR": "never"},
    )


def build_javac(work: Path) -> Run:
    """`javac -Xlint:all` on 40 classes: raw-type warnings, three errors planted."""
    errors = {
        2: '        int crates = "twelve";',
        21: "        return missingHelper(items);",
        38: "        List<String> names = new ArrayList<>(); names.add(7);",
    }
    files = []
    for c in range(40):
        lines = ["import java.util.*;", "", f"public class Dock{c:02d} {{"]
        for m in range(30):
            lines += [
                f'    @SuppressWarnings("unused") public int load{m}(List items) {{',
                "        List copy = new ArrayList(items);",
                "        copy.add(items.size());",
            ]
            if m == 15 and c in errors:
                lines.append(errors[c])
            lines += ["        return copy.size();", "    }"]
        lines.append("}")
        write(work / f"Dock{c:02d}.java", "\n".join(lines) + "\n")
        files.append(f"Dock{c:02d}.java")
    rule = Rule(
        diagnostic=r": error: ",
        summary=r"^\d+ errors?$",
        planted=(
            r"Dock02\.java:\d+: error",
            r"Dock21\.java:\d+: error",
            r"Dock38\.java:\d+: error",
        ),
    )
    return run(
        ["javac", "-Xlint:all", "-Xmaxwarns", "10000", "-d", "out", *files], work, rule
    )


def build_tsc(work: Path) -> Run:
    """`tsc` (strict) on 30 files of implicit-any errors; three others planted."""
    write(
        work / "tsconfig.json",
        json.dumps(
            {
                "compilerOptions": {
                    "strict": True,
                    "noEmit": True,
                    "target": "es2022",
                    "module": "nodenext",
                },
                "include": ["src"],
            }
        ),
    )
    plants = {
        1: "import { parseLabel } from './missing-label';",
        15: "const carrier: 'ups' | 'dhl' = 'fedex';",
        29: "function weigh(p: { kg: number }): number { return p.grams; }",
    }
    for f in range(30):
        lines = [plants.get(f, "")]
        lines += [
            f"export function bin{i}(a, b) {{ return a + b + {i}; }}" for i in range(60)
        ]
        write(work / "src" / f"bay{f:02d}.ts", "\n".join(lines) + "\n")
    rule = Rule(
        diagnostic=r": error TS\d+",
        planted=(
            r"error TS2307: Cannot find module './missing-label'",
            r"error TS2322: Type '\"fedex\"'",
            r"error TS2339: Property 'grams'",
        ),
    )
    return run([str(NODE_BIN / "tsc"), "-p", ".", "--pretty", "false"], work, rule)
