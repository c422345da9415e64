// What the kernels of ops with subgraphs (If, Loop, Scan, SequenceMap) share: the count of
// captured inputs the import appended, the check of their subgraph attributes, and the runner
// of a subgraph.
#pragma once

#include <initializer_list>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels::cpu::ref {

/// How many of the node's last inputs are values its subgraphs capture (ir::kCapturedInputsAttr).
inline int Captured(const ir::Node& n) {
  return static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
}

/// Checks that `n` has each subgraph attribute of `attrs` and a sane captured-input count.
inline absl::Status CheckSubgraphs(const ir::Node& n, std::initializer_list<const char*> attrs) {
  for (const char* a : attrs) {
    const ir::Attribute* at = n.attr(a);
    if (at == nullptr || at->type != ir::Attribute::Type::kGraph) {
      return InvalidNode(n, "needs the subgraph attribute '", a, "'");
    }
  }
  const int captured = Captured(n);
  if (captured < 0 || captured > n.num_inputs()) {
    return InvalidNode(n, "attribute '", ir::kCapturedInputsAttr, "' is ", captured, " for ",
                       n.num_inputs(), " inputs");
  }
  return absl::OkStatus();
}

/// The runner of subgraph `attr`; FailedPrecondition where subgraphs cannot run (folding).
inline absl::StatusOr<SubgraphRunner*> Runner(const ir::Node& n, KernelContext& ctx,
                                              const char* attr) {
  SubgraphRunner* r = ctx.subgraph(attr);
  if (r == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(n.Label(), " subgraph '", attr, "' cannot run here"));
  }
  return r;
}

}  // namespace kiln::kernels::cpu::ref
