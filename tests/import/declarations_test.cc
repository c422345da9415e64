// Declared types as ONNX Runtime reads them (issue 28): dim_value -1 and an empty dim are
// unknown; every "?" dim (Paddle's name for any unknown dim) and every empty dim_param is its
// own unknown, not one symbol shared by all; a declared output or value_info shape that
// disagrees with shape inference is a build warning (inference wins), never an error, at build
// or at run time. Each model is imported, built and run.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using ::kiln::testing::AddInt64Initializer;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::SerializeModel;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A tensor ValueInfo whose dims are written as given: a number is a dim_value ("-1" too), "" a
// dim with neither value nor param, anything else a dim_param ("?", "n").
void AddDecl(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
             const std::string& name, const std::vector<std::string>& dims,
             int32_t elem_type = onnx::TensorProto::FLOAT) {
  onnx::ValueInfoProto* vi = list->Add();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = shape->add_dim();
    int64_t v;
    if (d.empty()) continue;
    if (absl::SimpleAtoi(d, &v)) {
      dim->set_dim_value(v);
    } else {
      dim->set_dim_param(d);
    }
  }
}

// Inputs x [-1, 3], p [?, ?], q [?], e [<empty>, 2], n1 [n], n2 [n], s int64 [2].
// t = Relu(x), declared by value_info as [9] (wrong); y = Neg(t), declared [5, 7] (wrong);
// zp = Relu(p) [?, ?]; zq = Relu(q) [-1]; ze = Relu(e); sum = n1 + n2 [n];
// r = Reshape(x, s), declared [5, 7]: inference cannot know it, so the declaration stays as a
// hint, and a wrong one must not matter at run time either.
onnx::ModelProto DeclarationsModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("paddle2onnx-like");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("declarations");
  AddDecl(g->mutable_input(), "x", {"-1", "3"});
  AddDecl(g->mutable_input(), "p", {"?", "?"});
  AddDecl(g->mutable_input(), "q", {"?"});
  AddDecl(g->mutable_input(), "e", {"", "2"});
  AddDecl(g->mutable_input(), "n1", {"n"});
  AddDecl(g->mutable_input(), "n2", {"n"});
  // A Reshape target of unknown length: r's rank is unknown to inference.
  AddDecl(g->mutable_input(), "s", {"?"}, onnx::TensorProto::INT64);
  AddOnnxNode(g, "Relu", {"x"}, {"t"}, "relu_x");
  AddOnnxNode(g, "Neg", {"t"}, {"y"}, "neg");
  AddOnnxNode(g, "Relu", {"p"}, {"zp"}, "relu_p");
  AddOnnxNode(g, "Relu", {"q"}, {"zq"}, "relu_q");
  AddOnnxNode(g, "Relu", {"e"}, {"ze"}, "relu_e");
  AddOnnxNode(g, "Add", {"n1", "n2"}, {"sum"}, "add_n");
  AddOnnxNode(g, "Reshape", {"x", "s"}, {"r"}, "reshape");
  AddDecl(g->mutable_value_info(), "t", {"9"});
  AddDecl(g->mutable_output(), "y", {"5", "7"});
  AddDecl(g->mutable_output(), "zp", {"?", "?"});
  AddDecl(g->mutable_output(), "zq", {"-1"});
  AddDecl(g->mutable_output(), "ze", {"", "2"});
  AddDecl(g->mutable_output(), "sum", {"n"});
  AddDecl(g->mutable_output(), "r", {"5", "7"});
  return m;
}

ir::Tensor Floats(const std::vector<int64_t>& dims) {
  auto t = ir::Tensor::Allocate(DataType::kF32, dims);
  EXPECT_TRUE(t.ok());
  for (int64_t i = 0; i < t->num_elements(); ++i) t->data<float>()[i] = 0.5f * (i % 5) - 1;
  return *t;
}

ir::Tensor Int64s(const std::vector<int64_t>& v) {
  auto t = ir::Tensor::Allocate(DataType::kI64, {static_cast<int64_t>(v.size())});
  EXPECT_TRUE(t.ok());
  for (size_t i = 0; i < v.size(); ++i) t->data<int64_t>()[i] = v[i];
  return *t;
}

