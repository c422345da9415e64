#include "engine/plan/engine_blob.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/cpu_features.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"
#include "engine/plan/arena_rules.h"

namespace kiln::plan {
namespace {

constexpr size_t kHeaderBytes = 64;
constexpr size_t kEntryBytes = 56;
constexpr uint32_t kMaxSections = 16;
constexpr uint64_t kAlign = 64;

uint64_t AlignUp(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void Put(std::string& s, size_t at, T v) {
  std::memcpy(&s[at], &v, sizeof(T));
}
template <typename T>
T Get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The 32-byte digest field of a section table entry (the contract is in engine_blob.h). The
// weights go through XXH3 because they are nearly the whole blob; its dispatching entry point
// picks the widest vector code the CPU has (AVX2 or AVX-512: a BERT-base engine's 170 MB in
// ~12 ms, bound by memory bandwidth, where SHA-256 took ~120 ms and baseline SSE2 XXH3 ~40 ms).
using DigestField = std::array<uint8_t, 32>;
DigestField SectionDigest(uint32_t kind, const char* data, uint64_t size) {
  if (kind != kSectionWeights) return Sha256(data, size);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_dispatch(data, size));
  DigestField field{};
  std::memcpy(field.data(), canonical.digest, sizeof(canonical.digest));
  return field;
}

const char* SectionName(uint32_t kind) { return kind == kSectionMetadata ? "metadata" : "weights"; }

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("engine blob is corrupted: ", what));
}

// Names every bit of `missing`, including bits this reader has no name for (a newer builder's
// features), so the error never says "lacks: none".
std::string MissingFeatureNames(uint64_t missing) {
  std::vector<std::string> names;
  for (int b = 0; b < 64; ++b) {
    uint64_t bit = uint64_t{1} << b;
    if (!(missing & bit)) continue;
    std::vector<std::string> known = CpuFeatureNames(bit);
    names.push_back(known.empty() ? absl::StrCat("unknown feature bit ", b) : known[0]);
  }
  return absl::StrJoin(names, ",");
}

void ToAttr(const std::string& name, const ir::Attribute& a, v1::AttributeValue* out) {
  out->set_name(name);
  switch (a.type) {
    case ir::Attribute::Type::kFloat:
      out->set_type(v1::AttributeValue::FLOAT);
      out->set_f(a.f);
      break;
    case ir::Attribute::Type::kInt:
      out->set_type(v1::AttributeValue::INT);
      out->set_i(a.i);
      break;
    case ir::Attribute::Type::kString:
      out->set_type(v1::AttributeValue::STRING);
      out->set_s(a.s);
      break;
    case ir::Attribute::Type::kTensor:
      out->set_type(v1::AttributeValue::TENSOR);
      out->set_tensor_dtype(static_cast<int32_t>(a.t.dtype()));
      for (int64_t d : a.t.dims()) out->add_tensor_dims(d);
      out->set_tensor_data(a.t.raw_data(), a.t.byte_size());
      break;
    case ir::Attribute::Type::kFloats:
      out->set_type(v1::AttributeValue::FLOATS);
      for (float f : a.floats) out->add_floats(f);
      break;
    case ir::Attribute::Type::kInts:
      out->set_type(v1::AttributeValue::INTS);
      for (int64_t i : a.ints) out->add_ints(i);
      break;
    case ir::Attribute::Type::kStrings:
      out->set_type(v1::AttributeValue::STRINGS);
      for (const auto& s : a.strings) out->add_strings(s);
      break;
    case ir::Attribute::Type::kGraph:
      // The builder has compiled the subgraph: its engine blob is all a loaded engine needs.
      out->set_type(v1::AttributeValue::GRAPH);
      out->set_s(a.s);
      break;
  }
}

