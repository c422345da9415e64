// The op enum, generated from ops.def (the one op list).
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace kiln::ir {

/// Ops Kiln implements; names equal ONNX op types of the default domain.
enum class OpType : int {
#define KILN_OP(name) k##name,
#define KILN_INTERNAL_OP(name) KILN_OP(name)
#include "engine/ir/ops.def"
#undef KILN_INTERNAL_OP
#undef KILN_OP
  kNumOps
};

/// ONNX op type name of `op` ("Conv").
const char* OpName(OpType op);

/// Looks up an op by its ONNX op type; nullopt if Kiln does not implement it.
std::optional<OpType> OpFromName(absl::string_view name);

}  // namespace kiln::ir
