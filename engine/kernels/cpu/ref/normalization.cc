// BatchNormalization reference kernel (inference and training mode, opsets 6-15) and the
// normalization family's registration entry point.
//
// Training mode by version:
//   - 6: is_test=0; 7 and 9: the node has outputs beyond Y. Outputs are Y, the running mean and
//     variance, and the batch ("saved") mean and variance.
//   - 14, 15: training_mode=1. Outputs are Y and the running mean and variance.
// In training mode Y is normalized with the batch statistics (population variance, as the
// opset-14 spec writes out), and running = input * momentum + batch * (1 - momentum).
// saved_var (opsets 6-9) is the batch variance, as its name and the ONNX reference evaluator
// say; ONNX Runtime's CPU kernel returns 1 / sqrt(var + epsilon) there instead.
// Opsets before 9 also have `spatial`: with spatial=0 the statistics and parameters are per
// activation (C x D1 x ... x Dn) rather than per channel.
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

void RegisterNormalizationBlocks(Registry& r);  // normalization_layer.cc

namespace {

struct BatchNormConfig {
  bool training = false;
  bool spatial = true;
  float epsilon = 1e-5f;
  float momentum = 0.9f;
};

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(const ir::Node& node, BatchNormConfig cfg) : node_(node), cfg_(cfg) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(nn::RefuseChannelsLast(node));  // NCHW only
    BatchNormConfig cfg;
    cfg.epsilon = node.GetFloat("epsilon", 1e-5f);
    cfg.momentum = node.GetFloat("momentum", 0.9f);
    bool extra_outputs = false;
    for (int i = 1; i < node.num_outputs(); ++i) extra_outputs |= node.outputs[i] != nullptr;
    if (node.since_version >= 14) {
      cfg.training = node.GetInt("training_mode", 0) != 0;
      if (!cfg.training && extra_outputs) {
        return InvalidNode(node, "has running mean/var outputs but training_mode is 0");
      }
      if (node.num_outputs() > 3) return InvalidNode(node, "has more than 3 outputs");
    } else {
      cfg.training = node.since_version < 7 ? node.GetInt("is_test", 0) == 0 : extra_outputs;
      if (node.num_outputs() > 5) return InvalidNode(node, "has more than 5 outputs");
    }
    if (node.since_version < 9) cfg.spatial = node.GetInt("spatial", 1) != 0;
    return std::unique_ptr<Kernel>(new BatchNormKernel(node, cfg));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    if (x->rank() < 2) {
      return InvalidNode(node_, "input must have rank >= 2 (N x C x ...), got rank ", x->rank());
    }
    const int64_t channels = x->dim(1);
    int64_t spatial = 1;
    for (int d = 2; d < x->rank(); ++d) spatial *= x->dim(d);
    const int64_t nparams = cfg_.spatial ? channels : channels * spatial;
    static constexpr const char* kNames[] = {"scale", "B", "mean", "var"};
    const ir::Tensor* params[4];
    for (int i = 0; i < 4; ++i) {
      ASSIGN_OR_RETURN(params[i], RequireInput(node_, ctx, i + 1));
      if (!IsFloating(params[i]->dtype())) {
        return InvalidNode(node_, kNames[i], " must be a float tensor, got ",
                           DataTypeOnnxName(params[i]->dtype()));
      }
      if (params[i]->num_elements() != nparams) {
        return InvalidNode(node_, kNames[i], " must have ", nparams, " elements, got shape ",
                           ir::DimsToString(params[i]->dims()));
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    // Extra outputs: running mean, running var, then (before opset 14) batch mean, batch var.
    ir::Tensor* stats[4] = {nullptr, nullptr, nullptr, nullptr};
    if (cfg_.training) {
      for (int i = 0; i < 4 && i + 1 < ctx.num_outputs(); ++i) {
        if (!ctx.output_requested(i + 1)) continue;
        // Running stats keep the dtype of input_mean / input_var; batch stats that of X.
        const DataType dt = i < 2 ? params[2 + i]->dtype() : x->dtype();
        ASSIGN_OR_RETURN(stats[i], ctx.output(i + 1, dt, params[2 + i % 2]->dims()));
      }
    }
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      Loop<T>(*x, params, channels, spatial, nparams, *y, stats);
      return absl::OkStatus();
    });
  }

 private:
  template <typename T>
  void Loop(const ir::Tensor& xt, const ir::Tensor* const* params, int64_t channels,
            int64_t spatial, int64_t nparams, ir::Tensor& yt, ir::Tensor* const* stats) const {
    using C = Compute<T>;  // fp32 for half types (opset 15 asks for float statistics)
    std::vector<C> p[4];
    for (int i = 0; i < 4; ++i) {
      p[i].resize(nparams);
      for (int64_t j = 0; j < nparams; ++j)
        p[i][j] = static_cast<C>(ir::ElementAsDouble(*params[i], j));
    }
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    const int64_t batch = xt.dim(0);
    // Element (n, c, s) uses statistic/parameter index c (spatial) or c * spatial + s.
    const int64_t s_step = cfg_.spatial ? 0 : 1;
    auto param_base = [&](int64_t c) { return cfg_.spatial ? c : c * spatial; };
    std::vector<C> mean = p[2];
    std::vector<C> var = p[3];
    if (cfg_.training) {
      // Batch statistics, two passes (mean, then squared deviations) for accuracy.
      const C count = static_cast<C>(cfg_.spatial ? batch * spatial : batch);
      std::vector<C> sum(nparams, C(0));
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t c = 0; c < channels; ++c) {
          const T* xr = x + (n * channels + c) * spatial;
          const int64_t g0 = param_base(c);
          for (int64_t s = 0; s < spatial; ++s) sum[g0 + s * s_step] += Load(xr[s]);
        }
      }
      for (int64_t g = 0; g < nparams; ++g) mean[g] = sum[g] / count;
      std::fill(sum.begin(), sum.end(), C(0));
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t c = 0; c < channels; ++c) {
          const T* xr = x + (n * channels + c) * spatial;
          const int64_t g0 = param_base(c);
          for (int64_t s = 0; s < spatial; ++s) {
            const C dv = Load(xr[s]) - mean[g0 + s * s_step];
            sum[g0 + s * s_step] += dv * dv;
          }
        }
      }
      for (int64_t g = 0; g < nparams; ++g) var[g] = sum[g] / count;
      const C m = static_cast<C>(cfg_.momentum);
      for (int64_t g = 0; g < nparams; ++g) {
        if (stats[0]) StoreFloat(*stats[0], g, p[2][g] * m + mean[g] * (C(1) - m));
        if (stats[1]) StoreFloat(*stats[1], g, p[3][g] * m + var[g] * (C(1) - m));
        if (stats[2]) StoreFloat(*stats[2], g, mean[g]);
        if (stats[3]) StoreFloat(*stats[3], g, var[g]);
      }
    }
    std::vector<C> stddev(nparams);
    const C eps = static_cast<C>(cfg_.epsilon);
    for (int64_t g = 0; g < nparams; ++g) stddev[g] = std::sqrt(var[g] + eps);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t off = (n * channels + c) * spatial;
        const int64_t g0 = param_base(c);
        for (int64_t s = 0; s < spatial; ++s) {
          const int64_t g = g0 + s * s_step;
          y[off + s] = Store<T>((Load(x[off + s]) - mean[g]) / stddev[g] * p[0][g] + p[1][g]);
        }
      }
    }
  }

  const ir::Node& node_;
  BatchNormConfig cfg_;
};

}  // namespace

void RegisterNormalization(Registry& r) {
  r.AddRef(ir::OpType::kBatchNormalization, FloatTypes(), &BatchNormKernel::Create);
  RegisterNormalizationBlocks(r);
}

}  // namespace kiln::kernels::cpu::ref
