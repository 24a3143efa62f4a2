# The two README commands: `make demo` (the main job) and `make test` (the suite).
# Both set up .venv on first use; nothing else to install or start by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean-venv

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned: on a CPU machine any other spec pulls multi-GB CUDA builds.
	$(BIN)/python -m pip install -q "torch==2.13.0" -c constraints.txt
	$(BIN)/python -m pip install -q -e ".[test]" -c constraints.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/vlgate demo

test: $(STAMP)
	$(BIN)/python -m pytest

# the pure tests (metric math, schemas, scoring, GX, gate, loaders, CLI): well under a minute
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not (world or service or browser or slow)"

lint: $(STAMP)
	$(BIN)/ruff check
	PYTHON=$(abspath $(BIN))/python .ci/typecheck

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_score_lcm_mc.py

clean-venv:
	rm -rf $(VENV)
