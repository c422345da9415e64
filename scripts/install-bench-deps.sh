#!/usr/bin/env bash
# Installs what bench/run_all.py needs beyond the build: ONNX, NumPy and ONNX Runtime (the peer)
# from PyPI for the python3 that runs the script, and Debian's python3-torch and python3-onnx for
# the PyTorch export of BERT-base (bench/bert_torch.py runs under /usr/bin/python3).
# Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c "import numpy, onnx, onnxruntime" 2>/dev/null; then
  echo "install-bench-deps: pip install -r bench/requirements.txt"
  python3 -m pip install -q -r bench/requirements.txt
fi

bash scripts/install-deps.sh python3-torch python3-onnx
echo "install-bench-deps: done"
