#include "engine/report/sample_inputs.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/common/half.h"
#include "engine/common/status.h"

namespace kiln::report {
namespace {

// ---- Flag parsing -------------------------------------------------------------------------------

// Splits `NAME=VALUE` at the last '=' (values never contain one; names rarely might).
absl::Status SplitFlag(const std::string& flag, const std::string& flag_value,
                       const std::string& expected, std::string& name, std::string& value) {
  size_t eq = flag_value.rfind('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", flag_value, "': expected ", expected, ", found no '='"));
  }
  if (eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", flag_value, "': expected ", expected,
                                                   ", the input NAME is empty"));
  }
  name = flag_value.substr(0, eq);
  value = flag_value.substr(eq + 1);
  return absl::OkStatus();
}

// ---- Deterministic random numbers ---------------------------------------------------------------

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix, used to derive
// independent, well-spread seeds for each (seed, sample, input) stream.
uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t StreamSeed(uint64_t seed, int sample, int input) {
  return Mix64(Mix64(Mix64(seed) + static_cast<uint64_t>(sample)) + static_cast<uint64_t>(input));
}

// [0, 1) from the top 53 bits: every result is an exact double, spaced 2^-53.
double UnitDouble(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }

// [0, n) by multiply-high (n == 0 means 2^64). No rejection step: the bias is at most n / 2^64,
// far below anything a sample input could show, and every value costs exactly one draw.
uint64_t Below(uint64_t x, uint64_t n) {
  if (n == 0) return x;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

// ---- Dtypes -------------------------------------------------------------------------------------

// Largest finite value of a floating dtype.
double MaxFinite(DataType t) {
  switch (t) {
    case DataType::kF16:
      return 65504.0;
    case DataType::kBF16:
      return static_cast<double>(BFloat16BitsToFloat(0x7f7f));
    case DataType::kF32:
      return static_cast<double>(FLT_MAX);
    default:
      return DBL_MAX;
  }
}

// The value of dtype `t` nearest to `v` (f16 and bf16 through f32, as half.h converts).
double RoundToType(DataType t, double v) {
  switch (t) {
    case DataType::kF32:
      return static_cast<float>(v);
    case DataType::kF16:
      return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(v)));
    case DataType::kBF16:
      return BFloat16BitsToFloat(FloatToBFloat16Bits(static_cast<float>(v)));
    default:
      return v;
  }
}

// One step from a 16-bit sign-magnitude float towards +inf (`up`) or -inf; finite input.
uint16_t Step16(uint16_t bits, bool up) {
  bool negative = bits & 0x8000u;
  if ((bits & 0x7fffu) == 0) return up ? 0x0001u : 0x8001u;
  return (negative != up) ? bits + 1 : bits - 1;
}

// The neighbour of the dtype-`t` value `r` towards +inf (`up`) or -inf.
double StepToward(DataType t, double r, bool up) {
  double inf = up ? HUGE_VAL : -HUGE_VAL;
  switch (t) {
    case DataType::kF32:
      return std::nextafter(static_cast<float>(r), static_cast<float>(inf));
    case DataType::kF16:
      return HalfBitsToFloat(Step16(FloatToHalfBits(static_cast<float>(r)), up));
    case DataType::kBF16:
      return BFloat16BitsToFloat(Step16(FloatToBFloat16Bits(static_cast<float>(r)), up));
    default:
      return std::nextafter(r, inf);
  }
}

// `v` (in [lo, hi]) rounded to dtype `t`; when rounding crosses a bound and the neighbour on
// the inner side is still inside, that neighbour instead, so the values respect the range the
// user asked for even when its bounds are not representable.
double Quantize(DataType t, double v, double lo, double hi) {
  double r = RoundToType(t, v);
  if (r > hi) {
    double d = StepToward(t, r, false);
    if (d >= lo) r = d;
  } else if (r < lo) {
    double u = StepToward(t, r, true);
    if (u <= hi) r = u;
  }
  return r;
}