absl::StatusOr<ir::Attribute> FromAttr(const v1::AttributeValue& a) {
  ir::Attribute out;
  switch (a.type()) {
    case v1::AttributeValue::FLOAT:
      out.type = ir::Attribute::Type::kFloat;
      out.f = a.f();
      break;
    case v1::AttributeValue::INT:
      out.type = ir::Attribute::Type::kInt;
      out.i = a.i();
      break;
    case v1::AttributeValue::STRING:
      out.type = ir::Attribute::Type::kString;
      out.s = a.s();
      break;
    case v1::AttributeValue::TENSOR: {
      out.type = ir::Attribute::Type::kTensor;
      DataType dt = DataTypeFromOnnx(a.tensor_dtype());
      std::vector<int64_t> dims(a.tensor_dims().begin(), a.tensor_dims().end());
      int64_t n = ir::NumElementsOf(dims);
      size_t es = DataTypeSize(dt);
      // Compared by division: n * es may wrap around 2^64.
      if (dt == DataType::kUndefined || n < 0 || es == 0 || a.tensor_data().size() % es != 0 ||
          static_cast<uint64_t>(n) != a.tensor_data().size() / es) {
        return Corrupt(absl::StrCat("attribute '", a.name(), "' tensor is inconsistent"));
      }
      ASSIGN_OR_RETURN(out.t, ir::Tensor::Allocate(dt, dims));
      std::memcpy(out.t.raw_data(), a.tensor_data().data(), a.tensor_data().size());
      break;
    }
    case v1::AttributeValue::FLOATS:
      out.type = ir::Attribute::Type::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case v1::AttributeValue::INTS:
      out.type = ir::Attribute::Type::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case v1::AttributeValue::STRINGS:
      out.type = ir::Attribute::Type::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case v1::AttributeValue::GRAPH:
      // The subgraph's engine, checked as any blob when the runtime loads it.
      out.type = ir::Attribute::Type::kGraph;
      out.s = a.s();
      break;
    default:
      return Corrupt(absl::StrCat("attribute '", a.name(), "' has unknown type"));
  }
  return out;
}

