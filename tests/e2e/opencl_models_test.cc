// Real models on the OpenCL device (the machine's; PoCL in CI): each built for the CPU and for
// the device, run on the same generated inputs, the device engine's outputs within the fp32
// reordering bound of the CPU engine's, and the share of the estimated FLOPs that runs on the
// device (builder/placement.h) at least 95% where every heavy op has an OpenCL kernel.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/builder/placement.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/sample_inputs.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace kiln::testing {
namespace {

struct ModelCase {
  std::string path;  // under ../shared
  report::SampleOptions samples;
  bool flops_on_device;  // every heavy op has an OpenCL kernel
};

std::string Shared(const std::string& p) { return absl::StrCat(KILN_SOURCE_DIR, "/../shared/", p); }

absl::StatusOr<std::shared_ptr<plan::Engine>> Build(const std::string& path,
                                                    const std::string& device) {
  builder::BuildOptions o;
  o.device = device;
  ASSIGN_OR_RETURN(builder::BuildResult r, builder::BuildEngineFromFile(path, o, nullptr));
  ASSIGN_OR_RETURN(std::unique_ptr<plan::Engine> e,
                   plan::LoadEngineFromBytes(std::make_shared<const std::string>(r.blob)));
  return std::shared_ptr<plan::Engine>(std::move(e));
}

// Sum over the products of the engine of their dot-product lengths K: a first-order bound on
// the relative difference two fp32 summation orders make is 2 * sum K * 2^-24 of the output's
// scale (each layer's sums reordered, the error carried forward unamplified by normalised
// layers). Elementwise ops on the device add a few ulps each, far below it. A node with compiled
// subgraphs (an If's branches) adds the larger of its subgraphs' sums.
double SumK(const plan::Engine& e) {
  double sum_k = 0;
  for (const ir::Node* n : e.order) {
    if (ir::HasSubgraphs(n->op)) {
      double inner = 0;
      for (const auto& [name, a] : n->attrs) {
        if (a.type != ir::Attribute::Type::kGraph || a.s.empty()) continue;
        auto sub = plan::LoadEngineFromBytes(std::make_shared<const std::string>(a.s));
        if (sub.ok()) inner = std::max(inner, SumK(**sub));
      }
      sum_k += inner;
      continue;
    }
    const ir::Value* y = n->outputs.empty() ? nullptr : n->outputs[0];
    if (y == nullptr || !y->shape.rank_known) continue;
    double elements = 1;  // symbolic dims as 1, as NodeFlops counts them
    for (const ir::Dim& d : y->shape.dims) elements *= d.is_static() ? d.value : 1;
    const double flops = builder::NodeFlops(*n);
    if (elements > 0 && flops > 2 * elements) sum_k += flops / (2 * elements);
  }
  return sum_k;
}

double ReorderBound(const plan::Engine& e) { return 2 * SumK(e) * std::ldexp(1.0, -24); }

TEST(OpenClModelsTest, DeviceEnginesMatchTheCpuEngines) {
  report::SampleOptions silero;
  silero.shapes["input"] = {1, 512};
  silero.ranges["sr"] = {16000, 16000};
  const std::vector<ModelCase> cases = {
      {"trained-models/mnist_8/model.onnx", {}, true},
      {"trained-models/super_resolution_10/model.onnx", {}, true},
      {"trained-models/yunet/model.onnx", {}, true},
      // Its work is inside an If's branches: compiled and placed as engines of their own, their
      // counts part of the engine's.
      {"trained-models/silero_vad_ifless/model.onnx", silero, true},
      {"onnx-conformance/light/light_resnet50.onnx", {}, true},
      {"onnx-conformance/light/light_squeezenet.onnx", {}, true},
      {"onnx-conformance/light/light_shufflenet.onnx", {}, true},
  };
  for (const ModelCase& c : cases) {
    SCOPED_TRACE(c.path);
    auto cpu = Build(Shared(c.path), "cpu");
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto dev = Build(Shared(c.path), "opencl");
    ASSERT_TRUE(dev.ok()) << dev.status();
    const v1::Device& d = (*dev)->metadata.device();
    ASSERT_EQ(d.kind(), "opencl");
    const double share = d.flops() > 0 ? d.device_flops() / d.flops() : 1.0;
    std::printf("%s: %d kernels on the device, %d on the CPU, %.1f%% of %.3g FLOPs on the device\n",
                c.path.c_str(), d.device_kernels(), d.cpu_kernels(), 100 * share, d.flops());
    if (c.flops_on_device) EXPECT_GE(share, 0.95);
    auto samples = report::GenerateSamples(*(*cpu)->graph, c.samples);
    ASSERT_TRUE(samples.ok()) << samples.status();
    auto cpu_session = runtime::Session::Create(*cpu);
    auto dev_session = runtime::Session::Create(*dev);
    ASSERT_TRUE(cpu_session.ok() && dev_session.ok());
    auto want = (*cpu_session)->Run(samples->sets[0]);
    auto got = (*dev_session)->Run(samples->sets[0]);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size());
    const double bound = ReorderBound(**cpu);
    for (size_t o = 0; o < want->size(); ++o) {
      const ir::Tensor& w = (*want)[o];
      const ir::Tensor& g = (*got)[o];
      ASSERT_EQ(g.dims(), w.dims()) << "output " << o;
      ASSERT_EQ(g.dtype(), w.dtype()) << "output " << o;
      if (w.dtype() != DataType::kF32) {
        EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), w.byte_size()), 0) << "output " << o;
        continue;
      }
      double scale = 0, worst = 0;
      for (int64_t i = 0; i < w.num_elements(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(w.data<float>()[i])));
        worst = std::max(worst,
                         std::fabs(static_cast<double>(w.data<float>()[i]) - g.data<float>()[i]));
      }
      std::printf("  output %zu: max |difference| %.3g, bound %.3g (scale %.3g)\n", o, worst,
                  bound * scale + 1e-7, scale);
      // 1e-7: an output of exact zeros on one side (a Relu at 0) and a rounding on the other.
      EXPECT_LE(worst, bound * scale + 1e-7) << "output " << o;
    }
  }
}

}  // namespace
}  // namespace kiln::testing
