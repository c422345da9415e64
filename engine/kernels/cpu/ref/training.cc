// Reference kernels of the optimizer ops of ai.onnx.preview.training: Adagrad, Adam, Momentum.
//
// Each node updates n tensors at once. Inputs: R (learning rate, a float scalar), T (the update
// count, an int64 scalar), then n tensors X, n gradients G, and the per-tensor state (H for
// Adagrad; V then H for Adam; V for Momentum), each group of n in the order of the X's. Outputs:
// the new X's, then the new state groups in input order. The update is computed in double per
// element (the state may be fp16/bf16 under a reduced policy: loaded, updated, rounded once).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

enum class Optimizer { kAdagrad, kAdam, kMomentum };

// Attributes of one optimizer node, read once.
struct OptimizerParams {
  Optimizer kind;
  int groups = 0;  // tensor groups per updated tensor: X, G and the state tensors
  double norm_coefficient = 0, norm_coefficient_post = 0, epsilon = 0, decay_factor = 0;
  double alpha = 0, beta = 0;
  bool nesterov = false;
};

// The float attribute `name`, required (Momentum's) or with default `dflt`.
absl::StatusOr<double> FloatAttr(const ir::Node& node, const char* name, bool required,
                                 double dflt) {
  const ir::Attribute* a = node.attr(name);
  if (a == nullptr) {
    if (required) return InvalidNode(node, "requires the float attribute '", name, "'");
    return dflt;
  }
  if (a->type != ir::Attribute::Type::kFloat) {
    return InvalidNode(node, "attribute '", name, "' must be a float");
  }
  return static_cast<double>(a->f);
}

absl::StatusOr<OptimizerParams> ReadParams(const ir::Node& node, Optimizer kind) {
  OptimizerParams p;
  p.kind = kind;
  switch (kind) {
    case Optimizer::kAdagrad: {
      p.groups = 3;
      ASSIGN_OR_RETURN(p.norm_coefficient, FloatAttr(node, "norm_coefficient", false, 0));
      ASSIGN_OR_RETURN(p.decay_factor, FloatAttr(node, "decay_factor", false, 0));
      ASSIGN_OR_RETURN(p.epsilon, FloatAttr(node, "epsilon", false, 1e-6f));
      break;
    }
    case Optimizer::kAdam: {
      p.groups = 4;
      ASSIGN_OR_RETURN(p.norm_coefficient, FloatAttr(node, "norm_coefficient", false, 0));
      ASSIGN_OR_RETURN(p.norm_coefficient_post, FloatAttr(node, "norm_coefficient_post", false, 0));
      ASSIGN_OR_RETURN(p.epsilon, FloatAttr(node, "epsilon", false, 1e-6f));
      ASSIGN_OR_RETURN(p.alpha, FloatAttr(node, "alpha", false, 0.9f));
      ASSIGN_OR_RETURN(p.beta, FloatAttr(node, "beta", false, 0.999f));
      break;
    }
    case Optimizer::kMomentum: {
      p.groups = 3;
      ASSIGN_OR_RETURN(p.norm_coefficient, FloatAttr(node, "norm_coefficient", true, 0));
      ASSIGN_OR_RETURN(p.alpha, FloatAttr(node, "alpha", true, 0));
      ASSIGN_OR_RETURN(p.beta, FloatAttr(node, "beta", true, 0));
      const ir::Attribute* mode = node.attr("mode");
      if (mode == nullptr || mode->type != ir::Attribute::Type::kString) {
        return InvalidNode(node, "requires the string attribute 'mode' ('standard' or 'nesterov')");
      }
      if (mode->s != "standard" && mode->s != "nesterov") {
        return InvalidNode(node, "mode must be 'standard' or 'nesterov', got '", mode->s, "'");
      }
      p.nesterov = mode->s == "nesterov";
      break;
    }
  }
  const int tensors = node.num_inputs() - 2;
  if (tensors < p.groups || tensors % p.groups != 0) {
    return InvalidNode(node, "has ", node.num_inputs(), " inputs; it takes R, T and ", p.groups,
                       " groups of n tensors (2 + ", p.groups, "n inputs)");
  }
  const int n = tensors / p.groups;
  const int outputs = (p.groups - 1) * n;
  if (node.num_outputs() > outputs) {
    return InvalidNode(node, "has ", node.num_outputs(), " outputs; ", n,
                       " updated tensor(s) give at most ", outputs);
  }
  return p;
}

// Reads scalar input `i` (a one-element tensor) as double.
absl::StatusOr<double> Scalar(const ir::Node& node, const ir::Tensor& t, const char* what) {
  if (t.num_elements() != 1) {
    return InvalidNode(node, what, " must be a scalar, got shape ", ir::DimsToString(t.dims()));
  }
  return ir::ElementAsDouble(t, 0);
}

