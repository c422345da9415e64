// Kinds of values (ir::ValueKind) through the graph: the ops of sequences and optionals
// (SequenceConstruct, SequenceAt, Optional, OptionalGetElement, ...) take and make them, Identity
// passes any kind on, If and Loop carry them (shape_inference_control_flow.h); every other op
// takes and makes tensors only, so a sequence reaching Add is an import error naming the node
// rather than a kernel reading a buffer that is not there.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// The kind both `a` and `b` fit: equal kinds, or the optional one when one is the optional form
/// of the other (a sequence flows where an optional sequence is expected). Nullopt otherwise.
std::optional<ir::ValueKind> MergeKinds(ir::ValueKind a, ir::ValueKind b);

/// Checks the kinds of `n`'s inputs against what its op takes (containers only where the op
/// takes them; tensors elsewhere). Errors name the node, the input and both kinds.
absl::Status CheckInputKinds(const ir::Node& n);

/// The kind of output `k` of `n` (not If / Loop / SequenceMap, whose kinds come from their
/// subgraphs).
ir::ValueKind OutputKind(const ir::Node& n, int k);

/// Gives output `k` of `n` the kind `kind`; a declared kind must fit it (MergeKinds), and then
/// stays.
absl::Status SetOutputKind(ir::Node& n, int k, ir::ValueKind kind);

}  // namespace kiln::import
