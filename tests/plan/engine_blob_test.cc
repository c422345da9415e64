// Engine blob: round trip, and hostile blobs (truncated, flipped bytes, wrong magic or
// version, missing CPU features, crafted sections) that must give a clear error, never a crash.
#include "engine/plan/engine_blob.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::plan {
namespace {

using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

// Layout constants from the format description in engine_blob.h, restated here so the test
// checks the documented format rather than the writer's own constants.
constexpr size_t kHeaderBytes = 64;
constexpr size_t kEntryBytes = 56;

template <typename T>
T Get(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}
template <typename T>
void Put(std::string& s, size_t at, T v) {
  std::memcpy(&s[at], &v, sizeof(T));
}

// The blob of y = Relu(x + w) * w, built by the real builder.
std::string MakeBlob() {
  auto built = builder::BuildEngine(SerializeModel(AddReluMulModel()), {}, nullptr);
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? built->blob : std::string();
}

absl::StatusOr<std::unique_ptr<Engine>> Load(const std::string& bytes) {
  return LoadEngineFromBytes(std::make_shared<const std::string>(bytes));
}

// One section of a blob.
struct Section {
  uint32_t kind;
  std::string bytes;
};

// The sections of a well-formed blob.
std::vector<Section> SplitSections(const std::string& blob) {
  std::vector<Section> out;
  uint32_t n = Get<uint32_t>(blob, 12);
  for (uint32_t i = 0; i < n; ++i) {
    size_t e = kHeaderBytes + i * kEntryBytes;
    out.push_back({Get<uint32_t>(blob, e),
                   blob.substr(Get<uint64_t>(blob, e + 8), Get<uint64_t>(blob, e + 16))});
  }
  return out;
}

// A section's digest field as engine_blob.h documents it: SHA-256, or for the weights XXH3-128
// (seed 0, canonical big-endian) then 16 zero bytes. The portable XXH3 entry point, not the
// reader's CPU-dispatched one, so the two implementations check each other.
std::array<uint8_t, 32> SectionDigestField(const Section& section) {
  if (section.kind != kSectionWeights) return Sha256(section.bytes);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(section.bytes.data(), section.bytes.size()));
  std::array<uint8_t, 32> field{};
  std::memcpy(field.data(), canonical.digest, sizeof(canonical.digest));
  return field;
}

// Writes a blob from the format description (an independent writer): lets tests craft headers
// and sections with valid digests.
std::string Assemble(const std::vector<Section>& sections, uint64_t features = 0,
                     uint32_t version = kFormatVersion, const std::string& builder = KILN_VERSION) {
  auto align = [](uint64_t x) { return (x + 63) / 64 * 64; };
  uint64_t table_end = kHeaderBytes + sections.size() * kEntryBytes;
  std::vector<uint64_t> offsets;
  uint64_t cursor = table_end + 32;
  for (const auto& s : sections) {
    offsets.push_back(align(cursor));
    cursor = offsets.back() + s.bytes.size();
  }
  std::string out(cursor, '\0');
  std::memcpy(&out[0], kMagic, 8);
  Put<uint32_t>(out, 8, version);
  Put<uint32_t>(out, 12, static_cast<uint32_t>(sections.size()));
  Put<uint64_t>(out, 16, features);
  Put<uint64_t>(out, 24, cursor);
  std::memcpy(&out[32], builder.data(), std::min<size_t>(builder.size(), 31));
  for (size_t i = 0; i < sections.size(); ++i) {
    size_t e = kHeaderBytes + i * kEntryBytes;
    Put<uint32_t>(out, e, sections[i].kind);
    Put<uint64_t>(out, e + 8, offsets[i]);
    Put<uint64_t>(out, e + 16, sections[i].bytes.size());
    std::array<uint8_t, 32> d = SectionDigestField(sections[i]);
    std::memcpy(&out[e + 24], d.data(), 32);
    std::memcpy(&out[offsets[i]], sections[i].bytes.data(), sections[i].bytes.size());
  }
  Sha256Digest hd = Sha256(out.data(), table_end);
  std::memcpy(&out[table_end], hd.data(), 32);
  return out;
}

// Recomputes the header digest after a test edited the header or section table.
void ResignHeader(std::string& blob) {
  size_t table_end = kHeaderBytes + Get<uint32_t>(blob, 12) * kEntryBytes;
  Sha256Digest hd = Sha256(blob.data(), table_end);
  std::memcpy(&blob[table_end], hd.data(), 32);
}