void StoreFloat(DataType t, void* p, int64_t i, double r) {
  switch (t) {
    case DataType::kF32:
      static_cast<float*>(p)[i] = static_cast<float>(r);
      break;
    case DataType::kF16:
      static_cast<uint16_t*>(p)[i] = FloatToHalfBits(static_cast<float>(r));
      break;
    case DataType::kBF16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16Bits(static_cast<float>(r));
      break;
    default:
      static_cast<double*>(p)[i] = r;
      break;
  }
}

// Representable range of an integer or bool dtype, clipped to int64 (u64 above 2^63 - 1 is not
// offered).
std::pair<int64_t, int64_t> IntLimits(DataType t) {
  switch (t) {
    case DataType::kBool:
      return {0, 1};
    case DataType::kU8:
      return {0, 255};
    case DataType::kI8:
      return {-128, 127};
    case DataType::kU16:
      return {0, 65535};
    case DataType::kI16:
      return {-32768, 32767};
    case DataType::kI32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DataType::kU32:
      return {0, std::numeric_limits<uint32_t>::max()};
    case DataType::kU64:
      return {0, std::numeric_limits<int64_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

void StoreInt(DataType t, void* p, int64_t i, int64_t v) {
  switch (t) {
    case DataType::kBool:
    case DataType::kU8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kI8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kU16:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      break;
    case DataType::kI16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kI32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kU32:
      static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      break;
    case DataType::kU64:
      static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      break;
    default:
      static_cast<int64_t*>(p)[i] = v;
      break;
  }
}

// ---- Graph analysis -----------------------------------------------------------------------------

// An embedding table that a graph input indexes.
struct TokenTable {
  int64_t rows = 0;
  std::string table;  // the constant's value name
  std::string node;   // Label() of the Gather
};

bool ForwardsIndices(ir::OpType op) {
  switch (op) {
    case ir::OpType::kCast:
    case ir::OpType::kReshape:
    case ir::OpType::kUnsqueeze:
    case ir::OpType::kSqueeze:
    case ir::OpType::kFlatten:
    case ir::OpType::kIdentity:
      return true;
    default:
      return false;
  }
}

// The constant behind `v`, looking through Cast and Identity (a pass may convert a table's
// dtype with a node rather than in place; the row count stays the same).
const ir::Tensor* ConstantBehind(const ir::Value* v) {
  for (int hops = 0; v != nullptr && hops < 16; ++hops) {
    if (v->constant) return &*v->constant;
    const ir::Node* p = v->producer;
    if (p == nullptr || (p->op != ir::OpType::kCast && p->op != ir::OpType::kIdentity)) break;
    v = p->input(0);
  }
  return nullptr;
}

// Uses of every value: (node, input slot). Built from the nodes rather than Value::consumers so
// that a graph whose edges were not rebuilt is still read correctly.
using Uses = absl::flat_hash_map<const ir::Value*, std::vector<std::pair<const ir::Node*, int>>>;

Uses CollectUses(const ir::Graph& graph) {
  Uses uses;
  for (const auto& n : graph.nodes()) {
    for (int i = 0; i < n->num_inputs(); ++i) {
      if (n->inputs[i]) uses[n->inputs[i]].push_back({n.get(), i});
    }
  }
  return uses;
}

// The smallest embedding table that `input` indexes: a Gather whose indices (input 1) are the
// input, directly or through ForwardsIndices ops (their data input 0), and whose data (input 0)
// is a constant. nullopt when there is none.
std::optional<TokenTable> FindTokenTable(const ir::Value* input, const Uses& uses) {
  std::optional<TokenTable> best;
  std::vector<const ir::Value*> work = {input};
  std::set<int> seen = {input->id};
  while (!work.empty()) {
    const ir::Value* v = work.back();
    work.pop_back();
    auto it = uses.find(v);
    if (it == uses.end()) continue;
    for (const auto& [node, slot] : it->second) {
      if (node->op == ir::OpType::kGather && slot == 1) {
        const ir::Tensor* table = ConstantBehind(node->input(0));
        if (table == nullptr || table->rank() == 0) continue;
        int64_t axis = node->GetInt("axis", 0);
        if (axis < 0) axis += table->rank();
        if (axis < 0 || axis >= table->rank()) continue;
        if (!best || table->dim(static_cast<int>(axis)) < best->rows) {
          best =
              TokenTable{table->dim(static_cast<int>(axis)), node->input(0)->name, node->Label()};
        }
      } else if (slot == 0 && ForwardsIndices(node->op) && node->num_outputs() > 0 &&
                 node->outputs[0] && seen.insert(node->outputs[0]->id).second) {
        work.push_back(node->outputs[0]);
      }
    }
  }
  return best;
}

bool IsMaskName(const std::string& name) {
  return absl::StrContains(absl::AsciiStrToLower(name), "mask");
}

// ---- Generation plan ----------------------------------------------------------------------------

enum class Kind { kFloat, kInt, kMask };

// How one input is generated.
struct InputPlan {
  const ir::Value* value = nullptr;
  std::vector<int64_t> dims;
  Kind kind = Kind::kInt;
  double flo = 0, fhi = 0;   // kFloat
  int64_t ilo = 0, ihi = 0;  // kInt, inclusive
};

std::string DtypeText(DataType t) { return DataTypeOnnxName(t); }

// The range of a floating input: checked finite and within the dtype.
absl::Status FloatRange(const ir::Value* v, double lo, double hi, const std::string& origin,
                        InputPlan& plan) {
  double max = MaxFinite(v->dtype);
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi)) {
    return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "': ", origin, " [", lo,
                                                   ", ", hi, "] is not a finite range"));
  }
  if (lo < -max || hi > max) {
    return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' (", DtypeText(v->dtype),
                                                   "): ", origin, " [", lo, ", ", hi,
                                                   "] exceeds the dtype's largest value ", max));
  }
  plan.kind = Kind::kFloat;
  plan.flo = lo;
  plan.fhi = hi;
  return absl::OkStatus();
}

