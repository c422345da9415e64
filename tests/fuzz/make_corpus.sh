#!/usr/bin/env bash
# Seed corpora for the fuzz harnesses, written to FUZZ_DIR/seeds/<harness>/ (nothing is
# committed but the small text seeds of tests/fuzz/seeds/):
#   onnx_importer         tests/models/*/model.onnx, tests/fuzz/seeds/onnx/*.textproto
#   engine_blob(_resigned) engines `kiln build` writes from the small test models and the text
#                         seeds, under a few policies
#   policy                tests/fuzz/seeds/policy/*, the README's and DESIGN.md's examples
#   tensor_proto          the test models' .pb tensors, tests/fuzz/seeds/tensor_proto/*.textproto
#                         and a sample of Debian's libonnx-testdata inputs
#   build_spec            tests/fuzz/seeds/build_spec/*.textproto
# usage: tests/fuzz/make_corpus.sh FUZZ_DIR [KILN_BIN]   (no KILN_BIN: no engine seeds)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: make_corpus.sh FUZZ_DIR [KILN_BIN]}"
kiln="${2:-}"
seeds="$out/seeds"
here="$root/tests/fuzz/seeds"
onnx_proto=/usr/include/onnx/onnx.proto

rm -rf "$seeds"
for h in onnx_importer engine_blob engine_blob_resigned policy tensor_proto build_spec; do
  mkdir -p "$seeds/$h"
done

encode() {  # encode TYPE INCLUDE_DIR PROTO_FILE < textproto > binary
  protoc --encode="$1" -I"$2" "$3"
}

# ONNX models: the test models as they are, and the text seeds encoded.
models="$out/seed-models"
rm -rf "$models" && mkdir -p "$models"
for m in "$root"/tests/models/*/model.onnx; do
  cp "$m" "$seeds/onnx_importer/$(basename "$(dirname "$m")").onnx"
done
for t in "$here"/onnx/*.textproto; do
  name="$(basename "$t" .textproto)"
  encode onnx.ModelProto /usr/include "$onnx_proto" < "$t" > "$models/$name.onnx"
  cp "$models/$name.onnx" "$seeds/onnx_importer/"
done

# Engines: the small models (a blob is about the model's weights plus metadata), under policies
# that give different kernels and dtypes.
if [ -n "$kiln" ] && [ -x "$kiln" ]; then
  for m in authored_mixed mobilenet_tiny squeezenet_tiny bert_layernorm_decomposed; do
    cp "$root/tests/models/$m/model.onnx" "$models/$m.onnx"
  done
  for m in "$models"/*.onnx; do
    name="$(basename "$m" .onnx)"
    for policy in fp32 fp16 bf16-layernorm; do
      engine="$seeds/engine_blob/$name.$policy.kiln"
      # Models Kiln refuses (external data, If) simply give no engine.
      if "$kiln" build "$m" --policy "$policy" --constraints prefer -o "$engine" --quiet \
          > /dev/null 2>&1; then
        cp "$engine" "$seeds/engine_blob_resigned/"
      else
        rm -f "$engine"
      fi
    done
  done
else
  echo "make_corpus: no kiln binary given: engine_blob seeds are empty" >&2
fi

# Policies.
cp "$here"/policy/* "$seeds/policy/"

# Tensors: the test models' inputs and outputs, the text seeds, and every 40th small input of
# Debian's ONNX backend test data (dtypes and shapes the test models lack).
for p in "$root"/tests/models/*/test_data_set_0/*.pb; do
  cp "$p" "$seeds/tensor_proto/$(basename "$(dirname "$(dirname "$p")")")_$(basename "$p")"
done
for t in "$here"/tensor_proto/*.textproto; do
  encode onnx.TensorProto /usr/include "$onnx_proto" < "$t" \
    > "$seeds/tensor_proto/$(basename "$t" .textproto).pb"
done
if [ -d /usr/share/libonnx-testdata/data/node ]; then
  find /usr/share/libonnx-testdata/data/node -name 'input_*.pb' -size -4k | sort | awk 'NR % 40 == 1' |
    while read -r p; do
      cp "$p" "$seeds/tensor_proto/$(basename "$(dirname "$(dirname "$p")")")_$(basename "$p")"
    done
fi

# Build specs.
for t in "$here"/build_spec/*.textproto; do
  encode kiln.v1.BuildSpec "$root/proto" "$root/proto/kiln/v1/service.proto" < "$t" \
    > "$seeds/build_spec/$(basename "$t" .textproto).pb"
done
# The policy seeds as policy_text of a valid spec too.
sha=$(printf 'a%.0s' $(seq 64))
for p in "$here"/policy/*; do
  python3 - "$p" "$sha" > "$seeds/build_spec/policy_$(basename "$p").textproto" <<'EOF'
import sys
text = open(sys.argv[1], 'rb').read()
esc = ''.join('\\%03o' % b for b in text)
print('model_size: 100 model_sha256: "%s" policy_text: "%s"' % (sys.argv[2], esc))
EOF
  encode kiln.v1.BuildSpec "$root/proto" "$root/proto/kiln/v1/service.proto" \
    < "$seeds/build_spec/policy_$(basename "$p").textproto" \
    > "$seeds/build_spec/policy_$(basename "$p").pb"
  rm "$seeds/build_spec/policy_$(basename "$p").textproto"
done

for h in "$seeds"/*; do
  echo "make_corpus: $(basename "$h"): $(find "$h" -type f | wc -l) seeds," \
    "$(du -sk "$h" | cut -f1) KiB"
done
