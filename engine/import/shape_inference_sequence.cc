#include "engine/import/shape_inference_sequence.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kiln::import {
namespace {

using ir::Node;
using ir::OpType;
using ir::ValueKind;

// What an input position accepts.
enum class Accepts { kTensor, kSequence, kOptional, kAny, kTensorOrSequence, kNonOptional };

bool Fits(Accepts a, ValueKind k) {
  switch (a) {
    case Accepts::kTensor:
      return k == ValueKind::kTensor;
    case Accepts::kSequence:
      return k == ValueKind::kSequence;
    case Accepts::kOptional:
      return ir::IsOptionalKind(k);
    case Accepts::kAny:
      return true;
    case Accepts::kTensorOrSequence:
    case Accepts::kNonOptional:
      return !ir::IsOptionalKind(k);
  }
  return false;
}

const char* AcceptsName(Accepts a) {
  switch (a) {
    case Accepts::kTensor:
      return "a tensor";
    case Accepts::kSequence:
      return "a sequence";
    case Accepts::kOptional:
      return "an optional";
    case Accepts::kAny:
      return "any value";
    case Accepts::kTensorOrSequence:
    case Accepts::kNonOptional:
      return "a tensor or a sequence";
  }
  return "?";
}

// What input `i` of `n` accepts.
Accepts InputAccepts(const Node& n, int i) {
  switch (n.op) {
    case OpType::kSequenceInsert:
    case OpType::kSequenceErase:
    case OpType::kSequenceAt:
      return i == 0 ? Accepts::kSequence : Accepts::kTensor;
    case OpType::kSequenceLength:
    case OpType::kConcatFromSequence:
      return Accepts::kSequence;
    case OpType::kSequenceMap:  // the first is a sequence; the others sequences or tensors
      return i == 0 ? Accepts::kSequence : Accepts::kTensorOrSequence;
    case OpType::kOptional:
      return Accepts::kNonOptional;
    case OpType::kOptionalHasElement:
    case OpType::kOptionalGetElement:
      // Opset 18 also takes a tensor or a sequence (always "present").
      return n.since_version >= 18 ? Accepts::kAny : Accepts::kOptional;
    case OpType::kIdentity:
    case OpType::kIf:
    case OpType::kLoop:
      return Accepts::kAny;
    default:
      return Accepts::kTensor;
  }
}

}  // namespace

std::optional<ValueKind> MergeKinds(ValueKind a, ValueKind b) {
  if (a == b) return a;
  if (ir::ElementKind(a) != ir::ElementKind(b)) return std::nullopt;
  // Same element kind, one of them optional.
  return ir::IsOptionalKind(a) ? a : b;
}

absl::Status CheckInputKinds(const Node& n) {
  for (int i = 0; i < n.num_inputs(); ++i) {
    const ir::Value* v = n.input(i);
    if (v == nullptr) continue;
    const Accepts a = InputAccepts(n, i);
    if (!Fits(a, v->kind)) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " input ", i, " '", v->name,
                                                     "' is ", ir::ValueTypeName(v->kind, v->dtype),
                                                     "; the op takes ", AcceptsName(a), " there"));
    }
  }
  return absl::OkStatus();
}

ValueKind OutputKind(const Node& n, int k) {
  (void)k;
  const ir::Value* x = n.input(0);
  switch (n.op) {
    case OpType::kSequenceEmpty:
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert:
    case OpType::kSequenceErase:
    case OpType::kSplitToSequence:
    case OpType::kSequenceMap:
      return ValueKind::kSequence;
    case OpType::kOptional: {
      if (x != nullptr) {
        return ir::ElementKind(x->kind) == ValueKind::kSequence ? ValueKind::kOptionalSequence
                                                                : ValueKind::kOptionalTensor;
      }
      const std::vector<int64_t> type = n.GetInts("type");  // {ValueKind, dtype} (import)
      return !type.empty() &&
                     ir::ElementKind(static_cast<ValueKind>(type[0])) == ValueKind::kSequence
                 ? ValueKind::kOptionalSequence
                 : ValueKind::kOptionalTensor;
    }
    case OpType::kOptionalGetElement:
      return x != nullptr ? ir::ElementKind(x->kind) : ValueKind::kTensor;
    case OpType::kIdentity:
      return x != nullptr ? x->kind : ValueKind::kTensor;
    default:
      return ValueKind::kTensor;
  }
}

absl::Status SetOutputKind(Node& n, int k, ValueKind kind) {
  ir::Value* out = n.outputs[k];
  if (out == nullptr) return absl::OkStatus();
  // A value without a declared dtype declared no kind either.
  if (out->dtype == DataType::kUndefined) {
    out->kind = kind;
    return absl::OkStatus();
  }
  // A declaration that fits wins: a Loop output declared seq(tensor) whose carried value starts
  // as an optional sequence is a sequence (the model says it is never empty).
  if (!MergeKinds(out->kind, kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " output ", k, " '", out->name, "' is declared ",
                     ir::ValueTypeName(out->kind, out->dtype), " but the op produces ",
                     ir::ValueTypeName(kind, out->dtype)));
  }
  return absl::OkStatus();
}

}  // namespace kiln::import
