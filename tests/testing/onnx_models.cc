#include "tests/testing/onnx_models.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <stdexcept>

#include "gtest/gtest.h"

namespace kiln::testing {

const std::vector<float> kAddReluMulWeights = {1, -2, 3, -4, 5, -6};

onnx::NodeProto* AddOnnxNode(onnx::GraphProto* graph, const std::string& op_type,
                             const std::vector<std::string>& inputs,
                             const std::vector<std::string>& outputs, const std::string& name) {
  onnx::NodeProto* n = graph->add_node();
  n->set_op_type(op_type);
  n->set_name(name);
  for (const auto& in : inputs) n->add_input(in);
  for (const auto& out : outputs) n->add_output(out);
  return n;
}

onnx::ValueInfoProto* AddTensorValueInfo(
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
    const std::vector<int64_t>& dims, int32_t elem_type) {
  onnx::ValueInfoProto* vi = list->Add();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  return vi;
}

onnx::TensorProto* AddFloatInitializer(onnx::GraphProto* graph, const std::string& name,
                                       const std::vector<int64_t>& dims,
                                       const std::vector<float>& values) {
  onnx::TensorProto* t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return t;
}

onnx::TensorProto* AddInt64Initializer(onnx::GraphProto* graph, const std::string& name,
                                       const std::vector<int64_t>& values) {
  onnx::TensorProto* t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return t;
}

onnx::TensorProto* AddInt8Initializer(onnx::GraphProto* graph, const std::string& name,
                                      const std::vector<int64_t>& dims,
                                      const std::vector<int>& values, bool is_unsigned) {
  onnx::TensorProto* t = graph->add_initializer();
  t->set_name(name);
  t->set_data_type(is_unsigned ? onnx::TensorProto::UINT8 : onnx::TensorProto::INT8);
  for (int64_t d : dims) t->add_dims(d);
  std::string raw;
  for (int v : values) raw.push_back(static_cast<char>(static_cast<uint8_t>(v)));
  t->set_raw_data(raw);
  return t;
}

std::vector<float> Wave(int64_t n, float scale, float phase) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.61f * i + phase);
  return v;
}

void AddIntsAttribute(onnx::NodeProto* node, const std::string& name,
                      const std::vector<int64_t>& values) {
  auto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : values) a->add_ints(x);
}

onnx::GraphProto* AddSubgraph(onnx::NodeProto* node, const std::string& attr) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name(attr);
  return a->mutable_g();
}

void AddIntAttribute(onnx::NodeProto* node, const std::string& name, int64_t value) {
  auto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

onnx::ModelProto AddReluMulModel(int64_t ir_version, int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(ir_version);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("add_relu_mul");
  AddTensorValueInfo(g->mutable_input(), "x", {2, 3});
  AddFloatInitializer(g, "w", {2, 3}, kAddReluMulWeights);
  AddOnnxNode(g, "Add", {"x", "w"}, {"a"}, "add");
  AddOnnxNode(g, "Relu", {"a"}, {"r"}, "relu");
  AddOnnxNode(g, "Mul", {"r", "w"}, {"y"}, "mul");
  AddTensorValueInfo(g->mutable_output(), "y", {2, 3});
  return m;
}

std::string SerializeModel(const onnx::ModelProto& model) {
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw std::runtime_error("cannot serialize the model");
  return bytes;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/kiln-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& bytes) const {
  std::string p = File(name);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p);
  return p;
}

absl::Status RunWithFifoGuard(const std::string& fifo, const std::function<absl::Status()>& f) {
  auto result = std::async(std::launch::async, f);
  if (result.wait_for(std::chrono::seconds(30)) == std::future_status::timeout) {
    ADD_FAILURE() << "blocked for 30 s on the FIFO " << fifo << " (a hang on hostile input)";
    // A writer that opens and closes at once gives the blocked reader end-of-file.
    int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
  }
  return result.get();
}

}  // namespace kiln::testing