TEST(Declarations, UnknownDimsAreAnonymousAndNamedOnesShared) {
  auto g = import::ImportModel(SerializeModel(DeclarationsModel()), import::ImportOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  auto dims = [&](const std::string& name) -> const std::vector<ir::Dim>& {
    return (*g)->FindValue(name)->shape.dims;
  };
  for (const char* name : {"x", "p", "q", "e"}) {
    SCOPED_TRACE(name);
    const ir::Dim& d = dims(name)[0];
    EXPECT_FALSE(d.is_static());
    EXPECT_EQ(d.symbol, "");  // anonymous: binds nothing shared
  }
  EXPECT_EQ(dims("p")[1].symbol, "");
  EXPECT_EQ(dims("x")[1].value, 3);
  EXPECT_EQ(dims("e")[1].value, 2);
  EXPECT_EQ(dims("n1")[0].symbol, "n");
  // Inference wins over the wrong declarations: t and y are [?, 3].
  EXPECT_EQ((*g)->FindValue("t")->shape.ToString(), "[?,3]");
  EXPECT_EQ((*g)->FindValue("y")->shape.ToString(), "[?,3]");
  // r: inference gives no shape; the declared one is kept as a hint.
  EXPECT_EQ((*g)->FindValue("r")->shape.ToString(), "[5,7]");
  // One warning per disagreeing output, one for the value_infos; none for r (no disagreement
  // inference could see) or the outputs whose declarations agree.
  const auto& w = (*g)->import_warnings();
  ASSERT_EQ(w.size(), 2u) << ::testing::PrintToString(w);
  EXPECT_THAT(w[0], AllOf(HasSubstr("graph output #0 'y'"), HasSubstr("declared [5,7]"),
                          HasSubstr("inference gives [?,3]")));
  EXPECT_THAT(w[1], AllOf(HasSubstr("value_info 't'"), HasSubstr("declared [9]"),
                          HasSubstr("inference gives [?,3]")));
}

TEST(Declarations, NegativeDimsOtherThanMinusOneAreErrors) {
  onnx::ModelProto m = DeclarationsModel();
  m.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(-2);
  auto g = import::ImportModel(SerializeModel(m), import::ImportOptions{});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()),
              AllOf(HasSubstr("'x' dim 0"), HasSubstr("negative (-2")));
}

TEST(Declarations, BuildWarnsAndRunsWithEachUnknownDimItsOwnSize) {
  auto built =
      builder::BuildEngine(SerializeModel(DeclarationsModel()), builder::BuildOptions{}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  std::string all;
  for (const std::string& w : built->summary.warnings) all += w + "\n";
  EXPECT_THAT(all, AllOf(HasSubstr("graph output #0 'y' is declared [5,7] but shape inference "
                                   "gives [?,3]"),
                         HasSubstr("value_info 't'")));
  EXPECT_THAT(builder::SummaryText(built->summary), HasSubstr("warning: graph output #0 'y'"));
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  ASSERT_TRUE(session.ok()) << session.status();

  // Two runs with other sizes: the "?" dims of p take 2 and 5 (then 3 and 1), q's "?" another.
  struct Sizes {
    int64_t x0, p0, p1, q0, e0, n;
    std::vector<int64_t> reshape;
  };
  for (const Sizes& z : {Sizes{2, 2, 5, 7, 4, 6, {3, 2}}, Sizes{4, 3, 1, 1, 1, 2, {2, 6}}}) {
    SCOPED_TRACE(z.x0);
    std::vector<ir::Tensor> in = {Floats({z.x0, 3}), Floats({z.p0, z.p1}), Floats({z.q0}),
                                  Floats({z.e0, 2}), Floats({z.n}),        Floats({z.n}),
                                  Int64s(z.reshape)};
    auto out = (*session)->Run(in);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 6u);
    EXPECT_EQ((*out)[0].dims(), (std::vector<int64_t>{z.x0, 3}));  // not the declared [5, 7]
    EXPECT_EQ((*out)[1].dims(), (std::vector<int64_t>{z.p0, z.p1}));
    EXPECT_EQ((*out)[2].dims(), (std::vector<int64_t>{z.q0}));
    EXPECT_EQ((*out)[3].dims(), (std::vector<int64_t>{z.e0, 2}));
    EXPECT_EQ((*out)[4].dims(), (std::vector<int64_t>{z.n}));
    EXPECT_EQ((*out)[5].dims(), z.reshape);  // declared [5, 7], kept as a hint: not checked
    // The values are computed, not just shaped: y = -relu(x).
    for (int64_t i = 0; i < (*out)[0].num_elements(); ++i) {
      float xv = in[0].data<float>()[i];
      EXPECT_EQ((*out)[0].data<float>()[i], xv > 0 ? -xv : -0.0f);
    }
  }

  // A named symbol still binds: n1 and n2 share "n", so different sizes are refused.
  std::vector<ir::Tensor> bad = {Floats({2, 3}), Floats({2, 2}), Floats({2}), Floats({2, 2}),
                                 Floats({2}),    Floats({3}),    Int64s({6})};
  auto refused = (*session)->Run(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("'n'"));
}

}  // namespace
}  // namespace kiln
