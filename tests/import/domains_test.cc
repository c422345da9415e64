// Tests of the op-domain rules of the import (ops.def's KILN_DOMAIN_OP ops: ai.onnx.ml,
// ai.onnx.preview, ai.onnx.preview.training): each node resolves its version from the opset its
// model imports for ITS domain; a domain missing from opset_import, an opset outside the
// domain's range and an op not yet defined at the imported opset are errors naming the op, the
// domain and the opset; known but unimplemented ops of those domains are Unimplemented. And
// engines with domain ops round-trip through the engine blob.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/op_schemas.h"
#include "engine/ir/op_type.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_models.h"

namespace kiln::import {
namespace {

using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;
using ::testing::HasSubstr;

// x: float[2, 3] -> Binarizer (ai.onnx.ml, threshold 0.5) -> y, with the default domain at
// opset 21 and ai.onnx.ml at `ml_opset` (no ai.onnx.ml import when it is 0).
onnx::ModelProto BinarizerModel(int64_t ml_opset) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* def = m.add_opset_import();
  def->set_domain("");
  def->set_version(21);
  if (ml_opset > 0) {
    auto* ml = m.add_opset_import();
    ml->set_domain("ai.onnx.ml");
    ml->set_version(ml_opset);
  }
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("g");
  AddTensorValueInfo(g->mutable_input(), "x", {2, 3});
  AddTensorValueInfo(g->mutable_output(), "y", {2, 3});
  onnx::NodeProto* n = AddOnnxNode(g, "Binarizer", {"x"}, {"y"}, "bin");
  n->set_domain("ai.onnx.ml");
  auto* a = n->add_attribute();
  a->set_name("threshold");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(0.5f);
  return m;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> Import(const onnx::ModelProto& m) {
  return ImportModel(SerializeModel(m), {});
}

TEST(OpDomains, OpTableKnowsDomainsAndNames) {
  auto op = ir::OpFromName("ai.onnx.ml", "LabelEncoder");
  ASSERT_TRUE(op.has_value());
  EXPECT_STREQ(ir::OpDomain(*op), "ai.onnx.ml");
  EXPECT_STREQ(ir::OpName(*op), "LabelEncoder");
  // The default domain under its two names; a domain op is not found in another domain.
  EXPECT_EQ(ir::OpFromName("", "Relu"), ir::OpFromName("ai.onnx", "Relu"));
  EXPECT_STREQ(ir::OpDomain(*ir::OpFromName("", "Relu")), "");
  EXPECT_FALSE(ir::OpFromName("", "LabelEncoder").has_value());
  EXPECT_FALSE(ir::OpFromName("ai.onnx.ml", "Relu").has_value());
  EXPECT_STREQ(ir::OpDomain(ir::OpType::kAdam), "ai.onnx.preview.training");
  EXPECT_STREQ(ir::OpDomain(ir::OpType::kFlexAttention), "ai.onnx.preview");
  // Names are unique across domains: the name alone finds the op (engine blobs store names).
  for (int i = 0; i < static_cast<int>(ir::OpType::kNumOps); ++i) {
    const auto op_i = static_cast<ir::OpType>(i);
    EXPECT_EQ(ir::OpFromName(ir::OpName(op_i)), op_i) << ir::OpName(op_i);
    EXPECT_EQ(ir::OpFromName(ir::OpDomain(op_i), ir::OpName(op_i)), op_i) << ir::OpName(op_i);
  }
  EXPECT_EQ(MaxDomainOpset("ai.onnx.ml"), 5);
  EXPECT_EQ(MaxDomainOpset(""), kMaxOpset);
  EXPECT_FALSE(MaxDomainOpset("com.example").has_value());
  EXPECT_TRUE(IsKnownUnsupportedOp("ai.onnx.ml", "SVMClassifier"));
  EXPECT_FALSE(IsKnownUnsupportedOp("", "SVMClassifier"));
  EXPECT_FALSE(IsKnownUnsupportedOp("ai.onnx.ml", "Binarizer"));  // implemented
}

TEST(OpDomains, VersionsFollowTheirOwnDomain) {
  // LabelEncoder: versions 1, 2 and 4 of ai.onnx.ml; TreeEnsemble only from 5.
  EXPECT_EQ(ResolveOpVersion(ir::OpType::kLabelEncoder, 3)->since_version, 2);
  EXPECT_EQ(ResolveOpVersion(ir::OpType::kLabelEncoder, 5)->since_version, 4);
  EXPECT_FALSE(ResolveOpVersion(ir::OpType::kTreeEnsemble, 4).has_value());
  EXPECT_EQ(ResolveOpVersion(ir::OpType::kTreeEnsemble, 5)->since_version, 5);
}

TEST(OpDomains, NodeTakesItsDomainsOpset) {
  auto g = Import(BinarizerModel(3));
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node& n = *(*g)->nodes()[0];
  EXPECT_EQ(n.op, ir::OpType::kBinarizer);
  EXPECT_EQ(n.since_version, 1);  // ai.onnx.ml's, not the default domain's 21
  EXPECT_EQ((*g)->outputs()[0]->dtype, DataType::kF32);
}

TEST(OpDomains, DomainMissingFromOpsetImportIsAnError) {
  auto g = Import(BinarizerModel(0));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'bin' (Binarizer)"));
  EXPECT_THAT(g.status().message(), HasSubstr("domain 'ai.onnx.ml' is not in opset_import"));
}

TEST(OpDomains, OpsetOutsideTheDomainsRange) {
  for (int64_t v : {6, 1000}) {
    auto g = Import(BinarizerModel(v));
    ASSERT_FALSE(g.ok()) << v;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(g.status().message(), HasSubstr("domain 'ai.onnx.ml' opset " + std::to_string(v) +
                                                " is outside the supported range 1..5"));
  }
  onnx::ModelProto twice = BinarizerModel(1);
  *twice.add_opset_import() = twice.opset_import(1);
  auto g = Import(twice);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("lists domain 'ai.onnx.ml' twice"));
}

TEST(OpDomains, OpNotYetDefinedAtTheImportedOpset) {
  onnx::ModelProto m = BinarizerModel(4);
  m.mutable_graph()->mutable_node(0)->set_op_type("TreeEnsemble");  // ai.onnx.ml 5 and later
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(),
              HasSubstr("op TreeEnsemble of domain 'ai.onnx.ml' does not exist at opset 4"));
}

TEST(OpDomains, UnimplementedAndUnknownOpsOfAKnownDomain) {
  onnx::ModelProto m = BinarizerModel(3);
  m.mutable_graph()->mutable_node(0)->set_op_type("SVMClassifier");
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("op SVMClassifier of domain 'ai.onnx.ml'"));
  // A default-domain op name in the ml domain is not an ai.onnx.ml op.
  m.mutable_graph()->mutable_node(0)->set_op_type("Relu");
  g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(),
              HasSubstr("op 'Relu' is not an ONNX op of domain 'ai.onnx.ml'"));
  // And an ml op in the default domain is not a default-domain op.
  m.mutable_graph()->mutable_node(0)->set_op_type("Binarizer");
  m.mutable_graph()->mutable_node(0)->clear_domain();
  g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("op 'Binarizer' is not an ONNX op"));
}

TEST(OpDomains, DomainsKilnDoesNotKnowStayUnimplemented) {
  onnx::ModelProto m = BinarizerModel(3);
  auto* imp = m.add_opset_import();
  imp->set_domain("com.example");
  imp->set_version(7);  // any version: Kiln has no table for this domain
  m.mutable_graph()->mutable_node(0)->set_domain("com.example");
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("op Binarizer of domain 'com.example'"));
}

TEST(OpDomains, StringLabelEncoderFailsNamingTheNode) {
  onnx::ModelProto m = BinarizerModel(2);
  onnx::NodeProto* n = m.mutable_graph()->mutable_node(0);
  n->set_op_type("LabelEncoder");
  n->clear_attribute();
  auto* k = n->add_attribute();
  k->set_name("keys_floats");
  k->set_type(onnx::AttributeProto::FLOATS);
  k->add_floats(1.0f);
  auto* v = n->add_attribute();
  v->set_name("values_strings");
  v->set_type(onnx::AttributeProto::STRINGS);
  v->add_strings("one");
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'bin' (LabelEncoder)"));
  EXPECT_THAT(g.status().message(), HasSubstr("unsupported dtype string"));
  EXPECT_THAT(g.status().message(), HasSubstr("values_strings"));
}

TEST(OpDomains, DomainOpsRoundTripThroughTheEngineBlob) {
  auto built = builder::BuildEngine(SerializeModel(BinarizerModel(1)), {}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->metadata.kernels_size(), 1);
  EXPECT_EQ((*engine)->metadata.kernels(0).op_type(), "Binarizer");
  EXPECT_EQ((*engine)->metadata.kernels(0).since_version(), 1);
  auto session = runtime::Session::Create(std::shared_ptr<const plan::Engine>(std::move(*engine)));
  ASSERT_TRUE(session.ok()) << session.status();
  auto x = ir::Tensor::Allocate(DataType::kF32, {2, 3});
  ASSERT_TRUE(x.ok());
  const float xs[6] = {0.4f, 0.5f, 0.6f, -1.0f, 3.0f, 0.5001f};
  std::memcpy(x->raw_data(), xs, sizeof(xs));
  auto out = (*session)->Run({*x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const float want[6] = {0, 0, 1, 0, 1, 1};  // x > 0.5 (0.5 itself is not above)
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*out)[0].data<float>()[i], want[i]) << i;
}

}  // namespace
}  // namespace kiln::import
