#!/usr/bin/env bash
# The GPU check of issue 18 (bench/gpu_check.py says what each stage measures): an FSDP2
# train step over NCCL in bf16 on a Qwen2-0.5B-shaped model with MFU and peak memory, vLLM
# on CUDA with a weight sync, one RL step through the trainer's CUDA path. Writes
# gpu_check.json (or $GPU_CHECK_OUT). Without an NVIDIA GPU it says so and exits 0.
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
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
exec timeout 480 "$PY" bench/gpu_check.py --out "${GPU_CHECK_OUT:-gpu_check.json}" "$@"