// An explicit --input-range of an integer or bool input: integral and within the dtype.
absl::Status IntRange(const ir::Value* v, double lo, double hi, InputPlan& plan) {
  auto [min, max] = IntLimits(v->dtype);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' (", DtypeText(v->dtype),
                                                   "): --input-range ", lo, ",", hi, " ", why));
  };
  if (!(lo <= hi)) return bad("has LO greater than HI");
  if (std::floor(lo) != lo || std::floor(hi) != hi) return bad("needs integer bounds");
  // Compared as doubles: the int64 limits are powers of two (or one less, which rounds up to
  // one) so an out-of-range bound is never cast.
  if (lo < static_cast<double>(min) || hi > static_cast<double>(max) ||
      hi >= 9223372036854775808.0) {
    return bad(absl::StrCat("is outside the dtype's range ", min, "..", max));
  }
  plan.kind = Kind::kInt;
  plan.ilo = static_cast<int64_t>(lo);
  plan.ihi = static_cast<int64_t>(hi);
  return absl::OkStatus();
}

std::string ListInputs(const std::vector<const ir::Value*>& inputs) {
  std::vector<std::string> names;
  for (const ir::Value* v : inputs) names.push_back(absl::StrCat("'", v->name, "'"));
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

std::string ShapeText(const std::vector<int64_t>& dims) { return absl::StrJoin(dims, "x"); }

// Resolves every input's dims. Symbols are bound first from every --shape, then by default to 1
// in graph-input order, so an input's dims never depend on which input carried the --shape.
absl::Status ResolveDims(const std::vector<const ir::Value*>& inputs, const SampleOptions& options,
                         std::vector<InputPlan>& plans, std::vector<std::string>& notes) {
  struct Binding {
    int64_t value;
    std::string by;  // the input whose --shape bound it
  };
  std::map<std::string, Binding> bound;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Value* v = inputs[k];
    auto it = options.shapes.find(v->name);
    if (it == options.shapes.end()) continue;
    const std::vector<int64_t>& given = it->second;
    std::string flag = absl::StrCat("--shape ", v->name, "=", ShapeText(given));
    for (int64_t d : given) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(flag, ": negative dim ", d));
    }
    if (v->shape.rank_known) {
      if (static_cast<int>(given.size()) != v->shape.rank()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": input '", v->name, "' has rank ", v->shape.rank(), " (",
                         v->shape.ToString(), "), the flag gives ", given.size(), " dims"));
      }
      for (int a = 0; a < v->shape.rank(); ++a) {
        const ir::Dim& d = v->shape.dims[a];
        if (d.is_static() && d.value != given[a]) {
          return absl::InvalidArgumentError(
              absl::StrCat(flag, ": axis ", a, " of input '", v->name, "' is static ", d.value,
                           " (", v->shape.ToString(), "), the flag gives ", given[a]));
        }
        if (d.is_static() || d.symbol.empty()) continue;
        auto [b, inserted] = bound.insert({d.symbol, Binding{given[a], v->name}});
        if (!inserted && b->second.value != given[a]) {
          return absl::InvalidArgumentError(absl::StrCat(
              flag, ": symbolic dim '", d.symbol, "' of input '", v->name, "' is ", given[a],
              " here but ", b->second.value, " in --shape of input '", b->second.by, "'"));
        }
      }
    }
    plans[k].dims = given;
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Value* v = inputs[k];
    if (options.shapes.count(v->name)) continue;
    if (!v->shape.rank_known) {
      return absl::InvalidArgumentError(absl::StrCat("input '", v->name,
                                                     "' has an unknown rank; give its dims with "
                                                     "--shape ",
                                                     v->name, "=D0xD1x..."));
    }
    std::vector<std::string> symbols, unknown, hint;
    for (int a = 0; a < v->shape.rank(); ++a) {
      const ir::Dim& d = v->shape.dims[a];
      int64_t value = 1;
      std::string shown;
      if (d.is_static()) {
        value = d.value;
      } else if (!d.symbol.empty() && bound.count(d.symbol)) {
        value = bound.at(d.symbol).value;
      } else if (!d.symbol.empty()) {
        bound[d.symbol] = Binding{1, ""};
        symbols.push_back(absl::StrCat("'", d.symbol, "'"));
        shown = absl::StrCat("<", d.symbol, ">");
      } else {
        unknown.push_back(absl::StrCat(a));
        shown = absl::StrCat("<d", a, ">");
      }
      plans[k].dims.push_back(value);
      hint.push_back(shown.empty() ? absl::StrCat(value) : shown);
    }
    std::vector<std::string> parts;
    if (!symbols.empty()) {
      parts.push_back(absl::StrCat("symbolic dim", symbols.size() > 1 ? "s " : " ",
                                   absl::StrJoin(symbols, ", ")));
    }
    if (!unknown.empty()) {
      parts.push_back(absl::StrCat("unknown dim", unknown.size() > 1 ? "s at axes " : " at axis ",
                                   absl::StrJoin(unknown, ", ")));
    }
    if (!parts.empty()) {
      notes.push_back(absl::StrCat("input '", v->name, "': ", absl::StrJoin(parts, " and "),
                                   " bound to 1 (use --shape ", v->name, "=",
                                   absl::StrJoin(hint, "x"), ")"));
    }
  }
  return absl::OkStatus();
}