// Checks the memory plan against the kernels before the runtime trusts it: the runtime places
// each planned activation at its slot's offset in an arena of arena_bytes and never checks what
// else lives there, so a plan whose live slots overlap (a blob crafted with recomputed digests,
// or a broken writer) would run and silently give wrong answers. Checked: every slot inside the
// arena (without overflow: offset + bytes may wrap around 2^64) and aligned as the planner
// aligns; at most one slot per tensor, only for an activation a kernel writes (not a graph
// input, output or constant), sized exactly as the planner sizes its static dtype and shape;
// and no two slots whose lifetimes (first to last kernel that writes or reads the tensor,
// inclusive) meet may share a byte, except for the planner's handover of a dying input's slot
// to the output of an in-place op (arena_rules.h). A sweep over the kernels with the live
// slots in an offset-ordered map: O(n log n) in the slots, whatever a hostile plan holds.
absl::Status CheckMemoryPlan(const v1::EngineMetadata& meta, const std::vector<ir::Value*>& values,
                             const std::vector<ir::Node*>& order) {
  const v1::MemoryPlan& mp = meta.memory_plan();
  // The runtime allocates the arena in one piece; no build plans more than kMaxArenaBytes
  // (arena_rules.h), and the bound keeps the runtime's round-up of arena_bytes from wrapping.
  if (mp.arena_bytes() > kMaxArenaBytes) {
    return Corrupt(absl::StrCat("memory plan arena of ", mp.arena_bytes(),
                                " bytes is over the limit of ", kMaxArenaBytes));
  }
  const int nt = static_cast<int>(values.size());
  auto name = [&](int t) { return absl::StrCat("tensor '", values[t]->name, "'"); };
  std::vector<int> slot_of(nt, -1);
  for (int i = 0; i < mp.slots_size(); ++i) {
    const auto& slot = mp.slots(i);
    if (slot.tensor() < 0 || slot.tensor() >= nt) {
      return Corrupt(
          absl::StrCat("memory plan slot ", i, " refers to tensor ", slot.tensor(), " of ", nt));
    }
    const std::string what = absl::StrCat("memory plan slot ", i, " of ", name(slot.tensor()));
    if (slot.bytes() > mp.arena_bytes() || slot.offset() > mp.arena_bytes() - slot.bytes()) {
      return Corrupt(absl::StrCat(what, " (offset ", slot.offset(), ", ", slot.bytes(),
                                  " bytes) is outside the ", mp.arena_bytes(), "-byte arena"));
    }
    if (slot.bytes() == 0 || slot.offset() % kArenaAlign != 0 || slot.bytes() % kArenaAlign != 0) {
      return Corrupt(absl::StrCat(what, " (offset ", slot.offset(), ", ", slot.bytes(),
                                  " bytes) is not a whole number of ", kArenaAlign,
                                  "-byte blocks"));
    }
    if (slot_of[slot.tensor()] >= 0) {
      return Corrupt(absl::StrCat(what, ": the tensor already has slot ", slot_of[slot.tensor()]));
    }
    slot_of[slot.tensor()] = i;
    // Sized as the planner sizes it: a static shape, and no element count past 2^48 bytes (the
    // planner leaves those to run time), so the product below cannot overflow.
    const ir::Value& v = *values[slot.tensor()];
    const size_t es = DataTypeSize(v.dtype);
    const int64_t n = v.shape.is_static() ? ir::NumElementsOf(v.shape.StaticDims()) : -1;
    if (es == 0 || n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 48) / es ||
        ArenaSlotBytes(n, es) != slot.bytes()) {
      return Corrupt(absl::StrCat(
          what, " has ", slot.bytes(), " bytes, but the tensor is ", DataTypeOnnxName(v.dtype), " ",
          v.shape.ToString(),
          es == 0 || n < 0 ? " (no static size)" : absl::StrCat(" (", n * es, " bytes)")));
    }
    if (v.constant) return Corrupt(absl::StrCat(what, ": the tensor is a constant"));
    if (v.kind != ir::ValueKind::kTensor) {
      return Corrupt(absl::StrCat(what, ": the value is a ", ir::ValueKindName(v.kind)));
    }
  }
  for (int idx : meta.graph_inputs()) {
    if (slot_of[idx] >= 0) {
      return Corrupt(absl::StrCat("memory plan slot ", slot_of[idx], " of ", name(idx),
                                  ": the tensor is a graph input"));
    }
  }
  for (int idx : meta.graph_outputs()) {
    if (slot_of[idx] >= 0) {
      return Corrupt(absl::StrCat("memory plan slot ", slot_of[idx], " of ", name(idx),
                                  ": the tensor is a graph output"));
    }
  }
  // Lifetimes: the first and last kernel that writes or reads each planned tensor.
  const int nk = meta.kernels_size();
  std::vector<int> first(mp.slots_size(), -1), last(mp.slots_size(), -1);
  std::vector<bool> written(mp.slots_size(), false);
  for (int k = 0; k < nk; ++k) {
    const v1::Kernel& kd = meta.kernels(k);
    for (int pass = 0; pass < 2; ++pass) {
      for (int idx : pass == 0 ? kd.inputs() : kd.outputs()) {
        const int s = idx >= 0 ? slot_of[idx] : -1;  // indices were checked by Rebuild
        if (s < 0) continue;
        if (first[s] < 0) first[s] = k;
        last[s] = k;
        if (pass == 1) written[s] = true;
      }
    }
  }
  std::vector<std::vector<int>> starts(nk), ends(nk);
  for (int s = 0; s < mp.slots_size(); ++s) {
    if (!written[s]) {
      return Corrupt(absl::StrCat("memory plan slot ", s, " of ", name(mp.slots(s).tensor()),
                                  ": no kernel writes the tensor"));
    }
    starts[first[s]].push_back(s);
    ends[last[s]].push_back(s);
  }
  // Whether slot `out` may take over the bytes of slot `in` at kernel k: the planner's handover
  // (memory_planner.cc), `out` written as output 0 of an in-place op that reads `in` once, as
  // the input InPlaceInput names, and `in` dies there; same bytes, same dtype.
  auto handover = [&](int in, int out, int k) {
    const v1::Kernel& kd = meta.kernels(k);
    const int donor = InPlaceInput(order[k]->op);
    const auto& a = mp.slots(in);
    const auto& b = mp.slots(out);
    if (donor < 0 || donor >= kd.inputs_size() || kd.inputs(donor) != a.tensor() ||
        kd.outputs_size() == 0 || kd.outputs(0) != b.tensor() || first[out] != k || last[in] != k ||
        a.offset() != b.offset() || a.bytes() != b.bytes() ||
        values[a.tensor()]->dtype != values[b.tensor()]->dtype) {
      return false;
    }
    return std::count(kd.inputs().begin(), kd.inputs().end(), a.tensor()) == 1;
  };
  std::map<uint64_t, int> live;  // offset -> slot, pairwise disjoint byte ranges
  auto end_of = [&](int s) { return mp.slots(s).offset() + mp.slots(s).bytes(); };
  for (int k = 0; k < nk; ++k) {
    for (int s : starts[k]) {
      const uint64_t off = mp.slots(s).offset();
      auto next = live.lower_bound(off);
      int clash = -1;
      if (next != live.end() && next->first < end_of(s)) clash = next->second;
      if (clash < 0 && next != live.begin() && end_of(std::prev(next)->second) > off) {
        clash = std::prev(next)->second;
      }
      if (clash < 0) {
        live.emplace(off, s);
        continue;
      }
      if (handover(clash, s, k)) {
        next->second = s;  // the same range: `s` lives on in the bytes of `clash`, which dies
        continue;
      }
      const auto& a = mp.slots(clash);
      const auto& b = mp.slots(s);
      return Corrupt(absl::StrCat(
          "memory plan slots ", clash, " (", name(a.tensor()), ", bytes ", a.offset(), "-",
          end_of(clash), ", kernels ", first[clash], "-", last[clash], ") and ", s, " (",
          name(b.tensor()), ", bytes ", b.offset(), "-", end_of(s), ", kernels ", first[s], "-",
          last[s], ") overlap while both are live (at kernel ", meta.kernels(k).id(), ")"));
    }
    for (int s : ends[k]) {
      auto it = live.find(mp.slots(s).offset());
      if (it != live.end() && it->second == s) live.erase(it);  // unless handed over
    }
  }
  return absl::OkStatus();
}

