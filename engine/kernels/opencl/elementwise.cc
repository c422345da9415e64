// Elementwise ops on OpenCL, generated from one table: each op is an OpenCL C expression of
// the float input(s) (x; a and b) and up to two float parameters (p0, p1) read from the node's
// attributes as the reference kernels read them. One program per (op, storage type); binary
// ops broadcast (numpy rules, up to kMaxRank dims) with a plain path for equal shapes.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/common/status.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"

namespace kiln::kernels::opencl {
namespace {

using ir::OpType;

constexpr int kMaxRank = 6;

struct Params {
  float p0 = 0, p1 = 0;
};
using ParamsFn = absl::StatusOr<Params> (*)(const ir::Node&);

struct UnaryDef {
  OpType op;
  const char* expr;  // of float x, p0, p1
  ParamsFn params = nullptr;
};

absl::Status Invalid(const ir::Node& n, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(n.Label(), " ", why));
}

// Formulas as the reference kernels (cpu/ref/elementwise_*.cc) write them, in fp32.
const UnaryDef kUnary[] = {
    {OpType::kRelu, "x < 0.0f ? 0.0f : x"},
    {OpType::kLeakyRelu, "x < 0.0f ? p0 * x : x",
     [](const ir::Node& n) -> absl::StatusOr<Params> {
       return Params{n.GetFloat("alpha", 0.01f)};
     }},
    {OpType::kElu, "x < 0.0f ? p0 * expm1(x) : x",
     [](const ir::Node& n) -> absl::StatusOr<Params> { return Params{n.GetFloat("alpha", 1.0f)}; }},
    {OpType::kSelu, "x > 0.0f ? p1 * x : p1 * (p0 * exp(x) - p0)",
     [](const ir::Node& n) -> absl::StatusOr<Params> {
       return Params{n.GetFloat("alpha", 1.67326319217681884765625f),
                     n.GetFloat("gamma", 1.05070102214813232421875f)};
     }},
    {OpType::kCelu,
     "(x > 0.0f ? x : 0.0f) + (p0 * expm1(x / p0) < 0.0f ? p0 * expm1(x / p0) : 0.0f)",
     [](const ir::Node& n) -> absl::StatusOr<Params> {
       const float a = n.GetFloat("alpha", 1.0f);
       if (a == 0) return Invalid(n, "attribute alpha must be non-zero");
       return Params{a};
     }},
    {OpType::kThresholdedRelu, "x > p0 ? x : 0.0f",
     [](const ir::Node& n) -> absl::StatusOr<Params> { return Params{n.GetFloat("alpha", 1.0f)}; }},
    {OpType::kSigmoid, "x >= 0.0f ? 1.0f / (1.0f + exp(-x)) : exp(x) / (1.0f + exp(x))"},
    {OpType::kHardSigmoid, "MINP(MAXP(p0 * x + p1, 0.0f), 1.0f)",
     [](const ir::Node& n) -> absl::StatusOr<Params> {
       return Params{n.GetFloat("alpha", 0.2f), n.GetFloat("beta", 0.5f)};
     }},
    {OpType::kHardSwish, "x * MINP(MAXP(x / 6.0f + 0.5f, 0.0f), 1.0f)"},
    {OpType::kSoftplus, "x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x))"},
    {OpType::kSoftsign, "x / (1.0f + fabs(x))"},
    {OpType::kMish, "x * kiln_tanh(x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x)))"},
    {OpType::kTanh, "kiln_tanh(x)"},
    {OpType::kExp, "exp(x)"},
    {OpType::kLog, "log(x)"},
    {OpType::kSqrt, "sqrt(x)"},
    {OpType::kAbs, "fabs(x)"},
    {OpType::kNeg, "-x"},
    {OpType::kReciprocal, "1.0f / x"},
    {OpType::kFloor, "floor(x)"},
    {OpType::kCeil, "ceil(x)"},
    {OpType::kErf, "erf(x)"},
    {OpType::kSin, "sin(x)"},
    {OpType::kCos, "cos(x)"},
    {OpType::kIdentity, "x"},
    // Below 0, 1 + erf(x / sqrt 2) as erfc(-x / sqrt 2): no cancellation (erf within 16 ulps
    // of -1 would leave up to 16 ulps of 1 where the result is ~0).
    {OpType::kGelu,
     "p0 != 0.0f ? 0.5f * x * (1.0f + kiln_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)))"
     " : x < 0.0f ? 0.5f * x * erfc(x * -0.70710678118654752f)"
     " : 0.5f * x * (1.0f + erf(x * 0.70710678118654752f))",
     [](const ir::Node& n) -> absl::StatusOr<Params> {
       const std::string mode = n.GetString("approximate", "none");
       if (mode != "none" && mode != "tanh") {
         return Invalid(
             n, absl::StrCat("attribute approximate must be \"none\" or \"tanh\", got \"", mode,
                             "\""));
       }
       return Params{mode == "tanh" ? 1.0f : 0.0f};
     }},
};

struct BinaryDef {
  OpType op;
  const char* expr;  // of float a, b
};

const BinaryDef kBinary[] = {
    {OpType::kAdd, "a + b"}, {OpType::kSub, "a - b"},     {OpType::kMul, "a * b"},
    {OpType::kDiv, "a / b"}, {OpType::kPow, "pow(a, b)"}, {OpType::kPRelu, "a < 0.0f ? b * a : a"},
};

const UnaryDef* FindUnary(OpType op) {
  for (const UnaryDef& d : kUnary) {
    if (d.op == op) return &d;
  }
  return nullptr;
}

}  // namespace

