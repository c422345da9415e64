// kiln_tensor_diff A.pb B.pb [--atol X]: compares two serialized ONNX tensors and prints max/mean
// absolute difference; exits 1 if shapes or dtypes differ or max abs diff > atol.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--atol")) {
    std::cerr << "usage: kiln_tensor_diff A.pb B.pb [--atol X]\n";
    return 2;
  }
  double atol = argc == 5 ? std::atof(argv[4]) : 1e-4;
  ir::Tensor t[2];
  for (int i = 0; i < 2; ++i) {
    auto bytes = import::ReadFile(argv[1 + i], int64_t{1} << 34);
    if (!bytes.ok()) {
      std::cerr << "kiln_tensor_diff: " << bytes.status().message() << "\n";
      return 1;
    }
    auto parsed = import::ParseTensorProto(*bytes, argv[1 + i]);
    if (!parsed.ok()) {
      std::cerr << "kiln_tensor_diff: " << parsed.status().message() << "\n";
      return 1;
    }
    t[i] = *parsed;
  }
  if (t[0].dtype() != t[1].dtype() || t[0].dims() != t[1].dims()) {
    std::cout << absl::StrFormat("differ: %s%s vs %s%s\n", DataTypeOnnxName(t[0].dtype()),
                                 ir::DimsToString(t[0].dims()), DataTypeOnnxName(t[1].dtype()),
                                 ir::DimsToString(t[1].dims()));
    return 1;
  }
  double max_abs = 0, sum = 0;
  for (int64_t i = 0; i < t[0].num_elements(); ++i) {
    double d = std::fabs(ir::ElementAsDouble(t[0], i) - ir::ElementAsDouble(t[1], i));
    if (std::isnan(d)) d = INFINITY;
    max_abs = std::max(max_abs, d);
    sum += d;
  }
  double mean = t[0].num_elements() ? sum / t[0].num_elements() : 0;
  bool ok = max_abs <= atol;
  std::cout << absl::StrFormat("%s%s: max |a-b| = %.3g, mean |a-b| = %.3g -> %s (atol %.0e)\n",
                               DataTypeOnnxName(t[0].dtype()), ir::DimsToString(t[0].dims()),
                               max_abs, mean, ok ? "match" : "MISMATCH", atol);
  return ok ? 0 : 1;
}
