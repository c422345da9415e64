#!/usr/bin/env bash
# `make demo`: the main job on a model the project ships — a small MobileNet-style CNN exported
# from PyTorch (tests/models/mobilenet_tiny) — through the local CLI: build an fp32 engine, run
# it on the shipped input, compare with ONNX Runtime's recorded output, and inspect the engine.
set -euo pipefail
build_dir=${1:-build}
kiln="$build_dir/tools/kiln"
model_dir=tests/models/mobilenet_tiny
work="$build_dir/demo"
mkdir -p "$work"

echo "== kiln build (fp32 policy)"
"$kiln" build "$model_dir/model.onnx" --policy fp32 -o "$work/mobilenet_tiny.kiln"
echo
echo "== kiln run"
"$kiln" run "$work/mobilenet_tiny.kiln" --inputs "$model_dir/test_data_set_0" --outputs "$work/out"
echo
echo "== compare with ONNX Runtime's output (recorded in $model_dir/test_data_set_0)"
"$build_dir/tools/kiln_tensor_diff" "$work/out/output_0.pb" "$model_dir/test_data_set_0/output_0.pb"
echo
echo "== kiln inspect"
"$kiln" inspect "$work/mobilenet_tiny.kiln"
echo
echo "== kiln build --policy fp16 with the accuracy report (every ONNX tensor against fp32)"
"$kiln" build "$model_dir/model.onnx" --policy fp16 -o "$work/mobilenet_tiny_fp16.kiln" \
  --inputs "$model_dir/test_data_set_0" --report "$work/report.json" --html "$work/report.html" \
  --quiet