// The blob with its metadata replaced by `edit(metadata)`, every digest valid.
template <typename Edit>
std::string WithMetadata(const std::string& blob, Edit edit) {
  std::vector<Section> sections = SplitSections(blob);
  v1::EngineMetadata meta;
  EXPECT_TRUE(meta.ParseFromString(sections[0].bytes));
  edit(meta);
  sections[0].bytes = meta.SerializeAsString();
  return Assemble(sections);
}

void ExpectError(const absl::Status& st, absl::StatusCode code,
                 const std::vector<std::string>& parts) {
  ASSERT_FALSE(st.ok()) << "expected an error, got OK";
  EXPECT_EQ(st.code(), code) << st;
  for (const auto& p : parts) EXPECT_THAT(st.message(), HasSubstr(p)) << st;
}

// ---- Round trip --------------------------------------------------------------------------

TEST(EngineBlobRoundTrip, AssembleReproducesTheWriter) {
  // The writer follows the documented layout byte for byte.
  std::string blob = MakeBlob();
  EXPECT_EQ(Assemble(SplitSections(blob)), blob);
}

TEST(EngineBlobRoundTrip, LoadRebuildsTheGraph) {
  auto engine = Load(MakeBlob());
  ASSERT_TRUE(engine.ok()) << engine.status();
  const Engine& e = **engine;
  ASSERT_EQ(e.order.size(), 3u);
  EXPECT_EQ(e.order[0]->op, ir::OpType::kAdd);
  EXPECT_EQ(e.order[1]->op, ir::OpType::kRelu);
  EXPECT_EQ(e.order[2]->op, ir::OpType::kMul);
  ASSERT_EQ(e.graph->inputs().size(), 1u);
  EXPECT_EQ(e.graph->inputs()[0]->name, "x");
  ASSERT_EQ(e.graph->outputs().size(), 1u);
  EXPECT_EQ(e.graph->outputs()[0]->name, "y");
  const ir::Value* w = e.graph->FindValue("w");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->constant.has_value());
  ASSERT_EQ(w->constant->num_elements(), 6);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->constant->raw_data()) % 64, 0u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(w->constant->data<float>()[i], ::kiln::testing::kAddReluMulWeights[i]);
  }
  EXPECT_EQ(e.metadata.kernels(1).nodes(0).node_name(), "relu");
}

// The AddReluMul model built, loaded and ready to run, and an input for it.
struct AddReluMulSession {
  std::unique_ptr<runtime::Session> session;
  ir::Tensor x;
};

absl::StatusOr<AddReluMulSession> MakeAddReluMulSession() {
  ASSIGN_OR_RETURN(auto built,
                   builder::BuildEngine(SerializeModel(AddReluMulModel()), {}, nullptr));
  ASSIGN_OR_RETURN(auto engine, Load(built.blob));
  AddReluMulSession s;
  ASSIGN_OR_RETURN(s.session,
                   runtime::Session::Create(std::shared_ptr<const Engine>(std::move(engine))));
  ASSIGN_OR_RETURN(s.x, ir::Tensor::Allocate(DataType::kF32, {2, 3}));
  const float xs[6] = {-3, 5, -1, 10, -9, 7};
  std::memcpy(s.x.raw_data(), xs, sizeof(xs));
  return s;
}

TEST(EngineBlobRoundTrip, BuildLoadAndRun) {
  auto made = MakeAddReluMulSession();
  ASSERT_TRUE(made.ok()) << made.status();
  runtime::Session* session = made->session.get();
  const ir::Tensor& x = made->x;
  auto out = session->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const ir::Tensor& y = (*out)[0];
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  // By hand: x + w = {-2, 3, 2, 6, -4, 1}; Relu = {0, 3, 2, 6, 0, 1}; times w. Exact in fp32.
  const float expected[6] = {0, -6, 6, -24, 0, -6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], expected[i]) << i;
}

