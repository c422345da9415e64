// Output dtypes of the ops whose output type is not input 0's among the ops of the other ONNX
// domains (ai.onnx.ml, ai.onnx.preview, ai.onnx.preview.training) and of Unique and
// TfIdfVectorizer, and the type inference of FlexAttention's modifier subgraphs.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// The dtype of output `k` of `n` when `n` is one of the ops above; nullopt for other ops (the
/// caller's own rules apply). Errors name the node: string keys or values of a LabelEncoder are
/// Unimplemented ("unsupported dtype string").
absl::StatusOr<std::optional<DataType>> DomainOpOutputType(const ir::Node& n, int k);

/// The shape of output `k` of `n` when `n` is one of the ops above whose shape this file
/// infers; nullopt for other ops. Unique's unique count is a value-dependent (unknown) dim,
/// whatever the model declares: the build must not take a declared count for a static one.
std::optional<ir::Shape> DomainOpShape(const ir::Node& n, int k);

/// For a FlexAttention node: types its score_mod / prob_mod subgraphs (their first input is the
/// scores or probs tensor [B, Hq, L, S] of the softmax precision, the rest the node's captured
/// inputs) and infers their nodes. OK for other ops and for a node without subgraphs.
absl::Status InferFlexAttentionModifiers(ir::Node& n);

}  // namespace kiln::import
