// Models exported by PyTorch (tests/models, made by tests/models/make_models.py) build with the
// fp32 policy and match ONNX Runtime's outputs.
#include <dirent.h>
#include <unistd.h>

#include <cmath>
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

// The acceptance bound of the fp32 path against ONNX Runtime on outputs of normal scale
// (|y| <= ~2; gpt2_causal logits reach ~36, where 1e-4 is still 30x float32's ulp there). Both
// runtimes compute in fp32 but sum in different orders, so bit equality is not expected.
constexpr double kAtol = 1e-4;

std::string ModelsDir() { return absl::StrCat(KILN_SOURCE_DIR, "/tests/models"); }

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  DIR* d = opendir(ModelsDir().c_str());
  if (!d) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    // Models with an ONNX Runtime reference (authored_mixed has an exact emulation instead).
    std::string ref = absl::StrCat(ModelsDir(), "/", n, "/test_data_set_0/output_0.pb");
    if (n[0] != '.' && access(ref.c_str(), R_OK) == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

ir::Tensor ReadTensor(const std::string& path) {
  auto bytes = import::ReadFile(path, int64_t{1} << 30);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto t = import::ParseTensorProto(*bytes, path);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

class PyTorchModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PyTorchModelTest, MatchesOnnxRuntime) {
  std::string dir = absl::StrCat(ModelsDir(), "/", GetParam());
  auto built = builder::BuildEngineFromFile(dir + "/model.onnx", builder::BuildOptions{}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<ir::Tensor> inputs;
  for (int i = 0;; ++i) {
    std::string p = absl::StrCat(dir, "/test_data_set_0/input_", i, ".pb");
    if (access(p.c_str(), R_OK) != 0) break;
    inputs.push_back(ReadTensor(p));
  }
  auto outputs = (*session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (size_t o = 0; o < outputs->size(); ++o) {
    ir::Tensor want = ReadTensor(absl::StrCat(dir, "/test_data_set_0/output_", o, ".pb"));
    const ir::Tensor& got = (*outputs)[o];
    ASSERT_EQ(got.dtype(), want.dtype());
    ASSERT_EQ(got.dims(), want.dims());
    double worst = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      worst =
          std::max(worst, std::fabs(ir::ElementAsDouble(got, i) - ir::ElementAsDouble(want, i)));
    }
    EXPECT_LE(worst, kAtol) << GetParam() << " output " << o;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PyTorchModelTest, ::testing::ValuesIn(ModelNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
