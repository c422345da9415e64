#!/usr/bin/env bash
# Installs every Debian package Kiln's build and tests need, or the packages named as arguments
# (scripts/install-bench-deps.sh). Idempotent: prints nothing and touches nothing when all are
# present; otherwise runs apt-get update once and installs the rest.
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libabsl-dev
  libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc python3-grpcio python3-grpc-tools
  libonnx-dev
  libssl-dev
  libxxhash-dev
  libre2-dev
  libspdlog-dev
  libdnnl-dev ocl-icd-opencl-dev  # oneDNN's CMake package looks for OpenCL (a Recommends)
  # The OpenCL backend: headers to build it; the ICD loader, PoCL (OpenCL on the CPU) and CLBlast
  # to run its tests here.
  opencl-headers ocl-icd-libopencl1 pocl-opencl-icd libclblast-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libonnx-testdata
  chromium
)
[ $# -gt 0 ] && packages=("$@")

# tests/real_models (label e2e) compare Kiln with ONNX Runtime at test time: pinned NumPy, ONNX
# and ONNX Runtime from PyPI for the python3 on PATH, when it lacks them (not when packages are
# named). A failure here only warns: those tests then fail and say why.
if [ $# -eq 0 ] && ! python3 -c "import numpy, onnx, onnxruntime" 2>/dev/null; then
  echo "install-deps: pip install numpy==2.4.6 onnx==1.23.2 onnxruntime==1.32.0"
  python3 -m pip install -q numpy==2.4.6 onnx==1.23.2 onnxruntime==1.32.0 ||
    echo "install-deps: warning: pip install failed; tests/real_models will fail" >&2
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