// Fills one tensor of `plan` from `rng`.
void Fill(const InputPlan& plan, std::mt19937_64& rng, ir::Tensor& t) {
  DataType dtype = t.dtype();
  void* p = t.raw_data();
  int64_t n = t.num_elements();
  switch (plan.kind) {
    case Kind::kFloat:
      for (int64_t i = 0; i < n; ++i) {
        double u = UnitDouble(rng());
        // lo*(1-u) + hi*u cannot overflow even for ranges as wide as the dtype.
        double v = std::clamp(plan.flo * (1.0 - u) + plan.fhi * u, plan.flo, plan.fhi);
        StoreFloat(dtype, p, i, Quantize(dtype, v, plan.flo, plan.fhi));
      }
      break;
    case Kind::kInt: {
      // Wraps to 0 (meaning 2^64) only for the full int64 range.
      uint64_t span = static_cast<uint64_t>(plan.ihi) - static_cast<uint64_t>(plan.ilo) + 1;
      for (int64_t i = 0; i < n; ++i) {
        StoreInt(dtype, p, i,
                 static_cast<int64_t>(static_cast<uint64_t>(plan.ilo) + Below(rng(), span)));
      }
      break;
    }
    case Kind::kMask: {
      if (t.rank() == 0) {
        StoreInt(dtype, p, 0, 1);
        break;
      }
      int64_t len = t.dim(t.rank() - 1);
      if (len == 0) break;
      for (int64_t row = 0; row < n / len; ++row) {
        int64_t ones = 1 + static_cast<int64_t>(Below(rng(), static_cast<uint64_t>(len)));
        for (int64_t j = 0; j < len; ++j) StoreInt(dtype, p, row * len + j, j < ones ? 1 : 0);
      }
      break;
    }
  }
}

}  // namespace

