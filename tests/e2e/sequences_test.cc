// Sequences and optionals end to end: models built in C++ whose values are seq(tensor) or
// optional(...), built (at fp32 and at reduced precision), written to a blob, loaded and run;
// sequences as graph inputs and outputs; the import errors for a container where an op takes a
// tensor; the serialized forms (SequenceProto / OptionalProto). Values are small integers in
// float, exact at every precision used.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/import/value_proto.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"
#include "tests/testing/run_model.h"

namespace kiln {
namespace {

using testing::AddIntAttribute;
using testing::AddOnnxNode;
using testing::AddSubgraph;
using testing::AddTensorValueInfo;
using testing::BuildAndRun;
using ::testing::ElementsAre;
using testing::Floats;
using ::testing::HasSubstr;
using testing::NewModel;
using testing::Scalar;
using testing::Values;

// A ValueInfo of type seq(tensor(elem)) (optional(...) of it when `optional`), rank unknown.
void AddSequenceValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                          const std::string& name, bool optional = false,
                          int32_t elem = onnx::TensorProto::FLOAT) {
  onnx::ValueInfoProto* vi = list->Add();
  vi->set_name(name);
  onnx::TypeProto* t = vi->mutable_type();
  if (optional) t = t->mutable_optional_type()->mutable_elem_type();
  t->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(elem);
}

// y = ConcatFromSequence(SequenceMap(SplitToSequence(x, axis 0), body: e * e + e), axis 0):
// x [3, 2] split into three [1, 2] rows, each mapped by the body, concatenated back.
onnx::ModelProto SplitMapConcatModel() {
  onnx::ModelProto m = NewModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {3, 2});
  AddOnnxNode(g, "SplitToSequence", {"x"}, {"rows"}, "split");
  onnx::NodeProto* map = AddOnnxNode(g, "SequenceMap", {"rows"}, {"mapped"}, "map");
  onnx::GraphProto* body = AddSubgraph(map, "body");
  AddTensorValueInfo(body->mutable_input(), "e", {1, 2});
  AddOnnxNode(body, "Mul", {"e", "e"}, {"sq"}, "mul");
  AddOnnxNode(body, "Add", {"sq", "e"}, {"r"}, "add");
  AddTensorValueInfo(body->mutable_output(), "r", {1, 2});
  onnx::NodeProto* concat = AddOnnxNode(g, "ConcatFromSequence", {"mapped"}, {"y"}, "concat");
  AddIntAttribute(concat, "axis", 0);
  AddOnnxNode(g, "SequenceLength", {"mapped"}, {"n"}, "length");
  AddTensorValueInfo(g->mutable_output(), "y", {3, 2});
  AddTensorValueInfo(g->mutable_output(), "n", {}, onnx::TensorProto::INT64);
  return m;
}

TEST(Sequences, SplitMapConcatRunsAtEveryPrecision) {
  const ir::Tensor x = Floats({3, 2}, {1, 2, 3, -1, 0, 4});
  for (const char* policy : {"", "fp16", "bf16"}) {
    builder::BuildOptions opts;
    opts.policy = policy;
    auto out = BuildAndRun(SplitMapConcatModel(), {x}, opts);
    ASSERT_TRUE(out.ok()) << policy << ": " << out.status();
    EXPECT_THAT(Values((*out)[0]), ElementsAre(2, 6, 12, 0, 0, 20)) << policy;
    EXPECT_EQ((*out)[1].data<int64_t>()[0], 3) << policy;
  }
}

// out = SequenceInsert(seq, t, position) with seq a graph input and out a graph output.
onnx::ModelProto InsertModel() {
  onnx::ModelProto m = NewModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddSequenceValueInfo(g->mutable_input(), "seq");
  AddTensorValueInfo(g->mutable_input(), "t", {2});
  AddTensorValueInfo(g->mutable_input(), "pos", {}, onnx::TensorProto::INT64);
  AddOnnxNode(g, "SequenceInsert", {"seq", "t", "pos"}, {"out"}, "insert");
  AddOnnxNode(g, "SequenceAt", {"out", "pos"}, {"at"}, "at");
  AddSequenceValueInfo(g->mutable_output(), "out");
  AddTensorValueInfo(g->mutable_output(), "at", {2});
  return m;
}

