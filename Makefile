# One local entry point that does exactly what CI does.
#
#   make test    every test: unit, integration, doc, and the Python interop check
#   make lint    structure check (no import cycles, no huge functions), rustfmt, clippy -D warnings
#   make bench   criterion benchmarks
#   make demo    build sluice, create a lake in ./lake and query it

export CARGO_TARGET_DIR ?= /var/tmp/sluice-target
export SLUICE_VENV ?= /var/tmp/sluice-venv
CARGO ?= cargo

.PHONY: test lint fmt bench build demo python help

help:
	@grep -E '^#   make' Makefile | sed 's/^#   //'

build:
	$(CARGO) build --workspace

python:
	bash scripts/setup-python.sh

test: python
	SLUICE_PYTHON=$(SLUICE_VENV)/bin/python bash scripts/test-preflight.sh
	$(CARGO) build --workspace --examples
	SLUICE_PYTHON=$(SLUICE_VENV)/bin/python $(CARGO) test --workspace --lib --bins --tests
	$(CARGO) test --workspace --doc

lint:
	python3 scripts/check-structure.py
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

bench:
	$(CARGO) bench --workspace --bench lake --bench commit --bench cache

demo: build
	bash scripts/demo.sh