// Rebuilds the IR graph from validated metadata; weights borrow `base + weights_offset`.
absl::StatusOr<std::unique_ptr<Engine>> Rebuild(v1::EngineMetadata meta, const char* weights,
                                                uint64_t weights_size,
                                                std::shared_ptr<void> storage) {
  auto engine = std::make_unique<Engine>();
  engine->graph = std::make_unique<ir::Graph>();
  ir::Graph& g = *engine->graph;
  g.set_opset(meta.opset());
  g.set_ir_version(meta.ir_version());
  g.set_name(meta.model_name());
  std::vector<ir::Value*> values;
  values.reserve(meta.tensors_size());
  for (int i = 0; i < meta.tensors_size(); ++i) {
    const v1::TensorInfo& t = meta.tensors(i);
    auto v = g.AddValue(t.name());
    if (!v.ok()) return Corrupt(absl::StrCat("tensor ", i, " '", t.name(), "' is duplicated"));
    ir::Value* val = *v;
    val->dtype = DataTypeFromOnnx(t.dtype());
    if (t.kind() < v1::TensorInfo::TENSOR || t.kind() > v1::TensorInfo::OPTIONAL_SEQUENCE) {
      return Corrupt(absl::StrCat("tensor ", i, " '", t.name(), "' has unknown kind ", t.kind()));
    }
    val->kind = static_cast<ir::ValueKind>(t.kind());
    if (val->kind != ir::ValueKind::kTensor && t.is_constant()) {
      return Corrupt(absl::StrCat("tensor ", i, " '", t.name(), "' is a constant ",
                                  ir::ValueKindName(val->kind)));
    }
    val->shape.rank_known = t.rank_known();
    for (const auto& d : t.dims()) {
      val->shape.dims.push_back(d.value() >= 0 ? ir::Dim::Static(d.value())
                                               : ir::Dim::Symbol(d.symbol()));
    }
    if (t.is_constant()) {
      std::vector<int64_t> dims(t.constant_dims().begin(), t.constant_dims().end());
      int64_t n = ir::NumElementsOf(dims);
      size_t es = DataTypeSize(val->dtype);
      // n * es is compared by division: the product may wrap around 2^64 (2^61 doubles
      // "need" 0 bytes).
      if (n < 0 || es == 0 || t.weight_bytes() % es != 0 ||
          static_cast<uint64_t>(n) != t.weight_bytes() / es || t.weight_offset() % kAlign != 0 ||
          t.weight_offset() > weights_size || t.weight_bytes() > weights_size - t.weight_offset()) {
        return Corrupt(absl::StrCat("constant tensor '", t.name(), "' is out of bounds"));
      }
      val->constant = ir::Tensor::Borrow(val->dtype, dims,
                                         const_cast<char*>(weights + t.weight_offset()), storage);
    }
    values.push_back(val);
  }
  auto tensor = [&](int idx, const std::string& what) -> absl::StatusOr<ir::Value*> {
    if (idx == -1) return nullptr;
    if (idx < 0 || idx >= static_cast<int>(values.size())) {
      return Corrupt(absl::StrCat(what, " refers to tensor ", idx, " of ", values.size()));
    }
    return values[idx];
  };
  for (int k = 0; k < meta.kernels_size(); ++k) {
    const v1::Kernel& kd = meta.kernels(k);
    auto op = ir::OpFromName(kd.op_type());
    if (!op) return Corrupt(absl::StrCat("kernel ", kd.id(), " has unknown op ", kd.op_type()));
    std::string name = kd.nodes_size() > 0 ? kd.nodes(0).node_name() : kd.id();
    ir::Node* n = g.AddNode(*op, name);
    n->since_version = kd.since_version();
    for (int idx : kd.inputs()) {
      ASSIGN_OR_RETURN(ir::Value * v, tensor(idx, absl::StrCat("kernel ", kd.id(), " input")));
      n->inputs.push_back(v);
    }
    for (int idx : kd.outputs()) {
      ASSIGN_OR_RETURN(ir::Value * v, tensor(idx, absl::StrCat("kernel ", kd.id(), " output")));
      n->outputs.push_back(v);
    }
    for (const auto& a : kd.attributes()) {
      ASSIGN_OR_RETURN(n->attrs[a.name()], FromAttr(a));
    }
    engine->order.push_back(n);
  }
  for (int idx : meta.graph_inputs()) {
    ASSIGN_OR_RETURN(ir::Value * v, tensor(idx, "graph input"));
    if (!v) return Corrupt("graph input is -1");
    g.inputs().push_back(v);
  }
  for (int idx : meta.graph_outputs()) {
    ASSIGN_OR_RETURN(ir::Value * v, tensor(idx, "graph output"));
    if (!v) return Corrupt("graph output is -1");
    g.outputs().push_back(v);
  }
  RETURN_IF_ERROR(CheckMemoryPlan(meta, values, engine->order));
  g.RebuildEdges();
  engine->metadata = std::move(meta);
  engine->storage = std::move(storage);
  return engine;
}