absl::Status ParseInputRange(const std::string& flag_value, SampleOptions& options) {
  std::string name, value;
  RETURN_IF_ERROR(SplitFlag("--input-range", flag_value, "NAME=LO,HI", name, value));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--input-range '", flag_value, "': ", why));
  };
  size_t comma = value.find(',');
  if (comma == std::string::npos) {
    return bad(absl::StrCat("expected LO,HI after '", name, "=', got '", value, "'"));
  }
  std::string parts[2] = {value.substr(0, comma), value.substr(comma + 1)};
  double bounds[2];
  for (int i = 0; i < 2; ++i) {
    if (!absl::SimpleAtod(parts[i], &bounds[i])) {
      return bad(absl::StrCat(i == 0 ? "LO" : "HI", " '", parts[i], "' is not a number"));
    }
    if (!std::isfinite(bounds[i])) {
      return bad(absl::StrCat(i == 0 ? "LO" : "HI", " '", parts[i], "' is not finite"));
    }
  }
  if (bounds[0] > bounds[1]) {
    return bad(absl::StrCat("LO '", parts[0], "' is greater than HI '", parts[1], "'"));
  }
  options.ranges[name] = {bounds[0], bounds[1]};
  return absl::OkStatus();
}

absl::Status ParseShape(const std::string& flag_value, SampleOptions& options) {
  std::string name, value;
  RETURN_IF_ERROR(SplitFlag("--shape", flag_value, "NAME=D0xD1x... (e.g. ids=1x128)", name, value));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--shape '", flag_value, "': ", why));
  };
  if (value.empty()) return bad(absl::StrCat("no dims after '", name, "=' (e.g. 1x128)"));
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(value, 'x')) {
    int64_t d;
    if (part.empty()) return bad("empty dim (two 'x' in a row, or one at an end)");
    if (!absl::SimpleAtoi(part, &d)) return bad(absl::StrCat("dim '", part, "' is not an integer"));
    if (d < 0) return bad(absl::StrCat("dim '", part, "' is negative"));
    dims.push_back(d);
  }
  options.shapes[name] = std::move(dims);
  return absl::OkStatus();
}

