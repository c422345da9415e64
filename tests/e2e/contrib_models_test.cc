// ONNX Runtime contrib ops (domain com.microsoft), expanded at import into default-domain nodes
// (engine/import/contrib_ops.h): one small model per op in tests/models/contrib (written by its
// make_models.py, with ONNX Runtime 1.32's outputs as the reference). Each is built under fp32
// and under bf16-layernorm (a reduced policy) and every output is compared with ONNX Runtime's.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

std::string Path(const std::string& rel) {
  return absl::StrCat(KILN_SOURCE_DIR, "/tests/models/contrib/", rel);
}

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

ir::Tensor ReadTensor(const std::string& path) {
  auto bytes = import::ReadFile(path, int64_t{1} << 20);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto t = import::ParseTensorProto(bytes.ok() ? *bytes : "", path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : ir::Tensor();
}

std::vector<ir::Tensor> ReadAll(const std::string& model, const char* kind) {
  std::vector<ir::Tensor> out;
  for (int i = 0;; ++i) {
    const std::string p = Path(absl::StrCat(model, "/test_data_set_0/", kind, "_", i, ".pb"));
    if (!Exists(p)) break;
    out.push_back(ReadTensor(p));
  }
  return out;
}

absl::StatusOr<std::vector<ir::Tensor>> BuildAndRun(const std::string& model,
                                                    const std::string& policy) {
  builder::BuildOptions o;
  o.policy = policy;
  ASSIGN_OR_RETURN(builder::BuildResult built,
                   builder::BuildEngineFromFile(Path(model + "/model.onnx"), o, nullptr));
  ASSIGN_OR_RETURN(auto engine,
                   plan::LoadEngineFromBytes(std::make_shared<std::string>(built.blob)));
  ASSIGN_OR_RETURN(auto session,
                   runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(engine))));
  return session->Run(ReadAll(model, "input"));
}

double MaxAbsDiff(const ir::Tensor& a, const ir::Tensor& b) {
  if (a.dims() != b.dims() || a.dtype() != b.dtype()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double d = std::fabs(ir::ElementAsDouble(a, i) - ir::ElementAsDouble(b, i));
    m = std::max(m, std::isfinite(d) ? d : INFINITY);
  }
  return m;
}

double MaxAbs(const ir::Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i)
    m = std::max(m, std::fabs(ir::ElementAsDouble(t, i)));
  return m;
}

struct Case {
  const char* model;
  // fp32: the largest difference allowed from ONNX Runtime, in output units (quanta for the
  // uint8/int8 outputs of the QLinear ops), scaled by max(1, max |ref|) for float outputs.
  double fp32_tol;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model; }

// fp32 bounds. Float expansions run the same fp32 arithmetic as ORT's fused kernels in another
// order (sums, exp, tanh, erf of another library): 1e-5 relative to the output's magnitude is
// ~80 fp32 ulps, far below any wrong bias, mask, scale or head split (measured <= 1.5e-6).
// Integer paths (MatMulInteger, QGemm, MatMulNBits' exact dequantized weights) match bit for bit
// or within fp32 rounding of the final scale. Exceptions, each measured and explained:
constexpr double kFloat = 1e-5;
const Case kCases[] = {
    {"gelu", kFloat},
    {"fast_gelu", kFloat},
    {"bias_gelu", kFloat},
    {"quick_gelu", kFloat},
    {"fused_conv", kFloat},
    {"skip_layernorm", kFloat},
    {"skip_simplified_layernorm", kFloat},
    {"simplified_layernorm", kFloat},
    {"layernorm_opset13", kFloat},
    {"embed_layernorm", kFloat},
    {"embed_layernorm_gpt2", kFloat},
    {"attention", kFloat},
    {"attention_past_causal", kFloat},
    {"attention_qkv_sizes", kFloat},
    {"multihead_attention", kFloat},
    {"multihead_attention_past", kFloat},
    {"group_query_attention", kFloat},
    {"group_query_attention_past_rotary", kFloat},
    {"rotary_embedding", kFloat},
    {"rotary_embedding_offset_interleaved", kFloat},
    // ORT's QLinearAdd / QLinearMul compute round((a - za) * (sa / sc) + (b - zb) * (sb / sc) +
    // zc) with the scale ratios folded first; Kiln's DequantizeLinear + Add + QuantizeLinear
    // rounds (a - za) * sa + (b - zb) * sb divided by sc: 8 of 48 elements one quantum apart
    // (measured; a wrong zero point or scale moves most elements by several quanta).
    {"qlinear_add", 1},
    {"qlinear_mul_int8", 1},
    {"qlinear_sigmoid", 0},  // ORT's 256-entry table holds the same float formula: exact here
    {"qlinear_leaky_relu", 0},
    {"qlinear_softmax", 0},
    {"qlinear_concat", 0},
    {"qlinear_where", 0},
    // ORT's QLinearAveragePool sums integers and scales once: one element of 48 (and of 27) one
    // quantum apart (measured).
    {"qlinear_average_pool", 1},
    {"qlinear_average_pool_nhwc", 1},
    {"qlinear_global_average_pool", 0},
    {"qgemm", 0},
    {"qgemm_float", kFloat},
    {"matmul_integer_to_float", kFloat},
    {"dynamic_quantize_matmul", kFloat},
    {"matmul_nbits", kFloat},
    {"matmul_nbits_8bit", kFloat},
    // ORT quantizes X and H to uint8 (per tensor, dynamically) at every step and runs the gates'
    // products in integers; Kiln's LSTM runs them in fp32 on the dequantized weights. Inputs of
    // range ~+-3 quantize with a step ~0.025 (error <= 0.0125 per element); through the sigmoid
    // and tanh gates (slope <= 1) that moves the states by ~1e-2 (measured max 0.010 on Y_c).
    // 0.03 bounds it; a wrong gate order or weight layout changes the states by ~0.5.
    {"dynamic_quantize_lstm", 0.03},
    {"qattention", kFloat},
    {"quantize_dequantize", 0},
};