TEST(Sequences, SequenceGraphInputsAndOutputs) {
  const ir::Tensor seq =
      ir::Tensor::Sequence(DataType::kF32, {Floats({2}, {1, 2}), Floats({3}, {3, 4, 5})});
  auto out =
      BuildAndRun(InsertModel(), {seq, Floats({2}, {7, 8}), Scalar(DataType::kI64, int64_t{-1})});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE((*out)[0].is_sequence());
  ASSERT_EQ((*out)[0].elements().size(), 3u);
  EXPECT_THAT(Values((*out)[0].elements()[0]), ElementsAre(1, 2));
  EXPECT_THAT(Values((*out)[0].elements()[1]), ElementsAre(7, 8));  // before the last
  EXPECT_THAT(Values((*out)[0].elements()[2]), ElementsAre(3, 4, 5));
  EXPECT_THAT(Values((*out)[1]), ElementsAre(3, 4, 5));  // SequenceAt(out, -1): the last
  // The input sequence is not changed by the insert (sequences are values).
  EXPECT_EQ(seq.elements().size(), 2u);
}

TEST(Sequences, ErrorsNameTheNodeInputAndPosition) {
  const ir::Tensor seq = ir::Tensor::Sequence(DataType::kF32, {Floats({2}, {1, 2})});
  auto far =
      BuildAndRun(InsertModel(), {seq, Floats({2}, {7, 8}), Scalar(DataType::kI64, int64_t{5})});
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(far.status().message(), HasSubstr("insert"));
  EXPECT_THAT(far.status().message(), HasSubstr("position 5 is outside [-1, 1]"));
  // A tensor where the engine takes a sequence, and a sequence of the wrong element type.
  auto dense = BuildAndRun(InsertModel(), {Floats({2}, {1, 2}), Floats({2}, {7, 8}),
                                           Scalar(DataType::kI64, int64_t{0})});
  ASSERT_FALSE(dense.ok());
  EXPECT_THAT(dense.status().message(), HasSubstr("input 0 'seq' must be seq(tensor(float))"));
  const ir::Tensor ints = ir::Tensor::Sequence(DataType::kI64, {Scalar(DataType::kI64, 1L)});
  auto wrong =
      BuildAndRun(InsertModel(), {ints, Floats({2}, {7, 8}), Scalar(DataType::kI64, int64_t{0})});
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("input 0 'seq'"));
}

TEST(Sequences, AContainerWhereAnOpTakesATensorIsAnImportError) {
  onnx::ModelProto m = NewModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {2});
  AddOnnxNode(g, "SequenceConstruct", {"x", "x"}, {"s"}, "construct");
  AddOnnxNode(g, "Relu", {"s"}, {"y"}, "relu");
  AddTensorValueInfo(g->mutable_output(), "y", {2});
  auto built = builder::BuildEngine(testing::SerializeModel(m), {}, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(built.status().message(),
              HasSubstr("[node 'relu' (Relu) #1] input 0 's' is seq(tensor(float)); the op "
                        "takes a tensor there"));
}