class OptimizerKernel final : public Kernel {
 public:
  template <Optimizer kKind>
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(OptimizerParams p, ReadParams(node, kKind));
    return std::unique_ptr<Kernel>(new OptimizerKernel(node, p));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* r_in, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* t_in, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const double r, Scalar(node_, *r_in, "R (learning rate)"));
    if (t_in->dtype() != DataType::kI64) {
      return InvalidNode(node_, "T (update count) must be int64, got ",
                         DataTypeOnnxName(t_in->dtype()));
    }
    if (t_in->num_elements() != 1) {
      return InvalidNode(node_, "T (update count) must be a scalar, got shape ",
                         ir::DimsToString(t_in->dims()));
    }
    const int64_t t = t_in->data<int64_t>()[0];
    const int n = (ctx.num_inputs() - 2) / p_.groups;
    for (int j = 0; j < n; ++j) RETURN_IF_ERROR(UpdateOne(ctx, n, j, r, t));
    return absl::OkStatus();
  }

 private:
  OptimizerKernel(const ir::Node& node, OptimizerParams p) : node_(node), p_(p) {}

  // Updates tensor j of n: reads X_j, G_j and its state, writes the outputs requested.
  absl::Status UpdateOne(KernelContext& ctx, int n, int j, double r, int64_t t) {
    std::vector<const ir::Tensor*> in(p_.groups);
    for (int g = 0; g < p_.groups; ++g) {
      ASSIGN_OR_RETURN(in[g], RequireInput(node_, ctx, 2 + g * n + j));
      if (in[g]->dims() != in[0]->dims() || in[g]->dtype() != in[0]->dtype()) {
        return InvalidNode(node_, "input ", 2 + g * n + j, " is ", DataTypeOnnxName(in[g]->dtype()),
                           ir::DimsToString(in[g]->dims()), " but the tensor it updates (input ",
                           2 + j, ") is ", DataTypeOnnxName(in[0]->dtype()),
                           ir::DimsToString(in[0]->dims()));
      }
    }
    const DataType dt = in[0]->dtype();
    // Output k*n + j is group k's new value (k = 0: X, then the state groups).
    std::vector<ir::Tensor*> out(p_.groups - 1, nullptr);
    for (int k = 0; k + 1 < p_.groups; ++k) {
      const int o = k * n + j;
      if (o >= ctx.num_outputs() || !ctx.output_requested(o)) continue;
      ASSIGN_OR_RETURN(out[k], ctx.output(o, dt, in[0]->dims()));
    }
    return DispatchFloat(dt, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const int64_t count = in[0]->num_elements();
      auto load = [&](int g, int64_t e) { return static_cast<double>(in[g]->data<T>()[e]); };
      auto store = [&](int k, int64_t e, double v) {
        if (out[k] != nullptr) out[k]->data<T>()[e] = Store<T>(v);
      };
      for (int64_t e = 0; e < count; ++e) {
        const double x = load(0, e);
        const double g = p_.norm_coefficient * x + load(1, e);  // gradient + regularization
        switch (p_.kind) {
          case Optimizer::kAdagrad: {
            const double rate = r / (1 + static_cast<double>(t) * p_.decay_factor);
            const double h = load(2, e) + g * g;
            store(0, e, x - rate * g / (std::sqrt(h) + p_.epsilon));
            store(1, e, h);
            break;
          }
          case Optimizer::kAdam: {
            const double v = p_.alpha * load(2, e) + (1 - p_.alpha) * g;
            const double h = p_.beta * load(3, e) + (1 - p_.beta) * g * g;
            // Bias correction from the first update on (T > 0).
            const double rate = t > 0
                                    ? r * std::sqrt(1 - std::pow(p_.beta, static_cast<double>(t))) /
                                          (1 - std::pow(p_.alpha, static_cast<double>(t)))
                                    : r;
            const double x_new = x - rate * v / (std::sqrt(h) + p_.epsilon);
            store(0, e, (1 - p_.norm_coefficient_post) * x_new);
            store(1, e, v);
            store(2, e, h);
            break;
          }
          case Optimizer::kMomentum: {
            const double beta = t > 0 ? p_.beta : 1.0;  // the first update takes all of G
            const double v = p_.alpha * load(2, e) + beta * g;
            store(0, e, p_.nesterov ? x - r * (g + p_.alpha * v) : x - r * v);
            store(1, e, v);
            break;
          }
        }
      }
      return absl::OkStatus();
    });
  }

  const ir::Node& node_;
  OptimizerParams p_;
};

}  // namespace

void RegisterTraining(Registry& r) {
  // Keyed by X_1 (input 2): R is float or double whatever the tensors are.
  r.AddRef(ir::OpType::kAdagrad, FloatTypes(), &OptimizerKernel::Create<Optimizer::kAdagrad>,
           /*type_source=*/2);
  r.AddRef(ir::OpType::kAdam, FloatTypes(), &OptimizerKernel::Create<Optimizer::kAdam>, 2);
  r.AddRef(ir::OpType::kMomentum, FloatTypes(), &OptimizerKernel::Create<Optimizer::kMomentum>, 2);
}

}  // namespace kiln::kernels::cpu::ref