const char* UnaryExpression(ir::OpType op) {
  const UnaryDef* d = FindUnary(op);
  return d != nullptr ? d->expr : nullptr;
}

namespace {
const BinaryDef* FindBinary(OpType op) {
  for (const BinaryDef& d : kBinary) {
    if (d.op == op) return &d;
  }
  return nullptr;
}

std::string UnarySource(const UnaryDef& def, DataType dt) {
  return absl::StrCat(StoragePrelude(dt), R"(
__kernel void run(__global const S_T* xs, ulong xo, __global S_T* ys, ulong yo, ulong n,
                  float p0, float p1) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const float x = S_LD(xs + xo, i);
  const float v = )",
                      def.expr, R"(;
  S_ST(v, ys + yo, i);
}
)");
}

// Two entry points: `same` (every operand of the output's shape) and `bcast` (strides of A and
// B per output dim, kMaxRank dims, leading ones 1 with stride 0).
std::string BinarySource(const BinaryDef& def, DataType dt) {
  std::string body = absl::StrCat("  const float v = ", def.expr, ";\n  S_ST(v, ys + yo, i);\n");
  return absl::StrCat(StoragePrelude(dt), R"(
__kernel void same(__global const S_T* as, ulong ao, __global const S_T* bs, ulong bo,
                   __global S_T* ys, ulong yo, ulong n) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  const float a = S_LD(as + ao, i);
  const float b = S_LD(bs + bo, i);
)",
                      body, R"(}

__kernel void bcast(__global const S_T* as, ulong ao, __global const S_T* bs, ulong bo,
                    __global S_T* ys, ulong yo, ulong n,
                    ulong d0, ulong d1, ulong d2, ulong d3, ulong d4, ulong d5,
                    ulong a0, ulong a1, ulong a2, ulong a3, ulong a4, ulong a5,
                    ulong b0, ulong b1, ulong b2, ulong b3, ulong b4, ulong b5) {
  const size_t i = get_global_id(0);
  if (i >= n) return;
  ulong r = i, ai = 0, bi = 0, c;
  c = r % d5; r /= d5; ai += c * a5; bi += c * b5;
  c = r % d4; r /= d4; ai += c * a4; bi += c * b4;
  c = r % d3; r /= d3; ai += c * a3; bi += c * b3;
  c = r % d2; r /= d2; ai += c * a2; bi += c * b2;
  c = r % d1; r /= d1; ai += c * a1; bi += c * b1;
  ai += r * a0; bi += r * b0;
  const float a = S_LD(as + ao, ai);
  const float b = S_LD(bs + bo, bi);
)",
                      body, "}\n");
}

