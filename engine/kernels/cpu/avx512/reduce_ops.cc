// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare,
// ReduceLogSum and ReduceLogSumExp on float, float16 and bfloat16 (reduce.h), planned from the
// run-time dims and axes (attribute or input, keepdims, noop_with_empty_axes as the reference).
// Once size-1 dims are dropped, reduced axes that form one run make the input [outer, n, inner]
// (a reduced innermost axis, an outer or a middle one); reduced axes apart (ReduceMean over axes
// 1 and 3, say) are reduced run by run, the innermost first, each pass folding fp32 partial
// results of the one before (sums of partial sums, maxima of maxima). fp32 accumulation as the
// reference, one rounding to the output type; sums and products differ from the reference only
// by summation order, Max and Min are exact. Anything else (other dtypes, LogSumExp over axes
// apart, empty reductions, no reduced axis, bad axes) goes to the reference kernel, which also
// reports the errors.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/reduce.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

using ir::OpType;

bool IsFloatType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

// The fold each op accumulates (LogSumExp: its first pass, the maxima).
RedFn FoldOf(OpType op) {
  switch (op) {
    case OpType::kReduceSumSquare:
    case OpType::kReduceL2:
      return RedFn::kSumSquare;
    case OpType::kReduceL1:
      return RedFn::kAbsSum;
    case OpType::kReduceMax:
    case OpType::kReduceLogSumExp:
      return RedFn::kMax;
    case OpType::kReduceMin:
      return RedFn::kMin;
    case OpType::kReduceProd:
      return RedFn::kProd;
    default:
      return RedFn::kSum;  // Sum, Mean, LogSum
  }
}

// The fold of a later pass over partial results of `first`: sums of squares and of absolute
// values are summed, maxima, minima and products folded as they are.
RedFn LaterFold(RedFn first) {
  return first == RedFn::kSumSquare || first == RedFn::kAbsSum ? RedFn::kSum : first;
}

// A run of consecutive dims (size-1 ones left out), all reduced or all kept: their product.
struct AxisRun {
  int64_t extent;
  bool reduced;
};

class ReduceKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    // The reference kernel checks the attributes with its own errors and runs what is left here.
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new ReduceKernel(node, std::move(reference)));
  }

  static bool Supports(const ir::Node& node) {
    return node.num_inputs() >= 1 && node.inputs[0] && IsFloatType(node.inputs[0]->dtype);
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr || !IsFloatType(x->dtype())) return reference_->Run(ctx);
    // Axes as the reference reads them: ReduceSum takes them as an input from opset 13, the
    // others from 18.
    const int axes_input_since = node_.op == OpType::kReduceSum ? 13 : 18;
    std::vector<int64_t> axes;
    bool noop = false;
    if (node_.since_version >= axes_input_since) {
      noop = node_.GetInt("noop_with_empty_axes", 0) != 0;
      const ir::Tensor* a = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
      if (a != nullptr) {
        absl::StatusOr<std::vector<int64_t>> read = ref::ReadInts(node_, *a, "axes");
        if (!read.ok()) return reference_->Run(ctx);  // its error
        axes = *std::move(read);
      }
    } else {
      axes = node_.GetInts("axes");
    }
    const int rank = x->rank();
    std::vector<bool> reduced(rank, axes.empty() && !noop);
    for (int64_t a : axes) {
      if (a < -rank || a >= rank || reduced[a < 0 ? a + rank : a]) return reference_->Run(ctx);
      reduced[a < 0 ? a + rank : a] = true;
    }
    // The dims, size-1 ones dropped, as runs of kept and of reduced axes.
    std::vector<AxisRun> runs;
    for (int d = 0; d < rank; ++d) {
      const int64_t e = x->dim(d);
      if (e == 0) return reference_->Run(ctx);  // empty input or empty reduction
      if (e == 1) continue;
      if (!runs.empty() && runs.back().reduced == reduced[d]) {
        runs.back().extent *= e;
      } else {
        runs.push_back({e, static_cast<bool>(reduced[d])});
      }
    }
    int reduced_runs = 0;
    for (const AxisRun& r : runs) reduced_runs += r.reduced;
    // Nothing reduced (noop, or only size-1 axes): the reference's elementwise pass.
    if (reduced_runs == 0) return reference_->Run(ctx);
    // LogSumExp's second pass reads x against the maxima of one run.
    if (reduced_runs > 1 && node_.op == OpType::kReduceLogSumExp) return reference_->Run(ctx);
    std::vector<int64_t> out_dims;
    const bool keepdims = node_.GetInt("keepdims", 1) != 0;
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d]) {
        out_dims.push_back(x->dim(d));
      } else if (keepdims) {
        out_dims.push_back(1);
      }
    }
    const DataType t = x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, out_dims));
    int64_t count = 1, n = 1;
    for (const AxisRun& r : runs) (r.reduced ? n : count) *= r.extent;
    // Locals, not members: sessions may run one kernel object at once.
    std::vector<float> states(t == DataType::kF32 ? 0 : count), partial[2];
    float* acc = t == DataType::kF32 ? y->data<float>() : states.data();
    // Run by run from the innermost reduced one: x viewed as [outer, n, inner] around it, then
    // the fp32 partial results with that run gone, until the last pass writes `acc`.
    const void* src = x->raw_data();
    DataType src_type = t;
    RedFn fn = FoldOf(node_.op);
    int64_t outer = 1, inner = 1;  // the last pass's layout (the only one's for LogSumExp)
    for (int pass = 0; reduced_runs > 0; ++pass) {
      size_t j = runs.size();
      while (!runs[--j].reduced) {
      }
      outer = 1;
      inner = 1;
      for (size_t i = 0; i < runs.size(); ++i) {
        if (i != j) (i < j ? outer : inner) *= runs[i].extent;
      }
      float* dst = acc;
      if (--reduced_runs > 0) {
        partial[pass % 2].resize(outer * inner);
        dst = partial[pass % 2].data();
      }
      ReduceAxis(fn, src_type, src, outer, runs[j].extent, inner, dst);
      // The run goes; kept runs on both sides of it merge.
      runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(j));
      if (j > 0 && j < runs.size() && !runs[j - 1].reduced && !runs[j].reduced) {
        runs[j - 1].extent *= runs[j].extent;
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(j));
      }
      src = dst;
      src_type = DataType::kF32;
      fn = LaterFold(fn);
    }
    Finish(x->raw_data(), t, outer, n, inner, acc);
    if (t == DataType::kF16) FloatToHalf(acc, y->data<uint16_t>(), count);
    if (t == DataType::kBF16) FloatToBf16(acc, y->data<uint16_t>(), count);
    return absl::OkStatus();
  }

 private:
  ReduceKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  // The reference functors' Final on each fp32 state: Mean divides by n; L2 and LogSum take the
  // square root and log in double, rounded once to fp32; LogSumExp is log(sum) + max with the
  // sum of exp(x - max) from a second pass (where the max is not finite it is the answer: -Inf
  // for an all -Inf slice, +Inf once +Inf is seen, NaN for a NaN, as the reference's online
  // form gives).
  void Finish(const void* x, DataType t, int64_t outer, int64_t n, int64_t inner, float* acc) {
    const int64_t count = outer * inner;
    switch (node_.op) {
      case OpType::kReduceMean:
        for (int64_t i = 0; i < count; ++i) acc[i] /= static_cast<float>(n);
        break;
      case OpType::kReduceL2:
        for (int64_t i = 0; i < count; ++i) {
          acc[i] = static_cast<float>(std::sqrt(static_cast<double>(acc[i])));
        }
        break;
      case OpType::kReduceLogSum:
        for (int64_t i = 0; i < count; ++i) {
          acc[i] = static_cast<float>(std::log(static_cast<double>(acc[i])));
        }
        break;
      case OpType::kReduceLogSumExp: {
        std::vector<float> sums(count);
        ReduceSumExpShifted(t, x, outer, n, inner, acc, sums.data());
        for (int64_t i = 0; i < count; ++i) {
          if (std::isfinite(acc[i])) {
            acc[i] = static_cast<float>(std::log(sums[i]) + acc[i]);
          }
        }
        break;
      }
      default:
        break;
    }
  }

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterReduceOps(Registry& r) {
  for (OpType op : {OpType::kReduceSum, OpType::kReduceMean, OpType::kReduceMax, OpType::kReduceMin,
                    OpType::kReduceProd, OpType::kReduceL1, OpType::kReduceL2,
                    OpType::kReduceSumSquare, OpType::kReduceLogSum, OpType::kReduceLogSumExp}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &ReduceKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &ReduceKernel::Supports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
