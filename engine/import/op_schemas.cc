#include "engine/import/op_schemas.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace kiln::import {
namespace {

const std::vector<std::vector<OpVersion>>& VersionsByOp() {
  static const auto* table = [] {
    auto* t = new std::vector<std::vector<OpVersion>>(static_cast<int>(ir::OpType::kNumOps));
#define KILN_DOMAIN(domain, max_opset)
#define KILN_OP_VERSION(name, since, min_in, max_in, min_out, max_out) \
  (*t)[static_cast<int>(ir::OpType::k##name)].push_back(               \
      OpVersion{ir::OpType::k##name, since, min_in, max_in, min_out, max_out});
#define KILN_UNSUPPORTED_OP(domain, name)
#include "engine/import/onnx_op_table.inc"
#undef KILN_DOMAIN
#undef KILN_OP_VERSION
#undef KILN_UNSUPPORTED_OP
    return t;
  }();
  return *table;
}

}  // namespace

std::optional<OpVersion> ResolveOpVersion(ir::OpType op, int opset) {
  const int i = static_cast<int>(op);
  if (i < 0 || i >= static_cast<int>(ir::OpType::kNumOps)) return std::nullopt;
  std::optional<OpVersion> best;
  for (const OpVersion& v : VersionsByOp()[i]) {  // rows are sorted by since_version
    if (v.since_version <= opset) best = v;
  }
  return best;
}

std::optional<int> MaxDomainOpset(absl::string_view domain) {
  static const auto* domains = new absl::flat_hash_map<std::string, int>{
#define KILN_DOMAIN(domain, max_opset) {domain, max_opset},
#define KILN_OP_VERSION(...)
#define KILN_UNSUPPORTED_OP(domain, name)
#include "engine/import/onnx_op_table.inc"
#undef KILN_DOMAIN
#undef KILN_OP_VERSION
#undef KILN_UNSUPPORTED_OP
  };
  auto it = domains->find(ir::CanonicalDomain(domain));
  if (it == domains->end()) return std::nullopt;
  return it->second;
}

bool IsKnownUnsupportedOp(absl::string_view domain, absl::string_view name) {
  static const auto* ops = new absl::flat_hash_set<std::pair<std::string, std::string>>{
#define KILN_DOMAIN(domain, max_opset)
#define KILN_OP_VERSION(...)
#define KILN_UNSUPPORTED_OP(domain, name) {domain, #name},
#include "engine/import/onnx_op_table.inc"
#undef KILN_DOMAIN
#undef KILN_OP_VERSION
#undef KILN_UNSUPPORTED_OP
  };
  return ops->contains(std::make_pair(std::string(ir::CanonicalDomain(domain)), std::string(name)));
}

}  // namespace kiln::import
