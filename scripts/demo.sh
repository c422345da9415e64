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

# The same conversion through the service (DESIGN.md §9): a local kiln-server on a free port,
# convert-client streaming the build's log, the engine written after its digest is verified,
# and the accuracy report's summary.
server_bin="$build_dir/server/kiln-server"
client_bin="$build_dir/client/convert-client"
if [[ -x "$server_bin" && -x "$client_bin" ]]; then
  echo
  echo "== kiln-server on 127.0.0.1 (free port) and convert-client --policy fp32-layernorm"
  rm -f "$work/server.port"
  "$server_bin" --listen 127.0.0.1:0 --port-file "$work/server.port" \
    --cache-dir "$work/server-cache" >"$work/server.log" 2>&1 &
  server_pid=$!
  stop_server() {
    if kill -0 "$server_pid" 2>/dev/null; then
      kill -TERM "$server_pid" 2>/dev/null || true
      wait "$server_pid" 2>/dev/null || true
    fi
  }
  trap stop_server EXIT
  for _ in $(seq 300); do
    [[ -s "$work/server.port" ]] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
    sleep 0.1
  done
  [[ -s "$work/server.port" ]] || { echo "kiln-server did not start"; exit 1; }
  port=$(cat "$work/server.port")
  echo "   kiln-server pid $server_pid listening on 127.0.0.1:$port (log: $work/server.log)"
  "$client_bin" --server "127.0.0.1:$port" --model "$model_dir/model.onnx" \
    --policy fp32-layernorm -o "$work/mobilenet_tiny_remote.kiln" \
    --inputs "$model_dir/test_data_set_0" --report "$work/remote_report.json" \
    --html "$work/remote_report.html"
  echo
  echo "== stop kiln-server (SIGTERM: drain, exit 0)"
  stop_server
  trap - EXIT
  echo "   stopped; engine $work/mobilenet_tiny_remote.kiln, report $work/remote_report.html"
else
  echo
  echo "== (kiln-server / convert-client not built: configure with -DKILN_WITH_SERVER=ON)"
fi