absl::StatusOr<std::unique_ptr<Engine>> Parse(const char* data, uint64_t size,
                                              std::shared_ptr<void> storage,
                                              bool verify_sections = true) {
  if (size < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine blob is truncated: ", size, " bytes is smaller than the header"));
  }
  if (std::memcmp(data, kMagic, 8) != 0) {
    return absl::InvalidArgumentError("not a Kiln engine: wrong magic (expected 'KILNENG\\0')");
  }
  uint32_t version = Get<uint32_t>(data + 8);
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine blob format version ", version,
                     " is not supported (this build reads version ", kFormatVersion, ")"));
  }
  uint32_t nsec = Get<uint32_t>(data + 12);
  uint64_t features = Get<uint64_t>(data + 16);
  uint64_t file_bytes = Get<uint64_t>(data + 24);
  if (nsec == 0 || nsec > kMaxSections) return Corrupt(absl::StrCat("section count ", nsec));
  uint64_t table_end = kHeaderBytes + nsec * kEntryBytes;
  if (size < table_end + 32) return absl::InvalidArgumentError("engine blob is truncated (header)");
  Sha256Digest hd = Sha256(data, table_end);
  if (std::memcmp(hd.data(), data + table_end, 32) != 0) {
    return Corrupt("header digest mismatch");
  }
  if (file_bytes != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine blob is truncated or padded: header "
                     "says ",
                     file_bytes, " bytes, file has ", size));
  }
  uint64_t missing = features & ~DetectCpuFeatures();
  if (missing != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine needs CPU features this machine lacks: ", MissingFeatureNames(missing)));
  }
  const char* meta_ptr = nullptr;
  const char* weights_ptr = nullptr;
  uint64_t meta_size = 0, weights_size = 0;
  uint64_t cursor = table_end + 32;  // sections must follow in order, each 64-aligned
  for (uint32_t i = 0; i < nsec; ++i) {
    const char* e = data + kHeaderBytes + i * kEntryBytes;
    uint32_t kind = Get<uint32_t>(e);
    uint64_t off = Get<uint64_t>(e + 8), len = Get<uint64_t>(e + 16);
    if (Get<uint32_t>(e + 4) != 0 || off % kAlign != 0 || off < cursor || off > size ||
        len > size - off) {
      return Corrupt(absl::StrCat("section ", i, " has a bad offset or size"));
    }
    for (uint64_t p = cursor; p < off; ++p) {
      if (data[p] != 0) return Corrupt(absl::StrCat("non-zero padding at byte ", p));
    }
    if (kind == kSectionMetadata) {
      meta_ptr = data + off;
      meta_size = len;
    } else if (kind == kSectionWeights) {
      weights_ptr = data + off;
      weights_size = len;
    } else {
      return Corrupt(absl::StrCat("section ", i, " has unknown kind ", kind));
    }
    if (verify_sections) {
      DigestField d = SectionDigest(kind, data + off, len);
      if (std::memcmp(d.data(), e + 24, 32) != 0) {
        return Corrupt(absl::StrCat("section ", i, " (", SectionName(kind), ") digest mismatch"));
      }
    }
    cursor = off + len;
  }
  for (uint64_t p = cursor; p < size; ++p) {
    if (data[p] != 0) return Corrupt(absl::StrCat("non-zero padding at byte ", p));
  }
  if (!meta_ptr) return Corrupt("no metadata section");
  v1::EngineMetadata meta;
  if (!meta.ParseFromArray(meta_ptr, static_cast<int>(meta_size))) {
    return Corrupt("metadata does not parse");
  }
  if (!weights_ptr) weights_ptr = data;  // a model without constants
  return Rebuild(std::move(meta), weights_ptr, weights_size, std::move(storage));
}

}  // namespace