class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const ir::Node& node, const UnaryDef& def, Params p)
      : node_(node), def_(def), p_(p) {}

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr) return Invalid(node_, "needs input 0");
    const DataType dt = x->dtype();
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, x->dims()));
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    if (fn_ == nullptr) fn_ = std::make_unique<ClFunction>(what, UnarySource(def_, dt), "run");
    ASSIGN_OR_RETURN(cl_kernel k, fn_->Get(dev));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*x, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    const cl_ulong n = static_cast<cl_ulong>(x->num_elements());
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, ya, n, p_.p0, p_.p1));
    return Launch1D(*dev, k, n, what);
  }

 private:
  const ir::Node& node_;
  const UnaryDef& def_;
  Params p_;
  std::unique_ptr<ClFunction> fn_;
};

// numpy broadcasting of two shapes into `out`; false when they do not broadcast.
bool Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
               std::vector<int64_t>& out) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

// Strides (elements) of `dims` walked over `out` (right-aligned; 0 where broadcast), padded on
// the left to kMaxRank.
std::vector<cl_ulong> Strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out) {
  std::vector<cl_ulong> s(kMaxRank, 0);
  int64_t stride = 1;
  for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
    const int slot = kMaxRank - static_cast<int>(dims.size()) + i;
    s[slot] = dims[i] == 1 ? 0 : static_cast<cl_ulong>(stride);
    stride *= dims[i];
  }
  (void)out;
  return s;
}

class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const ir::Node& node, const BinaryDef& def) : node_(node), def_(def) {}

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* a = ctx.input(0);
    const ir::Tensor* b = ctx.input(1);
    if (a == nullptr || b == nullptr) return Invalid(node_, "needs inputs 0 and 1");
    const DataType dt = a->dtype();
    if (b->dtype() != dt) {
      return Invalid(node_, absl::StrCat("inputs are ", DataTypeOnnxName(dt), " and ",
                                         DataTypeOnnxName(b->dtype())));
    }
    std::vector<int64_t> dims;
    if (!Broadcast(a->dims(), b->dims(), dims)) {
      return Invalid(node_, absl::StrCat("shapes ", ir::DimsToString(a->dims()), " and ",
                                         ir::DimsToString(b->dims()), " do not broadcast"));
    }
    if (dims.size() > kMaxRank) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Label(), " broadcasts over more than ", kMaxRank, " dims"));
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, dims));
    const std::string what = Label(node_, dt);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    if (source_.empty()) source_ = BinarySource(def_, dt);
    const bool same = a->dims() == dims && b->dims() == dims;
    std::unique_ptr<ClFunction>& fn = same ? same_ : bcast_;
    if (fn == nullptr) fn = std::make_unique<ClFunction>(what, source_, same ? "same" : "bcast");
    ASSIGN_OR_RETURN(cl_kernel k, fn->Get(dev));
    ASSIGN_OR_RETURN(TensorArg aa, ArgOf(*a, what));
    ASSIGN_OR_RETURN(TensorArg ba, ArgOf(*b, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    const cl_ulong n = static_cast<cl_ulong>(y->num_elements());
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, aa, ba, ya, n));
    if (!same) {
      std::vector<cl_ulong> d(kMaxRank, 1);
      for (size_t i = 0; i < dims.size(); ++i) d[kMaxRank - dims.size() + i] = dims[i];
      const std::vector<cl_ulong> as = Strides(a->dims(), dims), bs = Strides(b->dims(), dims);
      for (int i = 0; i < kMaxRank; ++i) {
        RETURN_IF_ERROR(SetArgs(*dev, k, what, 7 + i, d[i]));
        RETURN_IF_ERROR(SetArgs(*dev, k, what, 7 + kMaxRank + i, as[i]));
        RETURN_IF_ERROR(SetArgs(*dev, k, what, 7 + 2 * kMaxRank + i, bs[i]));
      }
    }
    return Launch1D(*dev, k, n, what);
  }

 private:
  const ir::Node& node_;
  const BinaryDef& def_;
  std::string source_;
  std::unique_ptr<ClFunction> same_, bcast_;
};

