// The op enum, generated from ops.def (the one op list), with each op's ONNX domain.
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace kiln::ir {

/// Ops Kiln implements; names equal ONNX op types (of the default domain, or of the domain
/// OpDomain gives). Op names are unique across domains.
enum class OpType : int {
#define KILN_OP(name) k##name,
#include "engine/ir/ops.def"
#undef KILN_OP
  kNumOps
};

/// ONNX op type name of `op` ("Conv", "LabelEncoder").
const char* OpName(OpType op);

/// ONNX domain of `op`: "" for the default domain (and Kiln's internal ops), else the domain's
/// name ("ai.onnx.ml", "ai.onnx.preview.training", ...).
const char* OpDomain(OpType op);

/// Canonical form of an ONNX domain name: "ai.onnx" (the default domain's alias) becomes "".
absl::string_view CanonicalDomain(absl::string_view domain);

/// Looks up an op by ONNX domain ("" or "ai.onnx" for the default one) and op type; nullopt if
/// Kiln does not implement it in that domain.
std::optional<OpType> OpFromName(absl::string_view domain, absl::string_view name);

/// Looks up an op by its name alone, whatever its domain (names are unique across domains): for
/// names Kiln wrote itself (engine blobs, policy selectors). nullopt if Kiln has no such op.
std::optional<OpType> OpFromName(absl::string_view name);

}  // namespace kiln::ir