class ContribModels : public ::testing::TestWithParam<Case> {};

TEST_P(ContribModels, MatchOnnxRuntime) {
  const Case c = GetParam();
  const std::vector<ir::Tensor> refs = ReadAll(c.model, "output");
  ASSERT_FALSE(refs.empty()) << "no reference outputs for " << c.model;
  for (const char* policy : {"fp32", "bf16-layernorm"}) {
    SCOPED_TRACE(absl::StrCat(c.model, " ", policy));
    auto outs = BuildAndRun(c.model, policy);
    ASSERT_TRUE(outs.ok()) << outs.status();
    ASSERT_EQ(outs->size(), refs.size());
    const bool reduced = std::string(policy) != "fp32";
    for (size_t i = 0; i < refs.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("output ", i));
      const bool floating = IsFloating(refs[i].dtype());
      double tol = c.fp32_tol;
      if (floating) tol *= std::max(1.0, MaxAbs(refs[i]));
      if (reduced) {
        // bf16 keeps 8 significant bits (2^-9 relative rounding per value); an expansion runs a
        // few such roundings in a chain (projection, scores, softmax, output), so 5% of the
        // output's magnitude bounds it (measured <= 2.7%; a wrong mask or head split moves
        // outputs by their whole magnitude). Quantized outputs re-quantize floats rounded to
        // bf16: 2 quanta (measured 1).
        tol = floating ? std::max(tol, 0.05 * std::max(1.0, MaxAbs(refs[i]))) : std::max(tol, 2.0);
      }
      EXPECT_LE(MaxAbsDiff((*outs)[i], refs[i]), tol);
    }
  }
}

// DynamicQuantizeLSTM keeps R in int8 (LSTMQuantizedR) and R's row scales in fp32 under every
// policy: they are dequantization scales, as DequantizeLinear's (precision_lowering.cc's
// FixedInput); the LSTM's floating inputs follow the policy.
TEST(ContribModelsPrecision, QuantizedLstmScalesStayFp32) {
  for (const char* policy : {"fp16", "bf16"}) {
    builder::BuildOptions o;
    o.policy = policy;
    auto built = builder::BuildEngineFromFile(Path("dynamic_quantize_lstm/model.onnx"), o, nullptr);
    ASSERT_TRUE(built.ok()) << built.status();
    auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
    ASSERT_TRUE(engine.ok()) << engine.status();
    int found = 0;
    for (const ir::Node* n : (*engine)->order) {
      if (n->op != ir::OpType::kLSTMQuantizedR) continue;
      ++found;
      ASSERT_GT(n->num_inputs(), 9);
      ASSERT_NE(n->input(8), nullptr);
      EXPECT_EQ(n->input(8)->dtype, DataType::kF32) << policy;
      EXPECT_TRUE(n->input(2)->dtype == DataType::kI8 || n->input(2)->dtype == DataType::kU8);
      EXPECT_EQ(n->input(0)->dtype,
                std::string(policy) == "fp16" ? DataType::kF16 : DataType::kBF16);
    }
    EXPECT_EQ(found, 1) << policy;
  }
}

INSTANTIATE_TEST_SUITE_P(OnnxRuntimeContribOps, ContribModels, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.model);
                         });

}  // namespace
}  // namespace kiln