std::vector<int> TensorIndexOfValues(const ir::Graph& graph, const std::vector<ir::Node*>& order) {
  std::vector<int> index(graph.values().size(), -1);
  int next = 0;
  auto use = [&](const ir::Value* v) {
    if (v && index[v->id] < 0) index[v->id] = next++;
  };
  for (const ir::Value* v : graph.inputs()) use(v);
  for (const ir::Node* n : order) {
    for (const ir::Value* v : n->inputs) use(v);
    for (const ir::Value* v : n->outputs) use(v);
  }
  for (const ir::Value* v : graph.outputs()) use(v);
  return index;
}

absl::StatusOr<std::string> WriteEngine(const ir::Graph& graph, const std::vector<ir::Node*>& order,
                                        const std::vector<KernelChoice>& choices,
                                        v1::EngineMetadata meta, uint64_t required_features,
                                        const std::map<int, WeightEncoding>& encodings) {
  std::vector<int> index = TensorIndexOfValues(graph, order);
  std::vector<const ir::Value*> by_index;
  for (const auto& v : graph.values()) {
    if (index[v->id] >= 0) {
      if (static_cast<int>(by_index.size()) <= index[v->id]) by_index.resize(index[v->id] + 1);
      by_index[index[v->id]] = v.get();
    }
  }
  // Weights are laid out first (offsets only) and copied once, straight into the blob: a big
  // model's weights exist twice while it is written (graph and blob), never three times.
  uint64_t weights_size = 0;
  std::vector<std::pair<const ir::Tensor*, uint64_t>> weight_copies;
  std::vector<std::pair<const WeightEncoding*, uint64_t>> weight_writes;
  meta.clear_tensors();
  for (const ir::Value* v : by_index) {
    v1::TensorInfo* t = meta.add_tensors();
    t->set_name(v->name);
    t->set_dtype(static_cast<int32_t>(v->dtype));
    t->set_kind(static_cast<v1::TensorInfo::Kind>(v->kind));
    t->set_rank_known(v->shape.rank_known);
    auto enc = encodings.find(v->id);
    const WeightEncoding* e = enc != encodings.end() && v->constant ? &enc->second : nullptr;
    if (e) {
      for (int64_t d : e->dims) t->add_dims()->set_value(d);
    } else {
      for (const ir::Dim& d : v->shape.dims) {
        auto* pd = t->add_dims();
        pd->set_value(d.value);
        if (!d.is_static()) pd->set_symbol(d.symbol);
      }
    }
    if (v->constant && !v->is_graph_input) {
      t->set_is_constant(true);
      weights_size = AlignUp(weights_size);
      t->set_weight_offset(weights_size);
      t->set_weight_bytes(e ? e->bytes : v->constant->byte_size());
      for (int64_t d : e ? e->dims : v->constant->dims()) t->add_constant_dims(d);
      if (e) {
        weight_writes.push_back({e, weights_size});
      } else {
        weight_copies.push_back({&*v->constant, weights_size});
      }
      weights_size += e ? e->bytes : v->constant->byte_size();
    }
  }
  meta.clear_graph_inputs();
  meta.clear_graph_outputs();
  for (const ir::Value* v : graph.inputs()) meta.add_graph_inputs(index[v->id]);
  for (const ir::Value* v : graph.outputs()) meta.add_graph_outputs(index[v->id]);
  meta.clear_kernels();
  for (size_t k = 0; k < order.size(); ++k) {
    const ir::Node* n = order[k];
    v1::Kernel* kd = meta.add_kernels();
    kd->set_id(absl::StrCat("k", k));
    kd->set_op_type(ir::OpName(n->op));
    kd->set_since_version(n->since_version);
    for (const ir::Value* v : n->inputs) kd->add_inputs(v ? index[v->id] : -1);
    for (const ir::Value* v : n->outputs) kd->add_outputs(v ? index[v->id] : -1);
    std::vector<std::string> keys;
    for (const auto& [key, a] : n->attrs) keys.push_back(key);
    std::sort(keys.begin(), keys.end());  // deterministic blobs
    for (const auto& key : keys) ToAttr(key, n->attrs.at(key), kd->add_attributes());
    if (n->id >= 0 && n->id < static_cast<int>(choices.size())) {
      const KernelChoice& c = choices[n->id];
      kd->set_backend(c.backend);
      kd->set_isa(c.isa);
      kd->set_dtype(c.dtype);
      for (const auto& p : c.provenance) *kd->add_nodes() = p;
    }
  }
  for (const auto& name : CpuFeatureNames(required_features)) {
    meta.add_required_cpu_features(name);
  }
  std::string meta_bytes;
  if (!meta.SerializeToString(&meta_bytes)) return absl::InternalError("metadata serialization");

  const uint32_t nsec = 2;
  uint64_t table_end = kHeaderBytes + nsec * kEntryBytes;
  uint64_t meta_off = AlignUp(table_end + 32);
  uint64_t weights_off = AlignUp(meta_off + meta_bytes.size());
  uint64_t total = weights_off + weights_size;
  std::string out(total, '\0');
  std::memcpy(&out[0], kMagic, 8);
  Put<uint32_t>(out, 8, kFormatVersion);
  Put<uint32_t>(out, 12, nsec);
  Put<uint64_t>(out, 16, required_features);
  Put<uint64_t>(out, 24, total);
  std::string bv = meta.builder_version().substr(0, 31);
  std::memcpy(&out[32], bv.data(), bv.size());
  std::memcpy(&out[meta_off], meta_bytes.data(), meta_bytes.size());
  for (const auto& [t, off] : weight_copies) {
    if (t->byte_size() > 0) std::memcpy(&out[weights_off + off], t->raw_data(), t->byte_size());
  }
  for (const auto& [e, off] : weight_writes) e->write(&out[weights_off + off]);
  // Section table entries; each digest covers the section's bytes as they sit in the blob.
  auto entry = [&](int i, uint32_t kind, uint64_t off, uint64_t size) {
    size_t e = kHeaderBytes + i * kEntryBytes;
    Put<uint32_t>(out, e, kind);
    Put<uint64_t>(out, e + 8, off);
    Put<uint64_t>(out, e + 16, size);
    DigestField d = SectionDigest(kind, out.data() + off, size);
    std::memcpy(&out[e + 24], d.data(), 32);
  };
  entry(0, kSectionMetadata, meta_off, meta_bytes.size());
  entry(1, kSectionWeights, weights_off, weights_size);
  Sha256Digest hd = Sha256(out.data(), table_end);
  std::memcpy(&out[table_end], hd.data(), 32);
  return out;
}