absl::StatusOr<std::unique_ptr<Kernel>> MakeUnary(const ir::Node& node) {
  const UnaryDef* def = FindUnary(node.op);
  if (def == nullptr) return absl::InternalError(absl::StrCat(node.Label(), " is not unary"));
  Params p;
  if (def->params != nullptr) {
    ASSIGN_OR_RETURN(p, def->params(node));
  }
  return std::unique_ptr<Kernel>(new UnaryKernel(node, *def, p));
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeBinary(const ir::Node& node) {
  const BinaryDef* def = FindBinary(node.op);
  if (def == nullptr) return absl::InternalError(absl::StrCat(node.Label(), " is not binary"));
  return std::unique_ptr<Kernel>(new BinaryKernel(node, *def));
}

// Placement asks before it puts a node here: every floating value of one storage type, and a
// broadcast of at most kMaxRank dims (shapes known at build time; run time checks again).
bool SameFloatType(const ir::Node& node) {
  DataType dt = DataType::kUndefined;
  for (const ir::Value* v : node.inputs) {
    if (v == nullptr) continue;
    if (!ClFloatType(v->dtype) || (dt != DataType::kUndefined && v->dtype != dt)) return false;
    dt = v->dtype;
  }
  for (const ir::Value* v : node.outputs) {
    // Undefined: not inferred (a node made directly, as in tests); the kernel checks at run time.
    if (v != nullptr && v->dtype != dt && v->dtype != DataType::kUndefined) return false;
  }
  return dt != DataType::kUndefined;
}

bool UnarySupports(const ir::Node& node) { return node.num_inputs() == 1 && SameFloatType(node); }

bool BinarySupports(const ir::Node& node) {
  if (node.num_inputs() != 2 || !SameFloatType(node)) return false;
  for (const ir::Value* v : node.inputs) {
    if (v->shape.rank_known && v->shape.rank() > kMaxRank) return false;
  }
  return true;
}

// Cast between float storage types: the value read exactly, rounded once to the target (round
// to nearest even; a NaN stays NaN), as the CPU's conversions do.
class CastKernel final : public Kernel {
 public:
  CastKernel(const ir::Node& node, DataType to) : node_(node), to_(to) {}

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr) return Invalid(node_, "needs input 0");
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, to_, x->dims()));
    const std::string what = Label(node_, to_);
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*y, what));
    if (fn_ == nullptr) {
      fn_ = std::make_unique<ClFunction>(
          what, absl::StrCat(StoragePrelude(x->dtype(), "X"), StoragePrelude(to_, "Y"), R"(
__kernel void run(__global const X_T* xs, ulong xo, __global Y_T* ys, ulong yo, ulong n) {
  const size_t i = get_global_id(0);
  if (i < n) Y_ST(X_LD(xs + xo, i), ys + yo, i);
}
)"),
          "run");
    }
    ASSIGN_OR_RETURN(cl_kernel k, fn_->Get(dev));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(*x, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    const cl_ulong n = static_cast<cl_ulong>(x->num_elements());
    RETURN_IF_ERROR(SetArgs(*dev, k, what, 0, xa, ya, n));
    return Launch1D(*dev, k, n, what);
  }

 private:
  const ir::Node& node_;
  DataType to_;
  std::unique_ptr<ClFunction> fn_;
};

DataType CastTarget(const ir::Node& node) {
  return DataTypeFromOnnx(static_cast<int32_t>(node.GetInt("to", 0)));
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeCast(const ir::Node& node) {
  const DataType to = CastTarget(node);
  if (!ClFloatType(to)) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " casts to ", DataTypeOnnxName(to), " (not on OpenCL)"));
  }
  return std::unique_ptr<Kernel>(new CastKernel(node, to));
}

// Float to float only (integer and bool casts are shape and index computations: the CPU's).
bool CastSupports(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  return x != nullptr && ClFloatType(x->dtype) && ClFloatType(CastTarget(node)) &&
         node.GetInt("saturate", 1) == 1 && !node.has_attr("round_mode");
}

}  // namespace

void RegisterElementwise(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (const UnaryDef& d : kUnary) {
    KernelDef def{d.op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeUnary};
    def.supports = UnarySupports;
    r.Add(def);
  }
  for (const BinaryDef& d : kBinary) {
    KernelDef def{d.op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeBinary};
    def.supports = BinarySupports;
    r.Add(def);
  }
  KernelDef cast{ir::OpType::kCast, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeCast};
  cast.supports = CastSupports;
  r.Add(cast);
}

void RegisterOpenCl(Registry& r) {
  RegisterElementwise(r);
  RegisterMatMul(r);
  RegisterConv(r);
  RegisterMemory(r);
  RegisterNorm(r);
  RegisterNormFused(r);
  RegisterAttention(r);
  RegisterRecurrent(r);
}

}  // namespace kiln::kernels::opencl
