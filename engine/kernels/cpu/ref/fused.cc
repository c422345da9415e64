// Reference kernels of Kiln's internal fused ops, made only by the fusion pass (never imported):
//   FusedMatMul(A, B, [bias])       y = act(MatMul(A, B) + bias)
//   FusedConv(X, W, [B])            y = act(Conv(X, W, B))
//   AddLayerNorm(A, B, scale, [bias]) -> (LayerNormalization(A + B), A + B)
//
// Precision (DESIGN.md §5, fusion): each input is read in its own float dtype and converted to
// the compute type (fp32; double when any operand or output is double); everything inside runs
// in that type with no intermediate rounding, and each output is rounded once, to the dtype the
// graph gives it (node.outputs[k]->dtype, which may differ from the inputs and between
// outputs). The arithmetic itself is the shared code of the unfused ops (nn_internal.h GEMM and
// Conv, normalization_internal.h LayerNorm row, elementwise_activation.h functors), so a fused
// kernel differs from its unfused chain only in where it rounds.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/elementwise_activation.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/normalization_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---- Shared pieces: dtypes, conversion, activation epilogue --------------------------------

// Factory-time check that every output the graph types is a float type.
absl::Status CheckOutputDtypes(const ir::Node& node) {
  for (size_t k = 0; k < node.outputs.size(); ++k) {
    const ir::Value* v = node.outputs[k];
    if (v != nullptr && v->dtype != DataType::kUndefined && !IsFloating(v->dtype)) {
      return InvalidNode(node, "output ", k, " must be a float type, got ",
                         DataTypeOnnxName(v->dtype));
    }
  }
  return absl::OkStatus();
}

// Double when any operand or output is double (never lower than an operand), else fp32.
bool ComputeInDouble(const std::vector<const ir::Tensor*>& ins, const std::vector<DataType>& outs) {
  for (const ir::Tensor* t : ins) {
    if (t != nullptr && t->dtype() == DataType::kF64) return true;
  }
  for (DataType d : outs) {
    if (d == DataType::kF64) return true;
  }
  return false;
}

// Calls f(TypeTag<float>) or f(TypeTag<double>).
template <typename F>
absl::Status DispatchCompute(bool dbl, F&& f) {
  return dbl ? f(TypeTag<double>{}) : f(TypeTag<float>{});
}

// Tensor `t` (any float dtype, checked by the caller) in compute type C: the data itself when it
// already is C, else converted once into `buf`.
template <typename C>
const C* ReadAs(const ir::Tensor& t, std::vector<C>& buf) {
  if (t.dtype() == DataTypeOf<C>()) return t.data<C>();
  buf.resize(t.num_elements());
  (void)DispatchFloat(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) buf[i] = static_cast<C>(Load(p[i]));
    return absl::OkStatus();
  });
  return buf.data();
}

// Calls f(y.data<T>()) for the float storage type T of output `y`; f rounds with Store<T>.
template <typename F>
absl::Status WithOutput(ir::Tensor& y, F&& f) {
  return DispatchFloat(y.dtype(), [&](auto tag) {
    f(y.data<typename decltype(tag)::type>());
    return absl::OkStatus();
  });
}

// Requires every present tensor of `ins` to be a float tensor.
absl::Status CheckFloatInputs(const ir::Node& node,
                              const std::vector<std::pair<const ir::Tensor*, const char*>>& ins) {
  for (const auto& [t, what] : ins) {
    if (t != nullptr) RETURN_IF_ERROR(CheckFloatParam(node, *t, what));
  }
  return absl::OkStatus();
}

// ---- FusedMatMul ---------------------------------------------------------------------------

class FusedMatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(CheckOutputDtypes(node));
    ASSIGN_OR_RETURN(Activation act, ReadActivation(node, MatMulActivations()));
    return std::unique_ptr<Kernel>(new FusedMatMulKernel(node, act));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node_, ctx, 1));
    const ir::Tensor* bias = ctx.input(2);
    RETURN_IF_ERROR(CheckFloatInputs(node_, {{a, "A"}, {b, "B"}, {bias, "bias"}}));
    ASSIGN_OR_RETURN(const nn::MatMulShape s, nn::PlanMatMul(node_, a->dims(), b->dims()));
    const DataType out_dt = OutputDtype(node_, 0, a->dtype());
    return DispatchCompute(ComputeInDouble({a, b, bias}, {out_dt}), [&](auto ctag) {
      using C = typename decltype(ctag)::type;
      return Evaluate<C>(ctx, *a, *b, bias, s, out_dt);
    });
  }

 private:
  FusedMatMulKernel(const ir::Node& node, Activation act) : node_(node), act_(act) {}

  template <typename C>
  absl::Status Evaluate(KernelContext& ctx, const ir::Tensor& a, const ir::Tensor& b,
                        const ir::Tensor* bias, const nn::MatMulShape& s, DataType out_dt) const {
    std::vector<C> abuf, bbuf, biasbuf;
    const C* ap = ReadAs<C>(a, abuf);
    const C* bp = ReadAs<C>(b, bbuf);
    std::vector<C> acc(ir::NumElementsOf(s.out), C(0));
    const int64_t m = s.m, n = s.n, k = s.k;
    nn::ForEachMatMulBatch(s, [&](int64_t i, int64_t ai, int64_t bi) {
      nn::GemmAccumulate(m, n, k, nn::MatView<C>{ap + ai * m * k, k, 1},
                         nn::MatView<C>{bp + bi * k * n, n, 1}, acc.data() + i * m * n, n);
    });
    if (bias == nullptr) {
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, out_dt, s.out));
      return WithOutput(*y, [&](auto* yp) {
        using T = std::remove_pointer_t<decltype(yp)>;
        WithActivation<C>(act_, [&](const auto& f) {
          for (size_t i = 0; i < acc.size(); ++i) yp[i] = Store<T>(f(acc[i]));
        });
      });
    }
    // MatMul result + bias with numpy broadcasting (the bias may even widen the result).
    const ir::Tensor mm = ir::Tensor::Borrow(DataTypeOf<C>(), s.out, acc.data(), nullptr);
    ASSIGN_OR_RETURN(const ew::BroadcastPlan plan, ew::BroadcastPlan::Make(node_, {&mm, bias}));
    const C* cp = ReadAs<C>(*bias, biasbuf);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, out_dt, plan.out_dims()));
    return WithOutput(*y, [&](auto* yp) {
      using T = std::remove_pointer_t<decltype(yp)>;
      WithActivation<C>(act_, [&](const auto& f) {
        plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t cnt, const int64_t* st) {
          const C* x = acc.data() + off[0];
          const C* c = cp + off[1];
          for (int64_t i = 0; i < cnt; ++i) yp[o + i] = Store<T>(f(x[i * st[0]] + c[i * st[1]]));
        });
      });
    });
  }

  const ir::Node& node_;
  Activation act_;
};

// ---- FusedConv -----------------------------------------------------------------------------

class FusedConvKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(CheckOutputDtypes(node));
    ASSIGN_OR_RETURN(nn::ConvAttrs attrs, nn::ReadConvAttrs(node));
    ASSIGN_OR_RETURN(Activation act, ReadActivation(node, {{"", ActKind::kNone},
                                                           {"Relu", ActKind::kRelu},
                                                           {"LeakyRelu", ActKind::kLeakyRelu},
                                                           {"Clip", ActKind::kClip},
                                                           {"HardSwish", ActKind::kHardSwish},
                                                           {"Sigmoid", ActKind::kSigmoid},
                                                           {"Swish", ActKind::kSwish}}));
    return std::unique_ptr<Kernel>(new FusedConvKernel(node, std::move(attrs), act));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const nn::ConvSetup s, nn::SetupConv(node_, attrs_, ctx, false));
    // Z, the residual of a conv+residual fusion: added to the fp32 sum before the activation.
    const ir::Tensor* z = ctx.input(3);
    RETURN_IF_ERROR(
        CheckFloatInputs(node_, {{s.in.x, "X"}, {s.in.w, "W"}, {s.in.b, "B"}, {z, "Z"}}));
    if (z && z->dims() != s.out_dims) {
      return InvalidNode(node_, "Z has shape ", ir::DimsToString(z->dims()), ", Y ",
                         ir::DimsToString(s.out_dims));
    }
    const DataType out_dt = OutputDtype(node_, 0, s.in.x->dtype());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, out_dt, s.out_dims));
    return DispatchCompute(ComputeInDouble({s.in.x, s.in.w, s.in.b, z}, {out_dt}), [&](auto ctag) {
      using C = typename decltype(ctag)::type;
      std::vector<C> xbuf, wbuf, bbuf, zbuf;
      const C* x = ReadAs<C>(*s.in.x, xbuf);
      const C* w = ReadAs<C>(*s.in.w, wbuf);
      const C* b = s.in.b ? ReadAs<C>(*s.in.b, bbuf) : nullptr;
      std::vector<C> acc(y->num_elements());
      nn::FillBias(acc.data(), y->num_elements(), b, s.m, ir::NumElementsOf(s.win.out));
      nn::ConvForward(s.in.x->dims(), s.in.w->dims(), s.win, attrs_.group, x, w, acc.data());
      if (z) {
        const C* zp = ReadAs<C>(*z, zbuf);
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += zp[i];
      }
      return WithOutput(*y, [&](auto* yp) {
        using T = std::remove_pointer_t<decltype(yp)>;
        WithActivation<C>(act_, [&](const auto& f) {
          for (size_t i = 0; i < acc.size(); ++i) yp[i] = Store<T>(f(acc[i]));
        });
      });
    });
  }

 private:
  FusedConvKernel(const ir::Node& node, nn::ConvAttrs attrs, Activation act)
      : node_(node), attrs_(std::move(attrs)), act_(act) {}

  const ir::Node& node_;
  nn::ConvAttrs attrs_;
  Activation act_;
};

// ---- AddLayerNorm --------------------------------------------------------------------------

class AddLayerNormKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(CheckOutputDtypes(node));
    const int64_t axis = node.GetInt("axis", -1);
    // The sum's rank is max(rank A, rank B): when both are static the axis is checked now,
    // else at run time.
    if (node.inputs.size() >= 2 && node.inputs[0] != nullptr && node.inputs[1] != nullptr &&
        node.inputs[0]->shape.rank_known && node.inputs[1]->shape.rank_known) {
      const int rank = std::max(node.inputs[0]->shape.rank(), node.inputs[1]->shape.rank());
      if (rank == 0) return InvalidNode(node, "A + B must have rank >= 1");
      RETURN_IF_ERROR(NormalizeAxis(node, axis, rank).status());
    }
    const float eps = node.GetFloat("epsilon", 1e-5f);
    return std::unique_ptr<Kernel>(new AddLayerNormKernel(node, axis, eps));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node_, ctx, 2));
    const ir::Tensor* bias = ctx.input(3);
    RETURN_IF_ERROR(
        CheckFloatInputs(node_, {{a, "A"}, {b, "B"}, {scale, "scale"}, {bias, "bias"}}));
    ASSIGN_OR_RETURN(const ew::BroadcastPlan plan, ew::BroadcastPlan::Make(node_, {a, b}));
    const std::vector<int64_t>& dims = plan.out_dims();
    if (dims.empty()) return InvalidNode(node_, "A + B must have rank >= 1");
    ASSIGN_OR_RETURN(const int axis, NormalizeAxis(node_, axis_, static_cast<int>(dims.size())));
    ASSIGN_OR_RETURN(const ParamMap smap, MapParam(node_, *scale, dims, axis, "scale"));
    ParamMap bmap;
    if (bias != nullptr) {
      ASSIGN_OR_RETURN(bmap, MapParam(node_, *bias, dims, axis, "bias"));
    }
    const DataType y_dt = OutputDtype(node_, 0, a->dtype());
    const DataType s_dt = OutputDtype(node_, 1, a->dtype());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, y_dt, dims));
    ir::Tensor* sum_out = nullptr;
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(sum_out, ctx.output(1, s_dt, dims));
    }
    const bool dbl = ComputeInDouble({a, b, scale, bias}, {y_dt, sum_out ? s_dt : y_dt});
    return DispatchCompute(dbl, [&](auto ctag) {
      using C = typename decltype(ctag)::type;
      const std::vector<C> sum = Sum<C>(plan, *a, *b);
      const std::vector<C> sc = ReadParam<C>(*scale);
      const std::vector<C> bi = bias ? ReadParam<C>(*bias) : std::vector<C>();
      const int64_t inner = Product(dims, axis, dims.size());
      const int64_t rows = inner == 0 ? 0 : plan.num_elements() / inner;
      // Rows are independent: split over the threads once there is enough work.
      const bool parallel = rows > 1 && rows * inner >= (int64_t{1} << 15);
      auto normalize = [&](auto* yp) {
        using T = std::remove_pointer_t<decltype(yp)>;
        ParallelFor(rows, parallel, [&](int64_t r_begin, int64_t r_end) {
          for (int64_t r = r_begin; r < r_end; ++r) {
            thread_local std::vector<C> xs;
            xs.assign(sum.begin() + r * inner, sum.begin() + (r + 1) * inner);
            const int64_t* so = smap.offsets.data() + (r * inner) % smap.period;
            const int64_t* bo = bias ? bmap.offsets.data() + (r * inner) % bmap.period : nullptr;
            T* yr = yp + r * inner;
            // Statistics in C with stash C: no rounding inside (Stash<C>::R is the identity).
            LayerNormRow<C>(xs.data(), inner, static_cast<C>(eps_), sc.data(), so, bi.data(), bo,
                            [yr](int64_t j, C v) { yr[j] = Store<T>(v); });
          }
        });
      };
      RETURN_IF_ERROR(WithOutput(*y, normalize));
      if (sum_out == nullptr) return absl::OkStatus();
      return WithOutput(*sum_out, [&](auto* sp) {
        using T = std::remove_pointer_t<decltype(sp)>;
        const int64_t n = static_cast<int64_t>(sum.size());
        ParallelFor(n, parallel, [&](int64_t i_begin, int64_t i_end) {
          for (int64_t i = i_begin; i < i_end; ++i) sp[i] = Store<T>(sum[i]);
        });
      });
    });
  }

 private:
  AddLayerNormKernel(const ir::Node& node, int64_t axis, float eps)
      : node_(node), axis_(axis), eps_(eps) {}

  // A + B in compute type C, broadcast; each operand converted from its own dtype.
  template <typename C>
  static std::vector<C> Sum(const ew::BroadcastPlan& plan, const ir::Tensor& a,
                            const ir::Tensor& b) {
    std::vector<C> abuf, bbuf, sum(plan.num_elements());
    const C* ap = ReadAs<C>(a, abuf);
    const C* bp = ReadAs<C>(b, bbuf);
    const int64_t n = plan.num_elements();
    if (a.num_elements() == n && b.num_elements() == n) {  // no broadcast: one flat loop
      ParallelFor(n, n >= (int64_t{1} << 15), [&](int64_t i_begin, int64_t i_end) {
        for (int64_t i = i_begin; i < i_end; ++i) sum[i] = ap[i] + bp[i];
      });
      return sum;
    }
    plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n, const int64_t* st) {
      const C* x = ap + off[0];
      const C* z = bp + off[1];
      for (int64_t i = 0; i < n; ++i) sum[o + i] = x[i * st[0]] + z[i * st[1]];
    });
    return sum;
  }

  const ir::Node& node_;
  int64_t axis_;
  float eps_;
};

}  // namespace

void RegisterFused(Registry& r) {
  r.AddRef(ir::OpType::kFusedMatMul, FloatTypes(), &FusedMatMulKernel::Create);
  r.AddRef(ir::OpType::kFusedConv, FloatTypes(), &FusedConvKernel::Create);
  r.AddRef(ir::OpType::kAddLayerNorm, FloatTypes(), &AddLayerNormKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