TEST(EngineBlobRoundTrip, SteppedRunMatchesRunAndStopsAtTheEnd) {
  auto made = MakeAddReluMulSession();
  ASSERT_TRUE(made.ok()) << made.status();
  runtime::Session* session = made->session.get();
  const ir::Tensor& x = made->x;
  auto whole = session->Run({x});
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto run = session->Start({x});
  ASSERT_TRUE(run.ok()) << run.status();
  runtime::Execution& r = **run;
  EXPECT_EQ((*run)->Outputs().status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<std::string> seen;
  size_t steps = 0;
  while (!r.done()) {
    EXPECT_EQ(r.next(), steps);
    ASSERT_TRUE(
        r.Step([&](const ir::Node& n, const auto&, const auto&) { seen.push_back(n.name); }).ok());
    ++steps;
  }
  EXPECT_EQ(steps, session->engine().order.size());
  EXPECT_EQ(seen.size(), steps);
  EXPECT_EQ(r.Step().code(), absl::StatusCode::kFailedPrecondition);
  auto out = r.Outputs();
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  ASSERT_EQ((*out)[0].dims(), (*whole)[0].dims());
  EXPECT_EQ(std::memcmp((*out)[0].raw_data(), (*whole)[0].raw_data(), 6 * sizeof(float)), 0);
  // Inputs are checked as Run checks them.
  auto wrong = ir::Tensor::Allocate(DataType::kF32, {3, 2});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(session->Start({*wrong}).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- Corruption --------------------------------------------------------------------------

TEST(EngineBlobCorruption, TruncatedAtEveryLength) {
  std::string blob = MakeBlob();
  ASSERT_TRUE(Load(blob).ok());
  for (size_t len = 0; len < blob.size(); ++len) {
    auto e = Load(blob.substr(0, len));
    ASSERT_FALSE(e.ok()) << "prefix of " << len << " bytes loaded";
    EXPECT_FALSE(e.status().message().empty());
  }
}

TEST(EngineBlobCorruption, FlippedByteAtEveryPosition) {
  std::string blob = MakeBlob();
  for (uint8_t mask : {uint8_t{0x01}, uint8_t{0xff}}) {
    for (size_t pos = 0; pos < blob.size(); ++pos) {
      std::string bad = blob;
      bad[pos] = static_cast<char>(bad[pos] ^ mask);
      auto e = Load(bad);
      ASSERT_FALSE(e.ok()) << "flip 0x" << std::hex << int{mask} << " at " << std::dec << pos
                           << " loaded";
      EXPECT_FALSE(e.status().message().empty());
    }
  }
}

TEST(EngineBlobCorruption, TrailingBytes) {
  std::string blob = MakeBlob();
  ExpectError(Load(blob + std::string(64, '\0')).status(), absl::StatusCode::kInvalidArgument,
              {"truncated or padded"});
}

TEST(EngineBlobCorruption, WrongMagic) {
  std::string blob = MakeBlob();
  blob[0] = 'X';
  ExpectError(Load(blob).status(), absl::StatusCode::kInvalidArgument, {"magic"});
}

TEST(EngineBlobCorruption, NotAnEngineAtAll) {
  ExpectError(Load(std::string(200, 'A')).status(), absl::StatusCode::kInvalidArgument, {"magic"});
  ExpectError(Load("").status(), absl::StatusCode::kInvalidArgument, {"truncated"});
}

TEST(EngineBlobCorruption, UnknownVersion) {
  std::string blob = MakeBlob();
  Put<uint32_t>(blob, 8, kFormatVersion + 1);
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition,
              {absl::StrCat("version ", kFormatVersion + 1),
               absl::StrCat("reads version ", kFormatVersion)});
  Put<uint32_t>(blob, 8, 0xffffffffu);
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition, {"version"});
}

TEST(EngineBlobCorruption, UnknownVersionAssembled) {
  std::string blob = Assemble(SplitSections(MakeBlob()), 0, 7);
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition, {"version 7"});
}

TEST(EngineBlobCorruption, PreviousVersionIsRefused) {
  // An engine written before the weights digest changed is refused by its version: the error
  // says to rebuild it, not that it is corrupted.
  std::string blob = Assemble(SplitSections(MakeBlob()), 0, kFormatVersion - 1);
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition,
              {absl::StrCat("version ", kFormatVersion - 1, " is not supported")});
}

TEST(EngineBlobCorruption, FlippedSectionByteNamesTheSection) {
  // Each section's first, middle and last byte; the header digest still matches, so only the
  // section digest can catch the flip. The writer puts the metadata first.
  std::string blob = MakeBlob();
  const char* names[] = {"metadata", "weights"};
  for (uint32_t i = 0; i < 2; ++i) {
    size_t e = kHeaderBytes + i * kEntryBytes;
    uint64_t off = Get<uint64_t>(blob, e + 8), size = Get<uint64_t>(blob, e + 16);
    ASSERT_GT(size, 0u);
    for (uint64_t pos : {off, off + size / 2, off + size - 1}) {
      std::string bad = blob;
      bad[pos] = static_cast<char>(bad[pos] ^ 0x01);
      ExpectError(Load(bad).status(), absl::StatusCode::kDataLoss,
                  {absl::StrCat("section ", i, " (", names[i], ") digest mismatch")});
    }
  }
}

