// Type and shape inference of LinearAttention, CausalConvWithState and RotaryEmbedding
// (shape_inference_stateful.h). Checks only what the types and static dims decide; the kernels
// check the rest at run time.
#include "engine/import/shape_inference_stateful.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;

DataType TypeOf(const Node& n, int i) {
  const Value* v = n.input(i);
  return v ? v->dtype : DataType::kUndefined;
}

// Every present input in `inputs` has input 0's dtype, which is a floating type of the op.
absl::Status CheckSameFloat(const Node& n, std::initializer_list<int> inputs) {
  const DataType t0 = TypeOf(n, 0);
  if (t0 == DataType::kUndefined) return absl::OkStatus();
  if (t0 != DataType::kF32 && t0 != DataType::kF16 && t0 != DataType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), " input 0 is ", DataTypeOnnxName(t0),
                                                   "; float, float16 or bfloat16 expected"));
  }
  for (int i : inputs) {
    const DataType t = TypeOf(n, i);
    if (t != DataType::kUndefined && t != t0) {
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " input ", i, " is ",
                                                     DataTypeOnnxName(t), " but input 0 is ",
                                                     DataTypeOnnxName(t0)));
    }
  }
  return absl::OkStatus();
}

// Dim `d` of input `i` (unknown when the rank is unknown or differs from `rank`).
Dim InDim(const Node& n, int i, int rank, int d) {
  const Value* v = n.input(i);
  if (!v || !v->shape.rank_known || v->shape.rank() != rank) return Dim{};
  return v->shape.dims[d];
}

Shape RankedOf(std::initializer_list<Dim> dims) {
  Shape s;
  s.rank_known = true;
  s.dims.assign(dims.begin(), dims.end());
  return s;
}

}  // namespace

bool IsStatefulOp(ir::OpType op) {
  return op == OpType::kLinearAttention || op == OpType::kCausalConvWithState ||
         op == OpType::kRotaryEmbedding;
}

absl::StatusOr<DataType> StatefulOutputType(const ir::Node& n, int k) {
  switch (n.op) {
    case OpType::kLinearAttention: {
      RETURN_IF_ERROR(CheckSameFloat(n, {1, 2, 4, 5}));
      // present_state has the state type S: past_state's, query's when it is omitted.
      if (k == 1 && n.input(3)) {
        const DataType s = TypeOf(n, 3);
        if (s != DataType::kUndefined && s != DataType::kF32 && s != DataType::kF16 &&
            s != DataType::kBF16) {
          return absl::InvalidArgumentError(absl::StrCat(n.Label(), " past_state is ",
                                                         DataTypeOnnxName(s),
                                                         "; float, float16 or bfloat16 expected"));
        }
        return s;
      }
      return TypeOf(n, 0);
    }
    case OpType::kCausalConvWithState:
      RETURN_IF_ERROR(CheckSameFloat(n, {1, 2, 3}));
      return TypeOf(n, 0);
    case OpType::kRotaryEmbedding:
      RETURN_IF_ERROR(CheckSameFloat(n, {1, 2}));
      if (n.input(3) && TypeOf(n, 3) != DataType::kUndefined && TypeOf(n, 3) != DataType::kI64) {
        return absl::InvalidArgumentError(absl::StrCat(
            n.Label(), " position_ids is ", DataTypeOnnxName(TypeOf(n, 3)), "; int64 expected"));
      }
      return TypeOf(n, 0);
    default:
      return absl::InternalError(absl::StrCat(n.Label(), " is not a stateful op"));
  }
}

ir::Shape StatefulOutputShape(const ir::Node& n, int k) {
  switch (n.op) {
    case OpType::kLinearAttention: {
      const int64_t hq = n.GetInt("q_num_heads", 0), hkv = n.GetInt("kv_num_heads", 0);
      const Dim batch = InDim(n, 0, 3, 0);
      const Dim q_last = InDim(n, 0, 3, 2), v_last = InDim(n, 2, 3, 2);
      Dim dk, dv;
      if (hq > 0 && q_last.is_static() && q_last.value % hq == 0) {
        dk = Dim::Static(q_last.value / hq);
      }
      if (hkv > 0 && v_last.is_static() && v_last.value % hkv == 0) {
        dv = Dim::Static(v_last.value / hkv);
      }
      if (k == 0) {
        Dim width = dv.is_static() && hq > 0 ? Dim::Static(hq * dv.value) : Dim{};
        return RankedOf({batch, InDim(n, 0, 3, 1), width});
      }
      return RankedOf({batch, hkv > 0 ? Dim::Static(hkv) : Dim{}, dk, dv});
    }
    case OpType::kCausalConvWithState: {
      const Value* x = n.input(0);
      if (k == 0) return x ? x->shape : Shape::Unknown();
      const Dim kernel = InDim(n, 1, 3, 2);
      return RankedOf(
          {InDim(n, 0, 3, 0), InDim(n, 0, 3, 1),
           kernel.is_static() && kernel.value >= 1 ? Dim::Static(kernel.value - 1) : Dim{}});
    }
    case OpType::kRotaryEmbedding: {
      const Value* x = n.input(0);
      return x && k == 0 ? x->shape : Shape::Unknown();
    }
    default:
      return Shape::Unknown();
  }
}

}  // namespace kiln::import
