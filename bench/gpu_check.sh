#!/usr/bin/env bash
# One Ray-mode training step (TrainRole.update_actor: FSDP2 over NCCL, bf16 mixed
# precision) on a CUDA GPU, reporting tokens per second; the same code path the CPU
# benchmark (bench/distributed.py) times over gloo; then vLLM on CUDA generating with
# weight sync (tests/generation/vllm/probe.py). Without a GPU it says so and exits 0.
#
#   bash bench/gpu_check.sh            # uses .venv/bin/python when present, else python3
#   PYTHON=/path/to/python bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA driver (nvidia-smi not found); skipping the GPU step."
  exit 0
fi
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: nvidia-smi is present but torch ($PY) sees no CUDA device (CPU-only torch?);"
  echo "           install a CUDA build of torch to run the GPU step. Skipping."
  exit 0
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PY" bench/distributed.py --gpu-check "$@"
# vLLM on CUDA with per-step weight sync (docs/vllm.md): the real-vLLM probe on a saved
# tiny policy. Builds the `vllm` venv first if this machine has none (cached); the probe
# prints one PROBE line (seeded-group distinctness, logprob gaps, sync seconds per step).
if [[ "${GPU_CHECK_VLLM:-1}" == 1 ]]; then
  VENV="$(timeout 300 bash tools/setup_vllm.sh)" || { echo "gpu_check: vLLM venv build failed or took > 5 min"; exit 1; }
  CKPT="$(mktemp -d)"
  "$PY" -c "import sys; from arborl.models import load_policy, save_policy; m, t = load_policy('tiny-1m'); save_policy(m, t, sys.argv[1])" "$CKPT" >/dev/null
  VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONPATH=. timeout 240 "$VENV/bin/python" tests/generation/vllm/probe.py "$CKPT" | grep '^PROBE'
fi