TEST(EngineBlobCorruption, FlippedByteInLargeWeights) {
  // 1 MiB of weights takes XXH3's long-input (vectorised) path, which the tiny model's 24 bytes
  // never reach: it must agree with the portable hash and still catch a single flipped bit.
  std::vector<Section> s = SplitSections(MakeBlob());
  ASSERT_EQ(s[1].kind, kSectionWeights);
  size_t used = s[1].bytes.size();
  s[1].bytes.resize(1 << 20);
  for (size_t i = used; i < s[1].bytes.size(); ++i) {
    s[1].bytes[i] = static_cast<char>(i * 2654435761u >> 24);
  }
  std::string blob = Assemble(s);
  auto loaded = Load(blob);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  uint64_t off = Get<uint64_t>(blob, kHeaderBytes + kEntryBytes + 8);
  blob[off + 700001] = static_cast<char>(blob[off + 700001] ^ 0x10);
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss,
              {"section 1 (weights) digest mismatch"});
}

TEST(EngineBlobCorruption, WeightsDigestTailMustBeZero) {
  // The 16 bytes after the XXH3-128 digest are zero; a resigned header cannot smuggle data there.
  std::string blob = MakeBlob();
  blob[kHeaderBytes + kEntryBytes + 24 + 16] = 1;
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss,
              {"section 1 (weights) digest mismatch"});
}

TEST(EngineBlobCorruption, HeaderFieldChangedWithoutResigning) {
  std::string blob = MakeBlob();
  Put<uint64_t>(blob, 16, kCpuAvx);  // required features, digest not updated
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"header digest"});
}

TEST(EngineBlobCorruption, FileSizeFieldResigned) {
  std::string blob = MakeBlob();
  Put<uint64_t>(blob, 24, blob.size() + 64);
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kInvalidArgument, {"truncated or padded"});
}

// ---- CPU features ------------------------------------------------------------------------

TEST(EngineBlobFeatures, UnknownRequiredFeatureBit) {
  // Bit 62 is never set by the detector: a newer builder's feature this reader cannot know.
  std::string blob = Assemble(SplitSections(MakeBlob()), uint64_t{1} << 62);
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition,
              {"CPU features", "bit 62"});
}

TEST(EngineBlobFeatures, KnownFeatureTheMachineLacks) {
  uint64_t have = DetectCpuFeatures();
  uint64_t lacking = 0;
  for (int b = 0; b < 63 && lacking == 0; ++b) {
    uint64_t bit = uint64_t{1} << b;
    if (!(have & bit) && !CpuFeatureNames(bit).empty()) lacking = bit;
  }
  if (lacking == 0) GTEST_SKIP() << "this CPU has every feature Kiln knows";
  std::string blob = Assemble(SplitSections(MakeBlob()), lacking | (have & kCpuSse42));
  ExpectError(Load(blob).status(), absl::StatusCode::kFailedPrecondition,
              {CpuFeatureNames(lacking)[0]});
}

TEST(EngineBlobFeatures, FeaturesTheMachineHasLoad) {
  std::string blob = Assemble(SplitSections(MakeBlob()), DetectCpuFeatures());
  auto e = Load(blob);
  ASSERT_TRUE(e.ok()) << e.status();
}

// ---- Crafted sections with valid digests -------------------------------------------------

TEST(EngineBlobCrafted, NoSections) {
  ExpectError(Load(Assemble({})).status(), absl::StatusCode::kDataLoss, {"section count 0"});
}

TEST(EngineBlobCrafted, TooManySections) {
  std::vector<Section> many(17, Section{kSectionWeights, ""});
  ExpectError(Load(Assemble(many)).status(), absl::StatusCode::kDataLoss, {"section count 17"});
}

TEST(EngineBlobCrafted, UnknownSectionKind) {
  std::vector<Section> s = SplitSections(MakeBlob());
  s.push_back({99, "?"});
  ExpectError(Load(Assemble(s)).status(), absl::StatusCode::kDataLoss, {"unknown kind 99"});
}

TEST(EngineBlobCrafted, NoMetadataSection) {
  std::vector<Section> s = SplitSections(MakeBlob());
  s.erase(s.begin());
  ExpectError(Load(Assemble(s)).status(), absl::StatusCode::kDataLoss, {"no metadata"});
}

