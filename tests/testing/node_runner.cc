#include "tests/testing/node_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/kernels/device.h"
#include "engine/kernels/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::testing {
namespace {

class VectorContext final : public kernels::KernelContext {
 public:
  VectorContext(const std::vector<ir::Tensor>& in, int num_outputs,
                kernels::DeviceRuntime* device = nullptr)
      : in_(in), out_(num_outputs), device_(device) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(in_.size()) && in_[i].defined() ? &in_[i] : nullptr;
  }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i < 0 || i >= static_cast<int>(out_.size())) {
      return absl::InternalError(absl::StrCat("output ", i, " out of range"));
    }
    if (device_ != nullptr) {
      ASSIGN_OR_RETURN(out_[i], device_->Allocate(dtype, std::move(dims)));
    } else {
      ASSIGN_OR_RETURN(out_[i], ir::Tensor::Allocate(dtype, std::move(dims)));
    }
    return &out_[i];
  }
  bool output_requested(int i) const override { return true; }
  std::vector<ir::Tensor>& outputs() { return out_; }

 private:
  const std::vector<ir::Tensor>& in_;
  std::vector<ir::Tensor> out_;
  kernels::DeviceRuntime* device_;
};

}  // namespace

absl::StatusOr<std::vector<ir::Tensor>> RunNode(const NodeSpec& spec) {
  ir::Graph g;
  ir::Node* n = g.AddNode(spec.op, "test_node");
  n->since_version = spec.since_version;
  for (const auto& [k, v] : spec.attrs) n->attrs[k] = v;
  if (spec.opencl) n->attrs[kernels::kBackendAttr] = StringAttr("opencl");
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (!spec.inputs[i].defined()) {
      n->inputs.push_back(nullptr);
      continue;
    }
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("in", i)));
    v->dtype = spec.inputs[i].dtype();
    v->shape = ir::Shape::Of(spec.inputs[i].dims());
    if (std::find(spec.constant_inputs.begin(), spec.constant_inputs.end(), static_cast<int>(i)) !=
        spec.constant_inputs.end()) {
      v->constant = spec.inputs[i];
    }
    n->inputs.push_back(v);
  }
  for (int i = 0; i < spec.num_outputs; ++i) {
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("out", i)));
    if (i < static_cast<int>(spec.output_dtypes.size())) v->dtype = spec.output_dtypes[i];
    n->outputs.push_back(v);
  }
  g.RebuildEdges();
  const kernels::Registry& reg = kernels::Registry::Default();
  ASSIGN_OR_RETURN(const kernels::KernelDef* def,
                   spec.cpu_features ? reg.Find(*n, *spec.cpu_features) : reg.Find(*n));
  ASSIGN_OR_RETURN(auto kernel, def->factory(*n));
  if (spec.opencl) {
    ASSIGN_OR_RETURN(const kernels::DeviceDescription dev, kernels::DescribeDevice("opencl"));
    ASSIGN_OR_RETURN(std::shared_ptr<kernels::DeviceRuntime> rt, kernels::OpenDeviceRuntime(dev));
    std::vector<ir::Tensor> inputs;
    for (const ir::Tensor& t : spec.inputs) {
      if (!t.defined()) {
        inputs.emplace_back();
        continue;
      }
      ASSIGN_OR_RETURN(inputs.emplace_back(), rt->Upload(t));
    }
    std::vector<ir::Tensor> out;
    for (int r = 0; r < spec.runs; ++r) {
      VectorContext ctx(inputs, spec.num_outputs, rt.get());
      RETURN_IF_ERROR(kernel->Run(ctx));
      out = std::move(ctx.outputs());
    }
    for (ir::Tensor& t : out) {
      if (!t.defined()) continue;
      ASSIGN_OR_RETURN(ir::Tensor host, ir::Tensor::AllocateUninitialized(t.dtype(), t.dims()));
      RETURN_IF_ERROR(rt->Download(t, host));
      t = std::move(host);
    }
    return out;
  }
  for (int r = 1; r < spec.runs; ++r) {
    VectorContext ctx(spec.inputs, spec.num_outputs);
    RETURN_IF_ERROR(kernel->Run(ctx));
  }
  VectorContext ctx(spec.inputs, spec.num_outputs);
  RETURN_IF_ERROR(kernel->Run(ctx));
  return std::move(ctx.outputs());
}

