// The ONNX custom mutator: every mutation finds a site in a model that has one and changes it,
// outputs parse as ModelProto, successive outputs differ, bytes that are no model go to the byte
// mutator, and mutated models land on both sides of the importer's validation.
#include "tests/fuzz/onnx_mutator.h"

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/import/onnx_importer.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_models.h"

namespace kiln::fuzz {
namespace {

using ::kiln::testing::AddIntsAttribute;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;

// AddReluMul plus a Conv with attributes, a raw_data initializer, shaped value_info and an If
// whose branches hold nodes with attributes: a site for every mutation, subgraphs included.
onnx::ModelProto RichModel() {
  onnx::ModelProto m = AddReluMulModel();
  onnx::GraphProto* g = m.mutable_graph();
  onnx::TensorProto* k = g->add_initializer();
  k->set_name("k");
  k->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 1, 1, 1}) k->add_dims(d);
  float one = 1.0f;
  k->set_raw_data(std::string(reinterpret_cast<const char*>(&one), sizeof(one)));
  onnx::NodeProto* conv = AddOnnxNode(g, "Conv", {"y", "k"}, {"c"}, "conv");
  AddIntsAttribute(conv, "kernel_shape", {1, 1});
  AddIntsAttribute(conv, "pads", {0, 0, 0, 0});
  AddTensorValueInfo(g->mutable_value_info(), "a", {2, 3});
  onnx::NodeProto* branch = AddOnnxNode(g, "If", {"cond"}, {"z"}, "if");
  for (const char* name : {"then_branch", "else_branch"}) {
    onnx::AttributeProto* a = branch->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* sub = a->mutable_g();
    sub->set_name(name);
    onnx::NodeProto* t = AddOnnxNode(sub, "Transpose", {"y"}, {"t"}, std::string(name) + "_t");
    AddIntsAttribute(t, "perm", {1, 0});
    AddTensorValueInfo(sub->mutable_output(), "t", {3, 2});
  }
  return m;
}

// A stand-in for LLVMFuzzerMutate: flips one byte (or appends one to empty input).
size_t FlipOneByte(uint8_t* data, size_t size, size_t max_size) {
  if (size == 0) {
    if (max_size == 0) return 0;
    data[0] = 0x5a;
    return 1;
  }
  data[size / 2] ^= 0xff;
  return size;
}

TEST(OnnxMutator, EveryMutationFindsASiteAndChangesTheModel) {
  const onnx::ModelProto original = RichModel();
  const std::string before = original.SerializeAsString();
  for (int k = 0; k < static_cast<int>(OnnxMutation::kCount); ++k) {
    auto m = static_cast<OnnxMutation>(k);
    SCOPED_TRACE(OnnxMutationName(m));
    bool applied = false;
    std::string after;
    // A mutation may pick a no-op edit (a value equal to the old one) and report no site: a few
    // seeds are enough to find a real one.
    for (uint64_t seed = 0; seed < 64 && !applied; ++seed) {
      onnx::ModelProto model = original;
      std::mt19937_64 rng(seed);
      applied = ApplyOnnxMutation(model, m, rng);
      if (applied) after = model.SerializeAsString();
    }
    ASSERT_TRUE(applied);
    EXPECT_NE(after, before);
    onnx::ModelProto reparsed;
    EXPECT_TRUE(reparsed.ParseFromString(after));
  }
}

TEST(OnnxMutator, MutationWithoutASiteLeavesTheModelAlone) {
  onnx::ModelProto empty;  // no graph nodes, no attributes, no tensors
  const std::string before = empty.SerializeAsString();
  for (OnnxMutation m : {OnnxMutation::kDropAttribute, OnnxMutation::kAttributeValue,
                         OnnxMutation::kRawData, OnnxMutation::kDropNode}) {
    std::mt19937_64 rng(1);
    EXPECT_FALSE(ApplyOnnxMutation(empty, m, rng)) << OnnxMutationName(m);
    EXPECT_EQ(empty.SerializeAsString(), before) << OnnxMutationName(m);
  }
}