TEST(EngineBlobCrafted, MetadataDoesNotParse) {
  std::vector<Section> s = SplitSections(MakeBlob());
  s[0].bytes = std::string(40, '\xff');
  ExpectError(Load(Assemble(s)).status(), absl::StatusCode::kDataLoss, {"metadata"});
}

TEST(EngineBlobCrafted, SectionOffsetsOverlap) {
  std::string blob = MakeBlob();
  // Point the weights section at the metadata section's offset.
  Put<uint64_t>(blob, kHeaderBytes + kEntryBytes + 8, Get<uint64_t>(blob, kHeaderBytes + 8));
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"section 1"});
}

TEST(EngineBlobCrafted, SectionSizeBeyondTheFile) {
  std::string blob = MakeBlob();
  Put<uint64_t>(blob, kHeaderBytes + kEntryBytes + 16, ~uint64_t{0});
  ResignHeader(blob);
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"section 1"});
}

TEST(EngineBlobCrafted, KernelInputOutOfRange) {
  std::string blob = WithMetadata(
      MakeBlob(), [](v1::EngineMetadata& m) { m.mutable_kernels(1)->set_inputs(0, 1000); });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"kernel k1", "tensor 1000"});
}

TEST(EngineBlobCrafted, NegativeKernelInput) {
  std::string blob = WithMetadata(
      MakeBlob(), [](v1::EngineMetadata& m) { m.mutable_kernels(1)->set_inputs(0, -7); });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"kernel k1", "-7"});
}

TEST(EngineBlobCrafted, UnknownKernelOp) {
  std::string blob = WithMetadata(
      MakeBlob(), [](v1::EngineMetadata& m) { m.mutable_kernels(2)->set_op_type("Explode"); });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"k2", "Explode"});
}

TEST(EngineBlobCrafted, ConstantOutsideTheWeights) {
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (t.is_constant()) t.set_weight_offset(uint64_t{1} << 40);
    }
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"'w'", "out of bounds"});
}

TEST(EngineBlobCrafted, ConstantSizeDisagreesWithDims) {
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (t.is_constant()) t.set_constant_dims(0, int64_t{1} << 62);
    }
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"'w'"});
}

TEST(EngineBlobCrafted, ConstantSizeWrapsAround) {
  // 2^61 doubles "need" 2^61 x 8 = 2^64 = 0 bytes modulo 2^64: a reader that multiplies would
  // accept an empty weight for a huge tensor.
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    for (auto& t : *m.mutable_tensors()) {
      if (!t.is_constant()) continue;
      t.set_dtype(11);  // DOUBLE
      t.clear_constant_dims();
      t.add_constant_dims(int64_t{1} << 61);
      t.set_weight_bytes(0);
    }
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"'w'"});
}

TEST(EngineBlobCrafted, AttributeTensorSizeWrapsAround) {
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    auto* a = m.mutable_kernels(1)->add_attributes();
    a->set_name("value");
    a->set_type(v1::AttributeValue::TENSOR);
    a->set_tensor_dtype(11);  // DOUBLE
    a->add_tensor_dims(int64_t{1} << 61);
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"'value'"});
}

TEST(EngineBlobCrafted, ArenaTooLarge) {
  // A runtime rounding ~0 up to 64 bytes would wrap to a 0-byte arena.
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    m.mutable_memory_plan()->set_arena_bytes(~uint64_t{0});
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"arena"});
}

TEST(EngineBlobCrafted, GraphOutputOutOfRange) {
  std::string blob = WithMetadata(
      MakeBlob(), [](v1::EngineMetadata& m) { m.set_graph_outputs(0, m.tensors_size()); });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"graph output"});
}

TEST(EngineBlobCrafted, MemoryPlanSlotOutsideTheArena) {
  // offset + bytes wraps around 2^64: a reader that adds them would accept the slot.
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    auto* mp = m.mutable_memory_plan();
    mp->clear_slots();
    mp->set_arena_bytes(64);
    auto* slot = mp->add_slots();
    slot->set_tensor(1);
    slot->set_offset(~uint64_t{0} - 7);
    slot->set_bytes(16);
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"memory plan", "slot"});
}

TEST(EngineBlobCrafted, MemoryPlanSlotForUnknownTensor) {
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    auto* mp = m.mutable_memory_plan();
    mp->clear_slots();
    mp->set_arena_bytes(64);
    auto* slot = mp->add_slots();
    slot->set_tensor(5000);
    slot->set_bytes(16);
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss, {"memory plan", "5000"});
}