absl::StatusOr<Samples> GenerateSamples(const ir::Graph& graph, const SampleOptions& options) {
  if (options.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--samples must be at least 1, got ", options.count));
  }
  std::vector<const ir::Value*> inputs;
  for (const ir::Value* v : graph.inputs()) {
    if (!v->constant) inputs.push_back(v);
  }
  auto known = [&](const std::string& name) {
    return std::any_of(inputs.begin(), inputs.end(),
                       [&](const ir::Value* v) { return v->name == name; });
  };
  for (const auto& [name, range] : options.ranges) {
    if (!known(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input-range names '", name,
                       "', which is not a graph input; inputs: ", ListInputs(inputs)));
    }
  }
  for (const auto& [name, dims] : options.shapes) {
    if (!known(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shape names '", name, "', which is not a graph input; inputs: ", ListInputs(inputs)));
    }
  }
  for (const ir::Value* v : inputs) {
    if (!IsFloating(v->dtype) && !IsInteger(v->dtype) && v->dtype != DataType::kBool) {
      return absl::UnimplementedError(absl::StrCat(
          "input '", v->name, "' has dtype ", DtypeText(v->dtype),
          ": sample inputs can only be generated for numeric and bool inputs (give --inputs DIR)"));
    }
  }

  Samples out;
  std::vector<InputPlan> plans(inputs.size());
  RETURN_IF_ERROR(ResolveDims(inputs, options, plans, out.notes));

  int64_t sample_bytes = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    plans[k].value = inputs[k];
    int64_t n = ir::NumElementsOf(plans[k].dims);
    int64_t esize = static_cast<int64_t>(DataTypeSize(inputs[k]->dtype));
    if (n < 0 || n > (options.max_sample_bytes - sample_bytes) / esize) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", inputs[k]->name, "' with dims ", ir::DimsToString(plans[k].dims),
                       " makes one sample set larger than ", options.max_sample_bytes, " bytes"));
    }
    sample_bytes += n * esize;
  }

  Uses uses = CollectUses(graph);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Value* v = inputs[k];
    InputPlan& plan = plans[k];
    auto range = options.ranges.find(v->name);
    if (IsFloating(v->dtype)) {
      if (range != options.ranges.end()) {
        RETURN_IF_ERROR(
            FloatRange(v, range->second.first, range->second.second, "--input-range", plan));
      } else {
        RETURN_IF_ERROR(
            FloatRange(v, options.float_lo, options.float_hi, "the default float range", plan));
      }
      continue;
    }
    if (range != options.ranges.end()) {
      RETURN_IF_ERROR(IntRange(v, range->second.first, range->second.second, plan));
      continue;
    }
    auto [min, max] = IntLimits(v->dtype);
    plan.kind = Kind::kInt;
    if (v->dtype == DataType::kBool) {
      plan.ilo = 0;
      plan.ihi = 1;
    } else if (std::optional<TokenTable> table = FindTokenTable(v, uses)) {
      if (table->rows <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", v->name, "' indexes the empty table '", table->table, "' in ", table->node));
      }
      plan.ilo = 0;
      plan.ihi = std::min(table->rows - 1, max);
      out.notes.push_back(absl::StrCat("input '", v->name, "': token ids in [0, ", plan.ihi + 1,
                                       ") (rows of '", table->table, "' gathered by ", table->node,
                                       "; change with --input-range)"));
    } else if (IsMaskName(v->name)) {
      plan.kind = Kind::kMask;
      out.notes.push_back(absl::StrCat("input '", v->name,
                                       "': attention mask, per row ones then a random-length tail "
                                       "of zeros (change with --input-range)"));
    } else {
      plan.ilo = std::max<int64_t>(0, min);
      plan.ihi = std::min<int64_t>(9, max);
    }
  }

  for (int s = 0; s < options.count; ++s) {
    std::vector<ir::Tensor> set;
    set.reserve(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(inputs[k]->dtype, plans[k].dims));
      std::mt19937_64 rng(StreamSeed(options.seed, s, static_cast<int>(k)));
      Fill(plans[k], rng, t);
      set.push_back(std::move(t));
    }
    out.sets.push_back(std::move(set));
  }
  out.source = absl::StrCat("generated (seed ", options.seed, ", ", options.count,
                            options.count == 1 ? " sample)" : " samples)");
  return out;
}

}  // namespace kiln::report
