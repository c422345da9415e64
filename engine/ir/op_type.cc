#include "engine/ir/op_type.h"

#include <array>

#include "absl/container/flat_hash_map.h"

namespace kiln::ir {
namespace {

constexpr std::array<const char*, static_cast<int>(OpType::kNumOps)> kNames = {
#define KILN_OP(name) #name,
#define KILN_INTERNAL_OP(name) KILN_OP(name)
#include "engine/ir/ops.def"
#undef KILN_INTERNAL_OP
#undef KILN_OP
};

}  // namespace

const char* OpName(OpType op) {
  int i = static_cast<int>(op);
  return i >= 0 && i < static_cast<int>(kNames.size()) ? kNames[i] : "?";
}

std::optional<OpType> OpFromName(absl::string_view name) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<absl::string_view, OpType>();
    for (size_t i = 0; i < kNames.size(); ++i) (*m)[kNames[i]] = static_cast<OpType>(i);
    return m;
  }();
  auto it = index->find(name);
  if (it == index->end()) return std::nullopt;
  return it->second;
}

}  // namespace kiln::ir