std::vector<ir::Tensor> RunNodeOk(const NodeSpec& spec) {
  absl::StatusOr<std::vector<ir::Tensor>> r = RunNode(spec);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return std::vector<ir::Tensor>(spec.num_outputs);
  return *std::move(r);
}

ir::Tensor RunNodeOk0(const NodeSpec& spec) {
  std::vector<ir::Tensor> out = RunNodeOk(spec);
  return out.empty() ? ir::Tensor() : std::move(out[0]);
}

void ExpectStatusError(const absl::Status& status, absl::StatusCode code,
                       const std::string& fragment) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("test_node")) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(fragment)) << status;
}

void ExpectNodeError(const NodeSpec& spec, absl::StatusCode code, const std::string& fragment) {
  absl::StatusOr<std::vector<ir::Tensor>> r = RunNode(spec);
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << fragment << "'";
  ExpectStatusError(r.status(), code, fragment);
}

template <typename T>
ir::Tensor MakeTensor(std::vector<int64_t> dims, const std::vector<T>& values, DataType dtype) {
  ir::Tensor t = *ir::Tensor::Allocate(dtype, std::move(dims));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
#define KILN_INSTANTIATE_MAKE_TENSOR(T) \
  template ir::Tensor MakeTensor<T>(std::vector<int64_t>, const std::vector<T>&, DataType);
KILN_INSTANTIATE_MAKE_TENSOR(int8_t)
KILN_INSTANTIATE_MAKE_TENSOR(int16_t)
KILN_INSTANTIATE_MAKE_TENSOR(int32_t)
KILN_INSTANTIATE_MAKE_TENSOR(int64_t)
KILN_INSTANTIATE_MAKE_TENSOR(uint8_t)
KILN_INSTANTIATE_MAKE_TENSOR(uint16_t)
KILN_INSTANTIATE_MAKE_TENSOR(uint32_t)
KILN_INSTANTIATE_MAKE_TENSOR(uint64_t)
KILN_INSTANTIATE_MAKE_TENSOR(float)
KILN_INSTANTIATE_MAKE_TENSOR(double)
#undef KILN_INSTANTIATE_MAKE_TENSOR

ir::Tensor MakeFloat(std::vector<int64_t> dims, const std::vector<float>& values) {
  return MakeTensor<float>(std::move(dims), values, DataType::kF32);
}
ir::Tensor MakeInt64(std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  return MakeTensor<int64_t>(std::move(dims), values, DataType::kI64);
}
ir::Tensor MakeHalf(std::vector<int64_t> dims, const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = FloatToHalfBits(values[i]);
  return MakeTensor<uint16_t>(std::move(dims), bits, DataType::kF16);
}
ir::Tensor MakeBf16(std::vector<int64_t> dims, const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = FloatToBFloat16Bits(values[i]);
  return MakeTensor<uint16_t>(std::move(dims), bits, DataType::kBF16);
}

std::vector<float> Iota(int n, float start) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

ir::Attribute IntAttr(int64_t v) { return ir::Attribute::Int(v); }
ir::Attribute FloatAttr(float v) { return ir::Attribute::Float(v); }
ir::Attribute StringAttr(std::string v) { return ir::Attribute::String(std::move(v)); }
ir::Attribute IntsAttr(std::vector<int64_t> v) { return ir::Attribute::Ints(std::move(v)); }
ir::Attribute FloatsAttr(std::vector<float> v) { return ir::Attribute::Floats(std::move(v)); }
ir::Attribute TensorAttr(ir::Tensor v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kTensor;
  a.t = std::move(v);
  return a;
}

std::vector<float> ToFloats(const ir::Tensor& t) {
  std::vector<float> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    out[i] = static_cast<float>(ir::ElementAsDouble(t, i));
  }
  return out;
}

std::vector<uint16_t> Bits16(const ir::Tensor& t) {
  if (DataTypeSize(t.dtype()) != 2) return {};
  return Values<uint16_t>(t);
}

}  // namespace kiln::testing