// ---- Memory plan (hardening issue, defect 10h) ------------------------------------------
// The runtime places each planned activation at its slot's offset and trusts the plan: a blob
// whose plan puts two live tensors on the same bytes would run and answer wrongly. The reader
// checks the plan; these blobs carry valid digests (WithMetadata recomputes them).

int TensorIndex(const v1::EngineMetadata& m, const std::string& name) {
  for (int i = 0; i < m.tensors_size(); ++i) {
    if (m.tensors(i).name() == name) return i;
  }
  return -1;
}

v1::MemoryPlan::Slot* SlotOf(v1::EngineMetadata& m, const std::string& name) {
  const int t = TensorIndex(m, name);
  for (auto& slot : *m.mutable_memory_plan()->mutable_slots()) {
    if (slot.tensor() == t) return &slot;
  }
  ADD_FAILURE() << "no slot for " << name;
  static v1::MemoryPlan::Slot dummy;
  return &dummy;
}

TEST(EngineBlobMemoryPlan, TheBuiltPlanIsWhatTheTestsTamperWith) {
  // a = x + w (kernel 0, read by 1) and r = Relu(a) (kernel 1, read by 2) are both live at
  // kernel 1: the planner gives them different bytes; y is a graph output (not planned).
  auto engine = Load(MakeBlob());
  ASSERT_TRUE(engine.ok()) << engine.status();
  v1::EngineMetadata m = (*engine)->metadata;
  ASSERT_EQ(m.memory_plan().slots_size(), 2);
  EXPECT_NE(SlotOf(m, "a")->offset(), SlotOf(m, "r")->offset());
  EXPECT_EQ(SlotOf(m, "a")->bytes(), 64u);  // 6 floats, one 64-byte block
}

TEST(EngineBlobMemoryPlan, OverlappingLiveSlotsAreRefused) {
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    SlotOf(m, "r")->set_offset(SlotOf(m, "a")->offset());
  });
  ExpectError(Load(blob).status(), absl::StatusCode::kDataLoss,
              {"memory plan slots", "'a'", "'r'", "overlap", "k1"});
}

TEST(EngineBlobMemoryPlan, SlotsOfTensorsNotLiveAtOnceMayShareBytes) {
  // r dies at kernel 2 and a at kernel 1: a tensor written at kernel 2 could reuse a's bytes.
  // Here: r's bytes moved to a fresh place; a and r still apart; the blob loads and runs.
  std::string blob = WithMetadata(MakeBlob(), [](v1::EngineMetadata& m) {
    m.mutable_memory_plan()->set_arena_bytes(1024);
    SlotOf(m, "r")->set_offset(512);
  });
  auto engine = Load(blob);
  ASSERT_TRUE(engine.ok()) << engine.status();
}

TEST(EngineBlobMemoryPlan, SlotsThatDisagreeWithTheirTensorAreRefused) {
  using Edit = std::function<void(v1::EngineMetadata&)>;
  const std::vector<std::tuple<std::string, Edit, std::vector<std::string>>> cases = {
      {"misaligned offset",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes(1024);
         SlotOf(m, "r")->set_offset(512 + 8);
       },
       {"'r'", "64-byte"}},
      {"size not a whole block",
       [](v1::EngineMetadata& m) { SlotOf(m, "a")->set_bytes(24); },
       {"'a'", "64-byte"}},
      {"zero bytes", [](v1::EngineMetadata& m) { SlotOf(m, "a")->set_bytes(0); }, {"'a'"}},
      {"larger than the tensor",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes(4096);
         SlotOf(m, "a")->set_offset(1024);
         SlotOf(m, "a")->set_bytes(128);
       },
       {"'a'", "128 bytes", "[2,3]"}},
      {"tensor grown past its slot",
       [](v1::EngineMetadata& m) {
         m.mutable_tensors(TensorIndex(m, "r"))->mutable_dims(0)->set_value(200);
       },
       {"'r'", "64 bytes"}},
      {"tensor with a symbolic dim",
       [](v1::EngineMetadata& m) {
         auto* d = m.mutable_tensors(TensorIndex(m, "r"))->mutable_dims(0);
         d->set_value(-1);
         d->set_symbol("batch");
       },
       {"'r'", "no static size"}},
      {"two slots for one tensor",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes(1024);
         auto* extra = m.mutable_memory_plan()->add_slots();
         *extra = *SlotOf(m, "a");
         extra->set_offset(512);
       },
       {"'a'", "already has slot"}},
      {"slot for the graph output",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes(1024);
         auto* extra = m.mutable_memory_plan()->add_slots();
         extra->set_tensor(TensorIndex(m, "y"));
         extra->set_offset(512);
         extra->set_bytes(64);
       },
       {"'y'", "graph output"}},
      {"slot for the graph input",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes(1024);
         auto* extra = m.mutable_memory_plan()->add_slots();
         extra->set_tensor(TensorIndex(m, "x"));
         extra->set_offset(512);
         extra->set_bytes(64);
       },
       {"'x'", "graph input"}},
      {"slot for a tensor no kernel writes",
       [](v1::EngineMetadata& m) {
         m.mutable_kernels(1)->set_outputs(0, TensorIndex(m, "a"));  // Relu writes a, not r
         m.mutable_kernels(2)->set_inputs(0, TensorIndex(m, "a"));
       },
       {"'r'", "no kernel writes"}},
      {"arena over the limit",
       [](v1::EngineMetadata& m) {
         m.mutable_memory_plan()->set_arena_bytes((uint64_t{1} << 40) + 64);
       },
       {"arena", "limit"}},
  };
  for (const auto& [what, edit, parts] : cases) {
    SCOPED_TRACE(what);
    ExpectError(Load(WithMetadata(MakeBlob(), edit)).status(), absl::StatusCode::kDataLoss, parts);
  }
}

// Every engine the builder makes still loads from its bytes (the untrusted path), fp32 and
// fp16, fused: the check accepts the planner's reuse and its handovers of a dying input's slot
// to an in-place output (a Reshape's or a FusedConv's), which these models exercise.
TEST(EngineBlobMemoryPlan, EveryBuiltEngineLoads) {
  int handovers = 0;
  for (const char* model :
       {"mobilenet_tiny", "squeezenet_tiny", "vit_tiny", "gpt2_causal", "bert_layernorm_decomposed",
        "bert_layernorm_op", "authored_mixed", "ln_overflow_classifier", "vit_tiny_opset18_ir10"}) {
    for (const char* policy : {"fp32", "fp16"}) {
      SCOPED_TRACE(absl::StrCat(model, " ", policy));
      auto bytes =
          import::ReadFile(absl::StrCat("tests/models/", model, "/model.onnx"), int64_t{1} << 30);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      builder::BuildOptions opts;
      opts.policy = policy;
      opts.constraints = precision::Constraints::kPrefer;  // authored_mixed keeps its types
      auto built = builder::BuildEngine(*bytes, opts, nullptr);
      ASSERT_TRUE(built.ok()) << built.status();
      auto engine = Load(built->blob);
      ASSERT_TRUE(engine.ok()) << engine.status();
      const v1::EngineMetadata& m = (*engine)->metadata;
      EXPECT_GT(m.memory_plan().slots_size(), 0);
      std::map<int, uint64_t> offset;
      for (const auto& slot : m.memory_plan().slots()) offset[slot.tensor()] = slot.offset();
      for (int i = 0; i < m.kernels_size(); ++i) {
        const v1::Kernel& k = m.kernels(i);
        const int donor = (*engine)->order[i]->op == ir::OpType::kFusedConv ? 3 : 0;
        if (k.inputs_size() <= donor || k.outputs_size() == 0) continue;
        auto in = offset.find(k.inputs(donor)), out = offset.find(k.outputs(0));
        if (in != offset.end() && out != offset.end() && in->second == out->second) {
          ++handovers;
        }
      }
    }
  }
  EXPECT_GT(handovers, 0) << "no model exercised a slot handover";
}