// A Loop that appends i * x to a sequence (starting empty) each iteration; then the sequence's
// length, and the sequence wrapped in an optional, unwrapped and concatenated.
onnx::ModelProto LoopSequenceModel() {
  onnx::ModelProto m = NewModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "trips", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(g->mutable_input(), "x", {2});
  AddOnnxNode(g, "SequenceEmpty", {}, {"empty"}, "empty");
  onnx::NodeProto* loop = AddOnnxNode(g, "Loop", {"trips", "", "empty"}, {"seq"}, "Loop_0");
  onnx::GraphProto* body = AddSubgraph(loop, "body");
  AddTensorValueInfo(body->mutable_input(), "i", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(body->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  AddSequenceValueInfo(body->mutable_input(), "acc");
  AddIntAttribute(AddOnnxNode(body, "Cast", {"i"}, {"fi"}, "cast"), "to", onnx::TensorProto::FLOAT);
  AddOnnxNode(body, "Mul", {"fi", "x"}, {"ix"}, "mul");
  AddOnnxNode(body, "SequenceInsert", {"acc", "ix"}, {"acc_out"}, "insert");
  AddOnnxNode(body, "Identity", {"c"}, {"c_out"}, "keep_going");
  AddTensorValueInfo(body->mutable_output(), "c_out", {}, onnx::TensorProto::BOOL);
  AddSequenceValueInfo(body->mutable_output(), "acc_out");
  AddOnnxNode(g, "SequenceLength", {"seq"}, {"n"}, "length");
  AddOnnxNode(g, "Optional", {"seq"}, {"opt"}, "optional");
  AddOnnxNode(g, "OptionalHasElement", {"opt"}, {"has"}, "has");
  AddOnnxNode(g, "OptionalGetElement", {"opt"}, {"back"}, "get");
  AddIntAttribute(AddOnnxNode(g, "ConcatFromSequence", {"back"}, {"all"}, "concat"), "axis", 0);
  AddTensorValueInfo(g->mutable_output(), "n", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(g->mutable_output(), "has", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(g->mutable_output(), "all", {-1});
  return m;
}

TEST(Sequences, LoopCarriesASequenceThroughAnOptional) {
  for (const char* policy : {"", "fp16"}) {
    builder::BuildOptions opts;
    opts.policy = policy;
    auto out = BuildAndRun(LoopSequenceModel(),
                           {Scalar(DataType::kI64, int64_t{3}), Floats({2}, {1, -2})}, opts);
    ASSERT_TRUE(out.ok()) << policy << ": " << out.status();
    EXPECT_EQ((*out)[0].data<int64_t>()[0], 3);
    EXPECT_TRUE((*out)[1].data<bool>()[0]);
    EXPECT_THAT(Values((*out)[2]), ElementsAre(0, 0, 1, -2, 2, -4)) << policy;
  }
  // No iteration: an empty sequence, which ConcatFromSequence refuses naming the node.
  auto none =
      BuildAndRun(LoopSequenceModel(), {Scalar(DataType::kI64, int64_t{0}), Floats({2}, {1, -2})});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("[node 'concat'"));
  EXPECT_THAT(none.status().message(), HasSubstr("cannot concatenate an empty sequence"));
}

// has = OptionalHasElement(If(c) then Optional(x) else Optional(type=tensor(float))).
onnx::ModelProto OptionalIfModel() {
  onnx::ModelProto m = NewModel(18);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(g->mutable_input(), "x", {2});
  onnx::NodeProto* iff = AddOnnxNode(g, "If", {"c"}, {"o"}, "If_0");
  onnx::GraphProto* then_g = AddSubgraph(iff, "then_branch");
  AddOnnxNode(then_g, "Optional", {"x"}, {"some"}, "some");
  then_g->add_output()->set_name("some");
  onnx::GraphProto* else_g = AddSubgraph(iff, "else_branch");
  onnx::NodeProto* none = AddOnnxNode(else_g, "Optional", {}, {"none"}, "none");
  onnx::AttributeProto* type = none->add_attribute();
  type->set_name("type");
  type->set_type(onnx::AttributeProto::TYPE_PROTO);
  type->mutable_tp()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  else_g->add_output()->set_name("none");
  AddOnnxNode(g, "OptionalHasElement", {"o"}, {"has"}, "has");
  AddTensorValueInfo(g->mutable_output(), "has", {}, onnx::TensorProto::BOOL);
  return m;
}

TEST(Sequences, OptionalsThroughIfBranches) {
  const ir::Tensor x = Floats({2}, {1, 2});
  auto some = BuildAndRun(OptionalIfModel(), {Scalar(DataType::kBool, true), x});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_TRUE((*some)[0].data<bool>()[0]);
  auto none = BuildAndRun(OptionalIfModel(), {Scalar(DataType::kBool, false), x});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE((*none)[0].data<bool>()[0]);
}

TEST(Sequences, KindsSurviveTheEngineBlob) {
  auto built = builder::BuildEngine(testing::SerializeModel(InsertModel()), {}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->graph->inputs()[0]->kind, ir::ValueKind::kSequence);
  EXPECT_EQ((*engine)->graph->inputs()[1]->kind, ir::ValueKind::kTensor);
  EXPECT_EQ((*engine)->graph->outputs()[0]->kind, ir::ValueKind::kSequence);
  EXPECT_EQ((*engine)->graph->outputs()[0]->dtype, DataType::kF32);
}

TEST(Sequences, SerializedFormsRoundTrip) {
  const ir::Tensor seq =
      ir::Tensor::Sequence(DataType::kF32, {Floats({2}, {1, 2}), Floats({1}, {3})});
  for (ir::ValueKind kind : {ir::ValueKind::kSequence, ir::ValueKind::kOptionalSequence}) {
    auto bytes = import::SerializeValueProto(seq, kind, "s");
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    auto back = import::ParseValueProto(*bytes, kind, DataType::kF32, "s.pb");
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_TRUE(back->is_sequence());
    ASSERT_EQ(back->elements().size(), 2u);
    EXPECT_THAT(Values(back->elements()[1]), ElementsAre(3));
  }
  auto none = import::SerializeValueProto(ir::Tensor::None(DataType::kF32),
                                          ir::ValueKind::kOptionalTensor, "o");
  ASSERT_TRUE(none.ok()) << none.status();
  auto back = import::ParseValueProto(*none, ir::ValueKind::kOptionalTensor, DataType::kF32, "o");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->is_none());
  // An optional holding a sequence read where the model takes an optional tensor.
  auto seq_bytes = import::SerializeValueProto(seq, ir::ValueKind::kOptionalSequence, "s");
  auto mismatch =
      import::ParseValueProto(*seq_bytes, ir::ValueKind::kOptionalTensor, DataType::kF32, "x.pb");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(mismatch.status().message(), HasSubstr("x.pb"));
}

}  // namespace
}  // namespace kiln
