# One local entry point that does exactly what CI does.
#
#   make test    every test: unit, integration, doc, the Python interop check, and
#                the Python package's tests (`pip install ./python` into a new venv)
#   make wheel   the sluice wheel (the Python module, whose console script is the
#                `sluice` command) in $(CARGO_TARGET_DIR)/wheels: `pip install` it
#   make lint    structure check (no import cycles, no huge functions), rustfmt, clippy -D warnings
#   make bench   release build; issue 11's end-to-end benches → bench-results/results.jsonl
#                → docs/PERFORMANCE.md's table; then the criterion benchmarks
#   make demo    build sluice, run the demo pipeline into ./sluice-demo/lake and query it
#   make install put the dev build of `sluice` on PATH as ~/.local/bin/sluice
#                (PREFIX=DIR for DIR/bin/sluice; no release build needed)
#   make python  the Python readers (deltalake, polars, pyarrow) and maturin in /var/tmp/sluice-venv

# Build profile (Cargo.toml): one dev profile for the binary, tests, examples
# and CI, no debuginfo, dependencies at opt-level 0 except the crates a commit
# and an ingest spend their time in (Parquet, the Arrow kernels, CSV/JSON
# readers, zstd, BLAKE3, serde_json) at opt-level 2. One feature set for bin,
# tests and benches (serde's features are the same with and without
# dev-dependencies), so `make test` after `make demo` compiles no dependency
# again. Measured on this 2-core machine, 2026-11-30, empty target dir:
#   cargo build --workspace --tests --examples     6 min 42 s (hot crates at opt 2)
#   the same with every dependency at opt-level 0  6 min 14 s
#   every dependency at opt-level 1                ~36 min (issue 11's figure)
#   commit of 2000 staged executions: 6.3 s with every dependency at opt 0,
#   3.6 s with the hot crates at opt 2 (1.8x faster for 28 s more build).
# 2026-12-04, a new machine of the same kind, fresh clone, empty target dir:
#   make demo 9 min 38 s; then the test build compiled only the
#   dev-dependencies (criterion, proptest) and the two workspace crates.
# 2026-12-04 afternoon, same procedure (3c133b1): make demo 8 min 12 s;
#   the test build again only the dev-dependencies and workspace crates (28 s).
# The Python extension (python/, crate sluice-python) links the same library
# crate with the same features in the same target dir: it adds pyo3 and one
# crate to the build, not a second dependency tree: it depends on the CLI's
# crate, so maturin building it alone resolves every shared dependency with
# the CLI's features (`cargo tree -e features` of the two differ only by
# pyo3) and reuses the CLI's compiled tree. Measured
# 2026-12-07 over a warm tree: pyo3 and the extension from nothing 12 s;
# `make wheel` warm 40 s (most of it compressing the debug binary and
# extension, 131 MB of wheel). Since the wheel's `sluice` is a console script
# running the command line the extension carries (no binary beside it):
# `make wheel` warm 31 s, 71 MB of wheel;
# `pip install ./python` (dev profile) into a new venv, warm, 55 s with the
# Python tests; `sluice --version` 0.07 s through it against 0.01-0.02 s for
# the binary (debug builds: Python's start and loading the 300 MB module).
export CARGO_TARGET_DIR ?= /var/tmp/sluice-target
export SLUICE_VENV ?= /var/tmp/sluice-venv
CARGO ?= cargo

.PHONY: test lint fmt bench build demo python wheel help install

help:
	@awk '/^#   make /{on=1} on && /^#/{sub(/^#   /, ""); print; next} on{exit}' Makefile

build:
	$(CARGO) build --workspace

python:
	bash scripts/setup-python.sh

test: python
	SLUICE_PYTHON=$(SLUICE_VENV)/bin/python bash scripts/test-preflight.sh
	$(CARGO) build --workspace --examples
	SLUICE_PYTHON=$(SLUICE_VENV)/bin/python $(CARGO) test --workspace --lib --bins --tests
	$(CARGO) test --workspace --doc
	bash scripts/test-python.sh

wheel: python
	bash scripts/build-wheel.sh $(CARGO_TARGET_DIR)/wheels

lint:
	python3 scripts/check-structure.py
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Benchmarks run in the release profile (a warm release rebuild of sluice is
# about a minute; a cold one about 26 minutes here). Every `sluice bench`
# appends its figures (workload, value, baseline, ratio, git rev, profile)
# to $(BENCH_RESULTS), which is not committed; scripts/bench-report writes
# the newest of each into docs/PERFORMANCE.md. BENCH_SCALE=quick runs every
# workload at a tenth of its size.
BENCH_RESULTS ?= $(CURDIR)/bench-results/results.jsonl
BENCH_SCALE ?= full
bench:
	$(CARGO) build --release -p sluice-cli
	bash scripts/bench-suite.sh $(CARGO_TARGET_DIR)/release/sluice $(BENCH_RESULTS) $(BENCH_SCALE)
	python3 scripts/bench-report $(BENCH_RESULTS) docs/PERFORMANCE.md
	$(CARGO) bench --workspace --bench lake --bench commit --bench cache

demo: build
	bash scripts/demo.sh
	@echo
	@echo "sluice is $(CARGO_TARGET_DIR)/debug/sluice; \`make install\` puts it on PATH as $(PREFIX)/bin/sluice"

# The dev build is the one build (see above): install copies it.
PREFIX ?= $(HOME)/.local
install: build
	install -D -m 755 $(CARGO_TARGET_DIR)/debug/sluice $(PREFIX)/bin/sluice
	@echo "installed $(PREFIX)/bin/sluice ($$($(PREFIX)/bin/sluice --version))"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; *) echo "add it to PATH: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac
