// MatMul, Gemm and FusedMatMul (act(MatMul + bias)) on OpenCL: one tiled GEMM kernel for fp32, fp16
// and bf16 storage. A work-group of 16 x 16 items computes a tile of Y, each item TPT x TPT outputs
// held in registers (kernel_base.h's GemmTiling: the tile size that fills the device), with 16-deep
// slices of A and B staged in local memory. Every output is
// acc = 0, then acc = fma(a[k], b[k], acc) for k = 0 .. K-1: the fp32 order of the CPU's AVX-512
// GEMM (cpu/avx512/gemm.h), one rounding per step, then the Gemm epilogue v = alpha * acc, v = v +
// beta * C, each step rounded to fp32, and one rounding to the storage type. Batches broadcast as
// numpy's matmul (ref::nn::PlanMatMul), up to kMaxBatchRank batch dims.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"

namespace kiln::kernels::opencl {
namespace {

constexpr int kMaxBatchRank = 4;
constexpr size_t kGroup = 16;

// `dt`: A and B; `ct`: Gemm's C or FusedMatMul's bias; `yt`: Y.
std::string GemmSource(DataType dt, DataType ct, DataType yt, cpu::ref::ActKind act,
                       const GemmTiling& tiling) {
  return absl::StrCat(GemmDefines(tiling), StoragePrelude(dt), StoragePrelude(ct, "C"),
                      StoragePrelude(yt, "Y"), ActivationFunction(act), R"(
// The epilogue of output (row, col) of sum v.
inline float finish(float v, uint row, uint col, int epilogue, float alpha, float beta,
                    __global const C_T* Cm, ulong co, ulong c_rs, ulong c_cs, float p0, float p1) {
  if (epilogue == 3) return act(v + C_LD(Cm, co + row * c_rs + col * c_cs), p0, p1);
  if (epilogue == 4) return act(v, p0, p1);
  if (epilogue) {
    v = alpha * v;
    if (epilogue > 1) v = v + beta * C_LD(Cm, co + row * c_rs + col * c_cs);
  }
  return v;
}

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void gemm(__global const S_T* A, ulong ao, __global const S_T* B, ulong bo,
          __global Y_T* Y, ulong yo, uint M, uint N, uint K,
          ulong a_rs, ulong a_cs, ulong b_rs, ulong b_cs,
          ulong bd1, ulong bd2, ulong bd3,
          ulong a_b0, ulong a_b1, ulong a_b2, ulong a_b3,
          ulong b_b0, ulong b_b1, ulong b_b2, ulong b_b3,
          int epilogue, float alpha, float beta,
          __global const C_T* Cm, ulong co, ulong c_rs, ulong c_cs, float p0, float p1,
          __global float* P, uint KC) {
  const uint row0 = get_group_id(1) * TILE, col0 = get_group_id(0) * TILE;
)",
                      GemmPart("bi"), R"(
  // The batch index over up to four batch dims (outermost first), and its A and B matrices.
  ulong r = bi, c3 = r % bd3;
  r /= bd3;
  const ulong c2 = r % bd2;
  r /= bd2;
  const ulong c1 = r % bd1, c0 = r / bd1;
  const ulong a_off = ao + c0 * a_b0 + c1 * a_b1 + c2 * a_b2 + c3 * a_b3;
  const ulong b_off = bo + c0 * b_b0 + c1 * b_b1 + c2 * b_b2 + c3 * b_b3;
  const ulong y_off = bi * (ulong)M * N;
#define A_AT(r, k) S_LD(A, a_off + (r) * a_rs + (k) * a_cs)
#define B_AT(k, c) S_LD(B, b_off + (k) * b_rs + (c) * b_cs)
)",
                      GemmTileLoop(), R"(
#if KSPLIT > 1
  const ulong part = (ulong)kc * (get_num_groups(2) / KSPLIT) * M * N;
#endif
  for (int i = 0; i < TPT; ++i) {
    const uint row = row0 + ty + 16 * i;
    if (row >= M) continue;
    for (int j = 0; j < TPT; ++j) {
      const uint col = col0 + tx + 16 * j;
      if (col >= N) continue;
#if KSPLIT > 1
      P[part + y_off + (ulong)row * N + col] = acc[i][j];
#else
      const float v = finish(acc[i][j], row, col, epilogue, alpha, beta, Cm, co, c_rs, c_cs, p0, p1);
      Y_ST(v, Y, yo + y_off + (ulong)row * N + col);
#endif
    }
  }
}

// The parts' sums of each output added in part order, then the epilogue.
__kernel void gemm_reduce(__global const float* P, __global Y_T* Y, ulong yo, uint M, uint N,
                          ulong total, int epilogue, float alpha, float beta,
                          __global const C_T* Cm, ulong co, ulong c_rs, ulong c_cs, float p0,
                          float p1) {
  const ulong i = get_global_id(0);
  if (i >= total) return;
  float v = P[i];
  for (uint s = 1; s < KSPLIT; ++s) v += P[s * total + i];
  const ulong mn = i % ((ulong)M * N);
  v = finish(v, (uint)(mn / N), (uint)(mn % N), epilogue, alpha, beta, Cm, co, c_rs, c_cs, p0, p1);
  Y_ST(v, Y, yo + i);
}
)");
}

// The launch of one batched GEMM (kernel arguments beyond the operands).
struct GemmLaunch {
  uint32_t m = 0, n = 0, k = 0;
  uint64_t batch = 1;
  cl_ulong a_rs = 0, a_cs = 1, b_rs = 0, b_cs = 1;
  cl_ulong bd[kMaxBatchRank] = {1, 1, 1, 1};  // bd[0] unused (the outermost dim's count)
  cl_ulong a_b[kMaxBatchRank] = {0, 0, 0, 0}, b_b[kMaxBatchRank] = {0, 0, 0, 0};
  // 0: MatMul; 1: alpha * acc; 2: then + beta * C; 3: act(acc + bias); 4: act(acc).
  cl_int epilogue = 0;
  float alpha = 1, beta = 1;
  cl_ulong c_rs = 0, c_cs = 0;
};

class GemmKernel final : public Kernel {
 public:
  GemmKernel(const ir::Node& node, cpu::ref::Activation act) : node_(node), act_(act) {
    if (node.op == ir::OpType::kGemm) {
      trans_a_ = node.GetInt("transA", 0) != 0;
      trans_b_ = node.GetInt("transB", 0) != 0;
      alpha_ = node.GetFloat("alpha", 1.0f);
      beta_ = node.GetFloat("beta", 1.0f);
    }
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* a = ctx.input(0);
    const ir::Tensor* b = ctx.input(1);
    if (a == nullptr || b == nullptr) return Invalid("needs inputs A and B");
    const DataType dt = a->dtype();
    if (b->dtype() != dt) {
      return Invalid(
          absl::StrCat("A is ", DataTypeOnnxName(dt), ", B ", DataTypeOnnxName(b->dtype())));
    }
    GemmLaunch g;
    std::vector<int64_t> out;
    const bool fused = node_.op == ir::OpType::kFusedMatMul;
    const ir::Tensor* c = node_.op != ir::OpType::kMatMul ? ctx.input(2) : nullptr;
    if (node_.op == ir::OpType::kGemm) {
      RETURN_IF_ERROR(PlanGemm(*a, *b, c, g, out));
    } else {
      RETURN_IF_ERROR(PlanMatMul(*a, *b, g, out));
      if (fused) {
        g.epilogue = 4;
        if (c != nullptr) RETURN_IF_ERROR(PlanBias(*a, *b, *c, out, g));
      }
    }
    const DataType yt = cpu::ref::OutputDtype(node_, 0, dt);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, yt, out));
    if (y->num_elements() == 0) return absl::OkStatus();
    const std::string what = absl::StrCat(node_.Label(), " (OpenCL ", DataTypeOnnxName(dt), ")");
    ASSIGN_OR_RETURN(const ClStorage* ys, StorageOf(*y, what));
    const std::shared_ptr<Device>& dev = ys->shared_device();
    const DataType ct = c != nullptr ? c->dtype() : dt;
    const GemmTiling tiling = ChooseGemmTiling(*dev, g.m, g.n, g.k, g.batch, g.a_cs == 1 && g.m > 1,
                                               g.b_rs == 1 && g.n > 1,
                                               /*may_split_k=*/true);
    Functions& fns =
        fns_[{tiling.per_item, tiling.a_k_contiguous, tiling.b_k_contiguous, tiling.k_split}];
    if (fns.gemm == nullptr) {
      const std::string source = GemmSource(dt, ct, yt, act_.kind, tiling);
      fns.gemm = std::make_unique<ClFunction>(what, source, "gemm");
      fns.reduce = std::make_unique<ClFunction>(what, source, "gemm_reduce");
    }
    float p0 = 0, p1 = 0;
    ActivationParams(act_, p0, p1);
    ASSIGN_OR_RETURN(cl_kernel kern, fns.gemm->Get(dev));
    ASSIGN_OR_RETURN(TensorArg aa, ArgOf(*a, what));
    ASSIGN_OR_RETURN(TensorArg ba, ArgOf(*b, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    // Without C the kernel never reads Cm: any buffer stands in.
    TensorArg ca = ya;
    if (c != nullptr) {
      ASSIGN_OR_RETURN(ca, ArgOf(*c, what));
    }
    // The parts' partial sums (fp32) when k is split; unread otherwise.
    const cl_ulong total = static_cast<cl_ulong>(g.batch) * g.m * g.n;
    TensorArg pa{ya.mem, 0};
    if (tiling.k_split > 1) {
      const uint64_t bytes = static_cast<uint64_t>(tiling.k_split) * total * sizeof(float);
      if (partials_ == nullptr || partials_->bytes() < bytes || &partials_->device() != dev.get()) {
        ASSIGN_OR_RETURN(partials_, NewBuffer(dev, bytes));
      }
      pa.mem = partials_->mem();
    }
    const cl_uint kc = static_cast<cl_uint>(SplitChunk(g.k, tiling.k_split));
    RETURN_IF_ERROR(SetArgs(*dev, kern, what, 0, aa, ba, ya, g.m, g.n, g.k, g.a_rs, g.a_cs, g.b_rs,
                            g.b_cs, g.bd[1], g.bd[2], g.bd[3], g.a_b[0], g.a_b[1], g.a_b[2],
                            g.a_b[3], g.b_b[0], g.b_b[1], g.b_b[2], g.b_b[3], g.epilogue, g.alpha,
                            g.beta, ca, g.c_rs, g.c_cs, p0, p1, pa.mem, kc));
    const size_t tile = 16 * tiling.per_item;
    const size_t global[3] = {(g.n + tile - 1) / tile * kGroup, (g.m + tile - 1) / tile * kGroup,
                              static_cast<size_t>(g.batch) * tiling.k_split};
    const size_t local[3] = {kGroup, kGroup, 1};
    RETURN_IF_ERROR(dev->Enqueue(kern, 3, global, local, what));
    if (tiling.k_split == 1) return absl::OkStatus();
    ASSIGN_OR_RETURN(cl_kernel red, fns.reduce->Get(dev));
    RETURN_IF_ERROR(SetArgs(*dev, red, what, 0, pa.mem, ya, g.m, g.n, total, g.epilogue, g.alpha,
                            g.beta, ca, g.c_rs, g.c_cs, p0, p1));
    return Launch1D(*dev, red, total, what);
  }

 private:
  absl::Status Invalid(const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(node_.Label(), " ", why));
  }

  absl::Status CheckSizes(int64_t m, int64_t n, int64_t k, uint64_t batch) const {
    // The kernel's row, column and k indices are 32-bit; the grid's batch dimension a size_t.
    constexpr int64_t kMax = int64_t{1} << 31;
    if (m >= kMax || n >= kMax || k >= kMax) {
      return absl::UnimplementedError(absl::StrCat(node_.Label(), " dims over 2^31 on OpenCL"));
    }
    (void)batch;
    return absl::OkStatus();
  }

  absl::Status PlanMatMul(const ir::Tensor& a, const ir::Tensor& b, GemmLaunch& g,
                          std::vector<int64_t>& out) const {
    ASSIGN_OR_RETURN(const cpu::ref::nn::MatMulShape s,
                     cpu::ref::nn::PlanMatMul(node_, a.dims(), b.dims()));
    if (s.batch.size() > kMaxBatchRank) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Label(), " has more than ", kMaxBatchRank, " batch dims on OpenCL"));
    }
    RETURN_IF_ERROR(CheckSizes(s.m, s.n, s.k, 0));
    g.m = static_cast<uint32_t>(s.m);
    g.n = static_cast<uint32_t>(s.n);
    g.k = static_cast<uint32_t>(s.k);
    g.a_rs = s.k;
    g.b_rs = s.n;
    g.batch = static_cast<uint64_t>(ir::NumElementsOf(s.batch));
    // Batch dims right-aligned into the kernel's four; strides in elements.
    const size_t lead = kMaxBatchRank - s.batch.size();
    for (size_t d = 0; d < s.batch.size(); ++d) {
      g.bd[lead + d] = static_cast<cl_ulong>(s.batch[d]);
      g.a_b[lead + d] = static_cast<cl_ulong>(s.a_bstrides[d] * s.m * s.k);
      g.b_b[lead + d] = static_cast<cl_ulong>(s.b_bstrides[d] * s.k * s.n);
    }
    g.bd[0] = 1;
    out = s.out;
    return absl::OkStatus();
  }

  // FusedMatMul's bias, numpy-broadcast to Y without widening it: strides over Y's rows and
  // columns, none over its batch dims (a bias per batch is left to the CPU).
  absl::Status PlanBias(const ir::Tensor& a, const ir::Tensor& b, const ir::Tensor& bias,
                        const std::vector<int64_t>& out, GemmLaunch& g) const {
    const std::vector<int64_t>& bd = bias.dims();
    if (bd.size() > out.size()) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Label(), " bias ", ir::DimsToString(bd), " widens the result"));
    }
    const std::vector<int64_t> st = cpu::ref::BroadcastStrides(bd, out);
    for (size_t i = 0; i < bd.size(); ++i) {
      const int64_t o = out[out.size() - bd.size() + i];
      if (bd[i] != 1 && bd[i] != o) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Label(), " bias ", ir::DimsToString(bd), " does not broadcast to ",
                         ir::DimsToString(out)));
      }
    }
    // Y's trailing dims: [.., M, N], [.., N] (A a vector) or [.., M] (B a vector).
    const bool a_vec = a.rank() == 1, b_vec = b.rank() == 1;
    const size_t r = out.size();
    const size_t matrix_dims = (a_vec ? 0 : 1) + (b_vec ? 0 : 1);
    for (size_t i = 0; i + matrix_dims < r; ++i) {
      if (st[i] != 0 && out[i] != 1) {
        return absl::UnimplementedError(absl::StrCat(node_.Label(), " a bias per batch on OpenCL"));
      }
    }
    g.c_rs = a_vec ? 0 : static_cast<cl_ulong>(st[r - (b_vec ? 1 : 2)]);
    g.c_cs = b_vec ? 0 : static_cast<cl_ulong>(st[r - 1]);
    g.epilogue = 3;
    return absl::OkStatus();
  }

  absl::Status PlanGemm(const ir::Tensor& a, const ir::Tensor& b, const ir::Tensor* c,
                        GemmLaunch& g, std::vector<int64_t>& out) const {
    if (a.rank() != 2 || b.rank() != 2) return Invalid("A and B must be 2-D");
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0), k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0), n = trans_b_ ? b.dim(0) : b.dim(1);
    if (k != kb) {
      return Invalid(absl::StrCat("inner dimensions differ: ", ir::DimsToString(a.dims()), " x ",
                                  ir::DimsToString(b.dims()), trans_a_ ? " (transA)" : "",
                                  trans_b_ ? " (transB)" : ""));
    }
    RETURN_IF_ERROR(CheckSizes(m, n, k, 1));
    g.m = static_cast<uint32_t>(m);
    g.n = static_cast<uint32_t>(n);
    g.k = static_cast<uint32_t>(k);
    g.a_rs = trans_a_ ? 1 : a.dim(1);
    g.a_cs = trans_a_ ? a.dim(1) : 1;
    g.b_rs = trans_b_ ? 1 : b.dim(1);
    g.b_cs = trans_b_ ? b.dim(1) : 1;
    g.epilogue = 1;
    g.alpha = alpha_;
    g.beta = beta_;
    if (c != nullptr) {
      // C broadcasts unidirectionally to [M, N].
      const std::vector<int64_t>& cd = c->dims();
      const int64_t cm = cd.size() == 2 ? cd[0] : 1, cn = cd.empty() ? 1 : cd.back();
      if (cd.size() > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != n)) {
        return Invalid(
            absl::StrCat("C ", ir::DimsToString(cd), " does not broadcast to [", m, ",", n, "]"));
      }
      g.epilogue = 2;
      g.c_rs = cm == 1 ? 0 : cn;
      g.c_cs = cn == 1 ? 0 : 1;
    }
    out = {m, n};
    return absl::OkStatus();
  }

  const ir::Node& node_;
  cpu::ref::Activation act_;
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1, beta_ = 1;
  struct Functions {
    std::unique_ptr<ClFunction> gemm, reduce;
  };
  std::map<std::tuple<int, bool, bool, int>, Functions> fns_;  // by tiling
  std::shared_ptr<ClStorage> partials_;                        // of a split k range
};

absl::StatusOr<std::unique_ptr<Kernel>> MakeGemm(const ir::Node& node) {
  cpu::ref::Activation act;
  if (node.op == ir::OpType::kFusedMatMul) {
    ASSIGN_OR_RETURN(act, cpu::ref::ReadActivation(node, cpu::ref::MatMulActivations()));
  }
  return std::unique_ptr<Kernel>(new GemmKernel(node, act));
}

// A, B (and C) of one float storage type (C may be another float type); no packed B (a CPU
// layout); MatMul batch dims within kMaxBatchRank where the shapes are known.
bool GemmSupports(const ir::Node& node) {
  if (node.has_attr(kPackedBAttr) || node.num_inputs() < 2) return false;
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  if (a == nullptr || b == nullptr || !ClFloatType(a->dtype) || b->dtype != a->dtype) return false;
  const ir::Value* c = node.input(2);
  if (c != nullptr && !ClFloatType(c->dtype)) return false;
  // FusedMatMul: a bias over Y's rows and columns only, where the ranks are known.
  if (node.op == ir::OpType::kFusedMatMul && c != nullptr && c->shape.rank_known &&
      a->shape.rank_known && b->shape.rank_known) {
    const int out_rank = std::max(a->shape.rank(), b->shape.rank());
    const int matrix = (a->shape.rank() > 1) + (b->shape.rank() > 1);
    for (int i = 0; i + matrix < c->shape.rank(); ++i) {
      const int o = out_rank - c->shape.rank() + i;
      if (o < out_rank - matrix && !(c->shape.dims[i].is_static() && c->shape.dims[i].value == 1)) {
        return false;
      }
    }
  }
  for (const ir::Value* v : {a, b}) {
    if (v->shape.rank_known && v->shape.rank() > kMaxBatchRank + 2) return false;
  }
  return true;
}

}  // namespace

void RegisterMatMul(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (ir::OpType op : {ir::OpType::kMatMul, ir::OpType::kGemm, ir::OpType::kFusedMatMul}) {
    KernelDef def{op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeGemm};
    def.supports = GemmSupports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::opencl
