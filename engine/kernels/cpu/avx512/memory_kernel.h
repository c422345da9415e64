// The kernel class shared by the fast data-movement kernels (memory_ops.cc,
// memory_join_ops.cc): a function that moves the bytes when it plans for the run, the node's
// reference kernel when it does not.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::avx512 {

/// Whether elements of `dt` are moved by the memory kernels (1, 2, 4 or 8 bytes).
inline bool Movable(DataType dt) {
  const int64_t s = DataTypeSize(dt);
  return s == 1 || s == 2 || s == 4 || s == 8;
}

/// A fast run: true when it ran the node, false to have the reference kernel run it instead
/// (decided before it asks for any output). Arguments the reference reports as errors answer
/// false, so the errors and their messages are the reference's.
using MemoryFn = absl::StatusOr<bool> (*)(const ir::Node&, KernelContext&);

/// The kernel of one MemoryFn, with the node's reference kernel for what it leaves.
template <MemoryFn Fn>
class MemoryKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new MemoryKernel(node, std::move(reference)));
  }
  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(bool done, Fn(node_, ctx));
    return done ? absl::OkStatus() : reference_->Run(ctx);
  }

 private:
  MemoryKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}
  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

/// Input `i` as int64s; false when it is absent or not a 0-/1-D int32/int64 tensor.
inline bool ReadOptionalInts(const ir::Node& node, KernelContext& ctx, int i,
                             std::vector<int64_t>* v) {
  const ir::Tensor* t = ctx.input(i);
  if (t == nullptr) return false;
  auto r = ref::ReadInts(node, *t, "input");
  if (!r.ok()) return false;
  *v = *std::move(r);
  return true;
}

}  // namespace kiln::kernels::cpu::avx512