TEST(OnnxMutator, ProducesParseableAndDifferentModels) {
  const std::string seed_bytes = SerializeModel(RichModel());
  constexpr int kRuns = 400;
  constexpr size_t kMaxSize = 1 << 16;
  int structural = 0, bytes = 0, changed = 0;
  std::set<std::string> distinct;  // structural outputs
  for (int i = 0; i < kRuns; ++i) {
    std::vector<uint8_t> buf(kMaxSize);
    std::memcpy(buf.data(), seed_bytes.data(), seed_bytes.size());
    MutationPath path;
    size_t n = MutateOnnxBytes(buf.data(), seed_bytes.size(), kMaxSize, static_cast<unsigned>(i),
                               FlipOneByte, &path);
    ASSERT_LE(n, kMaxSize);
    std::string out(reinterpret_cast<const char*>(buf.data()), n);
    if (path == MutationPath::kStructural) {
      ++structural;
      onnx::ModelProto parsed;
      EXPECT_TRUE(parsed.ParseFromString(out)) << "seed " << i;
    } else {
      ++bytes;
    }
    if (out != seed_bytes) ++changed;
    if (path == MutationPath::kStructural) distinct.insert(out);
  }
  // One time in five the byte mutator runs on purpose: about 80 of 400 (sigma ~8), so both
  // bounds are many sigmas away.
  EXPECT_GT(structural, kRuns * 6 / 10);
  EXPECT_GT(bytes, kRuns / 20);
  // Some structural edits rewrite a value to what it was (e.g. a version already 21); most not.
  EXPECT_GT(changed, kRuns * 9 / 10);
  // Some edits have a small domain (ir_version takes one of 16 values), so a few outputs repeat;
  // most must not, or the fuzzer would keep trying the same models.
  EXPECT_GT(static_cast<int>(distinct.size()), structural * 6 / 10);
}

TEST(OnnxMutator, SameSeedSameOutput) {
  const std::string seed_bytes = SerializeModel(RichModel());
  std::vector<uint8_t> a(1 << 16), b(1 << 16);
  std::memcpy(a.data(), seed_bytes.data(), seed_bytes.size());
  std::memcpy(b.data(), seed_bytes.data(), seed_bytes.size());
  size_t na = MutateOnnxBytes(a.data(), seed_bytes.size(), a.size(), 42, FlipOneByte);
  size_t nb = MutateOnnxBytes(b.data(), seed_bytes.size(), b.size(), 42, FlipOneByte);
  ASSERT_EQ(na, nb);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), na), 0);
}

TEST(OnnxMutator, BytesThatAreNoModelGoToTheByteMutator) {
  // A truncated varint: protobuf refuses it, so no structural edit is possible.
  std::vector<uint8_t> buf = {0x08, 0xff, 0xff, 0xff};
  buf.resize(64);
  for (unsigned seed = 0; seed < 20; ++seed) {
    MutationPath path;
    MutateOnnxBytes(buf.data(), 4, buf.size(), seed, FlipOneByte, &path);
    EXPECT_EQ(path, MutationPath::kBytes);
  }
}

TEST(OnnxMutator, OutputThatWouldNotFitFallsBackToBytes) {
  const std::string seed_bytes = SerializeModel(RichModel());
  for (unsigned seed = 0; seed < 50; ++seed) {
    std::vector<uint8_t> buf(seed_bytes.begin(), seed_bytes.end());
    MutationPath path;
    size_t n = MutateOnnxBytes(buf.data(), buf.size(), buf.size(), seed, FlipOneByte, &path);
    EXPECT_LE(n, buf.size());
  }
}

TEST(OnnxMutator, MutantsLandOnBothSidesOfTheImporter) {
  // Small edits keep many mutants importable, so the fuzzer explores past the first check.
  const onnx::ModelProto original = AddReluMulModel();
  int ok = 0, failed = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    onnx::ModelProto model = original;
    std::mt19937_64 rng(seed);
    MutateOnnxModel(model, rng);
    auto g = import::ImportModel(model.SerializeAsString(), import::ImportOptions{});
    (g.ok() ? ok : failed)++;
    if (!g.ok()) {
      EXPECT_NE(g.status().code(), absl::StatusCode::kInternal) << g.status();
    }
  }
  EXPECT_GT(ok, 10);
  EXPECT_GT(failed, 50);
}

}  // namespace
}  // namespace kiln::fuzz
