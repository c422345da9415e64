// Transpose of 4- and 2-byte elements: few-row batched transposes (the layout pass's NCHW to NHWC
// of an image's colour planes) on TransposeFewRows32 / TransposeFewRows16, other batched 2-D
// transposes (between NHWC and NCHW activations) on TransposeTiles32 / TransposeTiles16
// (transpose.h), a permutation that moves only axes of size 1 as a copy; every other Transpose on
// the reference kernel. Bits are moved, never converted: the reference's result exactly.
#include <array>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/avx512/transpose.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

class TransposeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new TransposeKernel(node, std::move(reference)));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const int64_t size = x == nullptr ? 0 : DataTypeSize(x->dtype());
    if (size != 4 && size != 2) return reference_->Run(ctx);
    if (x->dims() != dims_) Plan(x->dims());
    if (plan_ == kReference) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims_));
    if (plan_ == kCopy) {
      std::memcpy(y->raw_data(), x->raw_data(), x->num_elements() * size);
    } else if (plan_ == kTiles) {
      (size == 4 ? TransposeTiles32 : TransposeTiles16)(x->raw_data(), y->raw_data(), rows_[0],
                                                        rows_[1], rows_[2]);
    } else if (size == 4) {
      TransposeFewRows32(x->raw_data(), y->raw_data(), rows_[0], rows_[1], rows_[2]);
    } else {
      TransposeFewRows16(x->raw_data(), y->raw_data(), rows_[0], rows_[1], rows_[2]);
    }
    return absl::OkStatus();
  }

 private:
  enum PlanKind { kReference, kCopy, kFewRows, kTiles };

  TransposeKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  // How X of `dims` is transposed, decided once per shape (not on every run).
  void Plan(const std::vector<int64_t>& dims) {
    dims_ = dims;
    plan_ = kReference;
    const int rank = static_cast<int>(dims.size());
    std::vector<int64_t> perm = node_.GetInts("perm");
    if (perm.empty()) {
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    }
    // The reference checks perm and reports what is wrong with it.
    if (static_cast<int>(perm.size()) != rank) return;
    std::vector<bool> seen(rank, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p]) return;
      seen[p] = true;
    }
    out_dims_.resize(rank);
    for (int i = 0; i < rank; ++i) out_dims_[i] = dims[perm[i]];
    // Only axes of size 1 move (NHWC [N, 1, 1, C] to NCHW): the same bytes.
    int64_t prev = -1;
    bool moves = false;
    for (int64_t p : perm) {
      if (dims[p] == 1) continue;
      moves |= p < prev;
      prev = p;
    }
    if (!moves) {
      plan_ = kCopy;
      return;
    }
    const auto t = ref::AsBatchedTranspose(dims, perm);
    if (t && (*t)[1] >= kMinFewRows && (*t)[1] * (*t)[2] < (int64_t{1} << 31)) {
      plan_ = (*t)[1] <= kMaxFewRows ? kFewRows : kTiles;
      rows_ = *t;
    }
  }

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  std::vector<int64_t> dims_ = {-1}, out_dims_;  // dims_: the shape planned for (none yet)
  PlanKind plan_ = kReference;
  std::array<int64_t, 3> rows_ = {};  // {batch, rows, cols} of kFewRows and kTiles
};

}  // namespace

void RegisterTranspose(Registry& r) {
  r.Add(KernelDef{ir::OpType::kTranspose,
                  {DataType::kF32, DataType::kI32, DataType::kU32, DataType::kF16, DataType::kBF16,
                   DataType::kI16, DataType::kU16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &TransposeKernel::Create});
}

}  // namespace kiln::kernels::cpu::avx512
