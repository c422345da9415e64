// Reference kernels of the generator ops of audio front ends (opset 17): HannWindow,
// HammingWindow, BlackmanWindow and MelWeightMatrix. Each output's dtype is the node's
// `output_datatype` attribute (default float); values are computed in double and converted once
// (to integers by truncation, as a numpy astype does).
//
// Windows: w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n < size, where N = size
// (periodic=1, the default) or size - 1 (periodic=0). A symmetric window of one point is [1],
// as numpy's and torch's are (the formula would divide 0 by 0).
//
// MelWeightMatrix: [floor(dft_length / 2) + 1, num_mel_bins] triangles of peak 1, their corners
// at num_mel_bins + 2 points spaced evenly on the mel scale mel(f) = 2595 log10(1 + f / 700)
// between lower_edge_hertz and upper_edge_hertz, each mapped to the spectrogram bin
// floor((dft_length + 1) f / sample_rate); a corner outside the spectrogram is an error.
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/scalar_inputs.h"

namespace kiln::kernels::cpu::ref {
namespace {

// The dtype `output_datatype` names: a numeric type Kiln has.
absl::StatusOr<DataType> OutputDatatype(const ir::Node& node) {
  const int64_t v = node.GetInt("output_datatype", 1);
  const DataType dt = v < INT32_MIN || v > INT32_MAX ? DataType::kUndefined
                                                     : DataTypeFromOnnx(static_cast<int32_t>(v));
  if (dt == DataType::kUndefined || dt == DataType::kBool || dt == DataType::kString) {
    return absl::UnimplementedError(absl::StrCat(node.Label(), " unsupported dtype ",
                                                 v < INT32_MIN || v > INT32_MAX
                                                     ? absl::StrCat("number ", v)
                                                     : OnnxDataTypeName(static_cast<int32_t>(v)),
                                                 ": attribute 'output_datatype' = ", v));
  }
  return dt;
}

// Writes element i of `y` (allocated first, so that a size too large fails before any work) as
// value(i), converted to y's dtype.
template <typename F>
absl::Status Fill(ir::Tensor* y, F&& value) {
  return DispatchAll(y->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    T* out = y->data<T>();
    for (int64_t i = 0; i < y->num_elements(); ++i) out[i] = Store<T>(value(i));
    return absl::OkStatus();
  });
}

// ---- Windows ----

// Cosine-sum coefficients a0, a1, a2 of each window.
struct CosineSum {
  double a0, a1, a2;
};

class WindowKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(DataType dt, OutputDatatype(node));
    ASSIGN_OR_RETURN(bool periodic, ReadFlagAttr(node, "periodic", 1));
    CosineSum c{0.5, 0.5, 0.0};  // Hann
    if (node.op == ir::OpType::kHammingWindow) c = {25.0 / 46.0, 21.0 / 46.0, 0.0};
    if (node.op == ir::OpType::kBlackmanWindow) c = {0.42, 0.5, 0.08};
    return std::unique_ptr<Kernel>(new WindowKernel(node, dt, periodic, c));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* size_t_, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const int64_t size, ReadScalarInt(node_, *size_t_, "size"));
    if (size < 0) return InvalidNode(node_, "size must not be negative, got ", size);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt_, {size}));
    const int64_t period = periodic_ ? size : size - 1;
    return Fill(y, [&](int64_t n) {
      if (period == 0) return 1.0;  // the one-point symmetric window
      const double x =
          2.0 * std::numbers::pi * static_cast<double>(n) / static_cast<double>(period);
      return c_.a0 - c_.a1 * std::cos(x) + c_.a2 * std::cos(2.0 * x);
    });
  }

 private:
  WindowKernel(const ir::Node& node, DataType dt, bool periodic, CosineSum c)
      : node_(node), dt_(dt), periodic_(periodic), c_(c) {}
  const ir::Node& node_;
  DataType dt_;
  bool periodic_;
  CosineSum c_;
};

// ---- MelWeightMatrix ----

class MelWeightMatrixKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(DataType dt, OutputDatatype(node));
    return std::unique_ptr<Kernel>(new MelWeightMatrixKernel(node, dt));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* mel_t, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* dft_t, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* rate_t, RequireInput(node_, ctx, 2));
    ASSIGN_OR_RETURN(const ir::Tensor* low_t, RequireInput(node_, ctx, 3));
    ASSIGN_OR_RETURN(const ir::Tensor* high_t, RequireInput(node_, ctx, 4));
    ASSIGN_OR_RETURN(const int64_t mels, ReadScalarInt(node_, *mel_t, "num_mel_bins"));
    ASSIGN_OR_RETURN(const int64_t dft, ReadScalarInt(node_, *dft_t, "dft_length"));
    ASSIGN_OR_RETURN(const int64_t rate, ReadScalarInt(node_, *rate_t, "sample_rate"));
    ASSIGN_OR_RETURN(const double low, ReadScalarFloat(node_, *low_t, "lower_edge_hertz"));
    ASSIGN_OR_RETURN(const double high, ReadScalarFloat(node_, *high_t, "upper_edge_hertz"));
    if (mels < 0) return InvalidNode(node_, "num_mel_bins must not be negative, got ", mels);
    if (dft < 1) return InvalidNode(node_, "dft_length must be positive, got ", dft);
    if (rate < 1) return InvalidNode(node_, "sample_rate must be positive, got ", rate);
    if (!std::isfinite(low) || !std::isfinite(high)) {
      return InvalidNode(node_, "lower_edge_hertz and upper_edge_hertz must be finite, got ", low,
                         " and ", high);
    }
    const int64_t bins = dft / 2 + 1;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt_, {bins, mels}));
    auto to_mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
    const double low_mel = to_mel(low);
    const double step = (to_mel(high) - low_mel) / static_cast<double>(mels + 2);
    std::vector<int64_t> corner(mels + 2);
    for (int64_t i = 0; i < mels + 2; ++i) {
      const double mel = low_mel + static_cast<double>(i) * step;
      const double hz = 700.0 * std::expm1(mel / 2595.0 * std::numbers::ln10);
      const double bin = std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate));
      if (!(bin >= 0 && bin < static_cast<double>(bins))) {
        return InvalidNode(node_, "mel band corner ", i, " at ", hz, " Hz falls outside the ", bins,
                           " spectrogram bins of dft_length ", dft, " at sample_rate ", rate,
                           " (lower_edge_hertz ", low, ", upper_edge_hertz ", high, ")");
      }
      corner[i] = static_cast<int64_t>(bin);
    }
    // Band m rises from its left corner to its peak (a single 1 when the two coincide) and falls
    // from the peak to just before its right corner; both edges are 1 at the peak.
    return Fill(y, [&](int64_t e) {
      const int64_t j = e / mels, m = e % mels;
      const int64_t left = corner[m], center = corner[m + 1], right = corner[m + 2];
      if (j >= center && j < right) {
        return static_cast<double>(right - j) / static_cast<double>(right - center);
      }
      if (j >= left && j <= center) {
        return center == left ? 1.0
                              : static_cast<double>(j - left) / static_cast<double>(center - left);
      }
      return 0.0;
    });
  }

 private:
  MelWeightMatrixKernel(const ir::Node& node, DataType dt) : node_(node), dt_(dt) {}
  const ir::Node& node_;
  DataType dt_;
};

// Output dtypes of the generators: every numeric type, fp16 and bf16 included (a reduced
// policy retypes the output and its `output_datatype` with it: passes/precision_lowering.cc).
std::vector<DataType> GeneratorTypes() {
  std::vector<DataType> v = IntTypes();
  for (DataType t : FloatTypes()) v.push_back(t);
  return v;
}

}  // namespace

void RegisterSignalWindows(Registry& r) {
  for (ir::OpType op :
       {ir::OpType::kHannWindow, ir::OpType::kHammingWindow, ir::OpType::kBlackmanWindow}) {
    r.AddRef(op, GeneratorTypes(), &WindowKernel::Create, kOutputType);
  }
  r.AddRef(ir::OpType::kMelWeightMatrix, GeneratorTypes(), &MelWeightMatrixKernel::Create,
           kOutputType);
}

}  // namespace kiln::kernels::cpu::ref