// Crafted but well-formed blobs whose kernels are wired wrongly: loading may accept them (the
// reader checks structure, not semantics), but creating a session and running it must then
// fail with a status, never crash.
TEST(EngineBlobCrafted, MiswiredKernelsFailAtRunNotCrash) {
  using Edit = std::function<void(v1::EngineMetadata&)>;
  auto tensor_index = [](const v1::EngineMetadata& m, const std::string& name) {
    for (int i = 0; i < m.tensors_size(); ++i) {
      if (m.tensors(i).name() == name) return i;
    }
    return -1;
  };
  std::vector<std::pair<std::string, Edit>> edits = {
      {"Add without inputs", [](v1::EngineMetadata& m) { m.mutable_kernels(0)->clear_inputs(); }},
      {"Add with omitted inputs",
       [](v1::EngineMetadata& m) {
         m.mutable_kernels(0)->set_inputs(0, -1);
         m.mutable_kernels(0)->set_inputs(1, -1);
       }},
      {"Relu without outputs",
       [](v1::EngineMetadata& m) { m.mutable_kernels(1)->clear_outputs(); }},
      {"Relu reads its own output",
       [&](v1::EngineMetadata& m) { m.mutable_kernels(1)->set_inputs(0, tensor_index(m, "r")); }},
      {"kernels in reverse order",
       [](v1::EngineMetadata& m) { m.mutable_kernels()->SwapElements(0, 2); }},
      {"Add writes into the graph input",
       [&](v1::EngineMetadata& m) { m.mutable_kernels(0)->set_outputs(0, tensor_index(m, "x")); }},
      {"Add writes into the weights",
       [&](v1::EngineMetadata& m) { m.mutable_kernels(0)->set_outputs(0, tensor_index(m, "w")); }},
      {"intermediate declared int64",
       [&](v1::EngineMetadata& m) { m.mutable_tensors(tensor_index(m, "a"))->set_dtype(7); }},
      {"intermediate declared rank 5",
       [&](v1::EngineMetadata& m) {
         auto* t = m.mutable_tensors(tensor_index(m, "a"));
         for (int i = 0; i < 3; ++i) t->add_dims()->set_value(1);
       }},
      {"Relu with an unknown attribute",
       [](v1::EngineMetadata& m) {
         auto* a = m.mutable_kernels(1)->add_attributes();
         a->set_name("alpha");
         a->set_type(v1::AttributeValue::STRINGS);
       }},
      {"graph output is the weights",
       [&](v1::EngineMetadata& m) { m.set_graph_outputs(0, tensor_index(m, "w")); }},
      {"no graph inputs", [](v1::EngineMetadata& m) { m.clear_graph_inputs(); }},
  };
  auto x = ir::Tensor::Allocate(DataType::kF32, {2, 3});
  ASSERT_TRUE(x.ok());
  for (const auto& [what, edit] : edits) {
    SCOPED_TRACE(what);
    auto engine = Load(WithMetadata(MakeBlob(), edit));
    if (!engine.ok()) continue;
    auto session = runtime::Session::Create(std::shared_ptr<const Engine>(std::move(*engine)));
    if (!session.ok()) continue;
    auto out = (*session)->Run({*x});
    if (!out.ok()) {
      EXPECT_FALSE(out.status().message().empty());
    }
  }
}

// ---- Files -------------------------------------------------------------------------------

TEST(EngineBlobFile, LoadsFromFile) {
  TempDir dir;
  std::string path = dir.Write("model.engine", MakeBlob());
  auto e = LoadEngineFile(path);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->order.size(), 3u);
}

TEST(EngineBlobFile, FlippedWeightByteNamesPathAndSection) {
  TempDir dir;
  std::string blob = MakeBlob();
  size_t pos = Get<uint64_t>(blob, kHeaderBytes + kEntryBytes + 8);
  blob[pos] = static_cast<char>(blob[pos] ^ 0x01);
  std::string path = dir.Write("flipped.engine", blob);
  ExpectError(LoadEngineFile(path).status(), absl::StatusCode::kDataLoss,
              {"flipped.engine", "section 1 (weights) digest mismatch"});
}

TEST(EngineBlobFile, MissingPath) {
  TempDir dir;
  ExpectError(LoadEngineFile(dir.File("absent.engine")).status(), absl::StatusCode::kNotFound,
              {"absent.engine"});
}

TEST(EngineBlobFile, Directory) {
  TempDir dir;
  ExpectError(LoadEngineFile(dir.path()).status(), absl::StatusCode::kInvalidArgument,
              {dir.path(), "not a regular file"});
}

TEST(EngineBlobFile, EmptyFile) {
  TempDir dir;
  std::string path = dir.Write("empty.engine", "");
  ExpectError(LoadEngineFile(path).status(), absl::StatusCode::kInvalidArgument,
              {"empty.engine", "empty"});
}

TEST(EngineBlobFile, TruncatedFileNamesThePath) {
  TempDir dir;
  std::string blob = MakeBlob();
  std::string path = dir.Write("cut.engine", blob.substr(0, blob.size() / 2));
  auto e = LoadEngineFile(path);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("cut.engine"));
}

TEST(EngineBlobFile, FifoDoesNotHang) {
  // open() of a FIFO blocks until a writer appears; the loader must not wait for one.
  TempDir dir;
  std::string fifo = dir.File("pipe.engine");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  ExpectError(
      ::kiln::testing::RunWithFifoGuard(fifo, [&] { return LoadEngineFile(fifo).status(); }),
      absl::StatusCode::kInvalidArgument, {"pipe.engine", "not a regular file"});
}

}  // namespace
}  // namespace kiln::plan
