#include "engine/ir/op_type.h"

#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kiln::ir {
namespace {

constexpr int kCount = static_cast<int>(OpType::kNumOps);

constexpr std::array<const char*, kCount> kNames = {
#define KILN_OP(name) #name,
#include "engine/ir/ops.def"
#undef KILN_OP
};

constexpr std::array<const char*, kCount> kDomains = {
#define KILN_OP(name) "",
#define KILN_DOMAIN_OP(domain, name) #domain,
#include "engine/ir/ops.def"
#undef KILN_DOMAIN_OP
#undef KILN_OP
};

bool Valid(OpType op) { return static_cast<int>(op) >= 0 && static_cast<int>(op) < kCount; }

}  // namespace

const char* OpName(OpType op) { return Valid(op) ? kNames[static_cast<int>(op)] : "?"; }

const char* OpDomain(OpType op) { return Valid(op) ? kDomains[static_cast<int>(op)] : ""; }

absl::string_view CanonicalDomain(absl::string_view domain) {
  return domain == "ai.onnx" ? absl::string_view() : domain;
}

std::optional<OpType> OpFromName(absl::string_view name) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<absl::string_view, OpType>();
    for (int i = 0; i < kCount; ++i) (*m)[kNames[i]] = static_cast<OpType>(i);
    return m;
  }();
  auto it = index->find(name);
  if (it == index->end()) return std::nullopt;
  return it->second;
}

std::optional<OpType> OpFromName(absl::string_view domain, absl::string_view name) {
  std::optional<OpType> op = OpFromName(name);
  if (!op || CanonicalDomain(domain) != kDomains[static_cast<int>(*op)]) return std::nullopt;
  return op;
}

}  // namespace kiln::ir
