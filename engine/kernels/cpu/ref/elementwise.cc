// Elementwise family entry point and the non-template half of the shared machinery
// (elementwise_loops.h): the broadcast plan and the dtype check.
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace ew {

absl::StatusOr<BroadcastPlan> BroadcastPlan::Make(const ir::Node& node,
                                                  const std::vector<const ir::Tensor*>& inputs) {
  BroadcastPlan p;
  p.num_inputs_ = static_cast<int>(inputs.size());
  for (const ir::Tensor* t : inputs) {
    ASSIGN_OR_RETURN(p.out_dims_, BroadcastShapes(node, p.out_dims_, t->dims()));
  }
  p.num_elements_ = ir::NumElementsOf(p.out_dims_);
  if (p.num_elements_ < 0) {
    return InvalidNode(node, "output shape ", ir::DimsToString(p.out_dims_), " is too large");
  }

  // Per-input strides over the output dims, then keep only output dims larger than 1.
  const int full_rank = static_cast<int>(p.out_dims_.size());
  std::vector<std::vector<int64_t>> full(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    full[k] = BroadcastStrides(inputs[k]->dims(), p.out_dims_);
  }
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(inputs.size());
  for (int d = 0; d < full_rank; ++d) {
    if (p.out_dims_[d] == 1) continue;
    // Merge into the previous kept dim when every input walks both as one contiguous range.
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < inputs.size(); ++k) {
      merge = strides[k].back() == full[k][d] * p.out_dims_[d];
    }
    if (merge) {
      dims.back() *= p.out_dims_[d];
      for (size_t k = 0; k < inputs.size(); ++k) strides[k].back() = full[k][d];
    } else {
      dims.push_back(p.out_dims_[d]);
      for (size_t k = 0; k < inputs.size(); ++k) strides[k].push_back(full[k][d]);
    }
  }
  if (dims.empty()) {  // scalar (or all-ones) output: one run of one element
    dims.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  p.dims_ = dims;
  p.strides_.reserve(inputs.size() * dims.size());
  for (const auto& s : strides) p.strides_.insert(p.strides_.end(), s.begin(), s.end());
  return p;
}

absl::Status RequireSameDtype(const ir::Node& node, const ir::Tensor& first, const ir::Tensor& t,
                              int i) {
  if (t.dtype() != first.dtype()) {
    return InvalidNode(node, "input ", i, " has dtype ", DataTypeOnnxName(t.dtype()),
                       " but input 0 has ", DataTypeOnnxName(first.dtype()));
  }
  return absl::OkStatus();
}

}  // namespace ew

void RegisterElementwise(Registry& r) {
  ew::RegisterUnaryMath(r);
  ew::RegisterActivations(r);
  ew::RegisterBinary(r);
  ew::RegisterVariadic(r);
}

}  // namespace kiln::kernels::cpu::ref
