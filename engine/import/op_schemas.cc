#include "engine/import/op_schemas.h"

#include <vector>

#include "absl/container/flat_hash_set.h"

namespace kiln::import {
namespace {

const std::vector<std::vector<OpVersion>>& VersionsByOp() {
  static const auto* table = [] {
    auto* t = new std::vector<std::vector<OpVersion>>(static_cast<int>(ir::OpType::kNumOps));
#define KILN_OP_VERSION(name, since, min_in, max_in, min_out, max_out) \
  (*t)[static_cast<int>(ir::OpType::k##name)].push_back(               \
      OpVersion{ir::OpType::k##name, since, min_in, max_in, min_out, max_out});
#define KILN_UNSUPPORTED_OP(name)
#include "engine/import/onnx_op_table.inc"
#undef KILN_OP_VERSION
#undef KILN_UNSUPPORTED_OP
    return t;
  }();
  return *table;
}

}  // namespace

std::optional<OpVersion> ResolveOpVersion(ir::OpType op, int opset) {
  const auto& versions = VersionsByOp()[static_cast<int>(op)];
  std::optional<OpVersion> best;
  for (const OpVersion& v : versions) {  // rows are sorted by since_version
    if (v.since_version <= opset) best = v;
  }
  return best;
}

bool IsKnownUnsupportedOp(absl::string_view name) {
  static const auto* names = new absl::flat_hash_set<absl::string_view>{
#define KILN_OP_VERSION(...)
#define KILN_UNSUPPORTED_OP(name) #name,
#include "engine/import/onnx_op_table.inc"
#undef KILN_OP_VERSION
#undef KILN_UNSUPPORTED_OP
  };
  return names->contains(name);
}

}  // namespace kiln::import