absl::StatusOr<std::unique_ptr<Engine>> LoadEngineFromBytes(
    std::shared_ptr<const std::string> bytes, bool trusted) {
  // Weights are borrowed in place, so they must be 64-byte aligned in memory: copy into an
  // aligned buffer (std::string storage is only 16-byte aligned).
  size_t n = bytes->size();
  void* p = std::aligned_alloc(64, (n + 63) / 64 * 64 + 64);
  if (!p) return absl::ResourceExhaustedError("cannot allocate engine buffer");
  std::memcpy(p, bytes->data(), n);
  std::shared_ptr<void> storage(p, [](void* q) { std::free(q); });
  return Parse(static_cast<const char*>(p), n, storage, /*verify_sections=*/!trusted);
}

absl::StatusOr<std::unique_ptr<Engine>> LoadEngineFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would block until a writer appears; it is refused
  // below as not a regular file instead.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open engine '", path, "'"));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("engine '", path, "' is empty"));
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot mmap '", path, "'"));
  std::shared_ptr<void> storage(m, [size](void* q) { munmap(q, size); });
  auto engine = Parse(static_cast<const char*>(m), size, storage);
  if (!engine.ok()) {
    return absl::Status(engine.status().code(),
                        absl::StrCat("'", path, "': ", engine.status().message()));
  }
  return engine;
}

}  // namespace kiln::plan
