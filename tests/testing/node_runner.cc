#include "tests/testing/node_runner.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/registry.h"

namespace kiln::testing {
namespace {

class VectorContext final : public kernels::KernelContext {
 public:
  VectorContext(const std::vector<ir::Tensor>& in, int num_outputs) : in_(in), out_(num_outputs) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(in_.size()) && in_[i].defined() ? &in_[i] : nullptr;
  }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i < 0 || i >= static_cast<int>(out_.size())) {
      return absl::InternalError(absl::StrCat("output ", i, " out of range"));
    }
    ASSIGN_OR_RETURN(out_[i], ir::Tensor::Allocate(dtype, std::move(dims)));
    return &out_[i];
  }
  bool output_requested(int i) const override { return true; }
  std::vector<ir::Tensor>& outputs() { return out_; }

 private:
  const std::vector<ir::Tensor>& in_;
  std::vector<ir::Tensor> out_;
};

}  // namespace

absl::StatusOr<std::vector<ir::Tensor>> RunNode(const NodeSpec& spec) {
  ir::Graph g;
  ir::Node* n = g.AddNode(spec.op, "test_node");
  n->since_version = spec.since_version;
  for (const auto& [k, v] : spec.attrs) n->attrs[k] = v;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (!spec.inputs[i].defined()) {
      n->inputs.push_back(nullptr);
      continue;
    }
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("in", i)));
    v->dtype = spec.inputs[i].dtype();
    v->shape = ir::Shape::Of(spec.inputs[i].dims());
    n->inputs.push_back(v);
  }
  for (int i = 0; i < spec.num_outputs; ++i) {
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("out", i)));
    if (i < static_cast<int>(spec.output_dtypes.size())) v->dtype = spec.output_dtypes[i];
    n->outputs.push_back(v);
  }
  g.RebuildEdges();
  ASSIGN_OR_RETURN(const kernels::KernelDef* def, kernels::Registry::Default().Find(*n));
  ASSIGN_OR_RETURN(auto kernel, def->factory(*n));
  VectorContext ctx(spec.inputs, spec.num_outputs);
  RETURN_IF_ERROR(kernel->Run(ctx));
  return std::move(ctx.outputs());
}

template <typename T>
ir::Tensor MakeTensor(std::vector<int64_t> dims, const std::vector<T>& values, DataType dtype) {
  ir::Tensor t = *ir::Tensor::Allocate(dtype, std::move(dims));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template ir::Tensor MakeTensor<float>(std::vector<int64_t>, const std::vector<float>&, DataType);
template ir::Tensor MakeTensor<int64_t>(std::vector<int64_t>, const std::vector<int64_t>&,
                                        DataType);
template ir::Tensor MakeTensor<int32_t>(std::vector<int64_t>, const std::vector<int32_t>&,
                                        DataType);
template ir::Tensor MakeTensor<uint8_t>(std::vector<int64_t>, const std::vector<uint8_t>&,
                                        DataType);
template ir::Tensor MakeTensor<int8_t>(std::vector<int64_t>, const std::vector<int8_t>&, DataType);
template ir::Tensor MakeTensor<uint16_t>(std::vector<int64_t>, const std::vector<uint16_t>&,
                                         DataType);
template ir::Tensor MakeTensor<double>(std::vector<int64_t>, const std::vector<double>&, DataType);

ir::Tensor MakeFloat(std::vector<int64_t> dims, const std::vector<float>& values) {
  return MakeTensor<float>(std::move(dims), values, DataType::kF32);
}
ir::Tensor MakeInt64(std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  return MakeTensor<int64_t>(std::move(dims), values, DataType::kI64);
}

ir::Attribute IntAttr(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}
ir::Attribute FloatAttr(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}
ir::Attribute StringAttr(std::string v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}
ir::Attribute IntsAttr(std::vector<int64_t> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}
ir::Attribute FloatsAttr(std::vector<float> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloats;
  a.floats = std::move(v);
  return a;
}

std::vector<float> ToFloats(const ir::Tensor& t) {
  std::vector<float> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    out[i] = static_cast<float>(ir::ElementAsDouble(t, i));
  }
  return out;
}

}  // namespace kiln::testing
