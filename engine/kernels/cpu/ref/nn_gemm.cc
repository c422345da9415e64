// The shared GEMM loop, and the Gemm and MatMul ops on top of it.
#include <algorithm>
#include <cstring>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::ref::nn {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

template <typename A>
void GemmAccumulate(int64_t m, int64_t n, int64_t k, MatView<A> a, MatView<A> b, A* c,
                    int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const bool parallel = m * n * k >= kParallelWork;
  if (b.cs == 1 && n > 1) {
    // i-k-j over cache tiles: a C tile (kMc x kNc) stays in L1/L2 while a panel of B rows
    // (kKc x kNc) streams past it; the inner j loop is contiguous and vectorises. Tiles are
    // independent (each owns its C block), so they run in parallel.
    constexpr int64_t kMc = 32, kNc = 512, kKc = 256;
    const int64_t mb = (m + kMc - 1) / kMc, nb = (n + kNc - 1) / kNc;
    ParallelFor(mb * nb, parallel, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i0 = (t / nb) * kMc, i1 = std::min(m, i0 + kMc);
        const int64_t j0 = (t % nb) * kNc, jn = std::min(n, j0 + kNc) - j0;
        for (int64_t k0 = 0; k0 < k; k0 += kKc) {
          const int64_t k1 = std::min(k, k0 + kKc);
          for (int64_t i = i0; i < i1; ++i) {
            A* __restrict crow = c + i * ldc + j0;
            const A* arow = a.p + i * a.rs;
            int64_t kk = k0;
            // Four B rows per pass halve the loads and stores of the C row.
            for (; kk + 4 <= k1; kk += 4) {
              const A a0 = arow[kk * a.cs], a1 = arow[(kk + 1) * a.cs];
              const A a2 = arow[(kk + 2) * a.cs], a3 = arow[(kk + 3) * a.cs];
              const A* __restrict b0 = b.p + kk * b.rs + j0;
              const A* __restrict b1 = b0 + b.rs;
              const A* __restrict b2 = b1 + b.rs;
              const A* __restrict b3 = b2 + b.rs;
              for (int64_t j = 0; j < jn; ++j) {
                crow[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
              }
            }
            for (; kk < k1; ++kk) {
              const A av = arow[kk * a.cs];
              const A* __restrict brow = b.p + kk * b.rs + j0;
              for (int64_t j = 0; j < jn; ++j) crow[j] += av * brow[j];
            }
          }
        }
      }
    });
  } else {
    // B is transposed in memory (or a single column): dot products along k.
    constexpr int64_t kNb = 64;
    const int64_t nb = (n + kNb - 1) / kNb;
    ParallelFor(m * nb, parallel, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i = t / nb, jb = t % nb;
        const A* arow = a.p + i * a.rs;
        const int64_t j1 = std::min(n, (jb + 1) * kNb);
        for (int64_t j = jb * kNb; j < j1; ++j) {
          const A* bcol = b.p + j * b.cs;
          A sum = 0;
          for (int64_t kk = 0; kk < k; ++kk) sum += arow[kk * a.cs] * bcol[kk * b.rs];
          c[i * ldc + j] += sum;
        }
      }
    });
  }
}

template void GemmAccumulate<float>(int64_t, int64_t, int64_t, MatView<float>, MatView<float>,
                                    float*, int64_t);
template void GemmAccumulate<double>(int64_t, int64_t, int64_t, MatView<double>, MatView<double>,
                                     double*, int64_t);
template void GemmAccumulate<uint32_t>(int64_t, int64_t, int64_t, MatView<uint32_t>,
                                       MatView<uint32_t>, uint32_t*, int64_t);
template void GemmAccumulate<uint64_t>(int64_t, int64_t, int64_t, MatView<uint64_t>,
                                       MatView<uint64_t>, uint64_t*, int64_t);

absl::StatusOr<MatMulShape> PlanMatMul(const ir::Node& node, const std::vector<int64_t>& a,
                                       const std::vector<int64_t>& b) {
  if (a.empty() || b.empty()) return InvalidNode(node, "operands must not be scalars");
  if (node.has_attr(kPackedBAttr)) {
    return InvalidNode(node,
                       "B is stored packed for the AVX-512 GEMM, which this kernel cannot read "
                       "(the engine needs the CPU features it records)");
  }
  std::vector<int64_t> ad = a, bd = b;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  MatMulShape s;
  s.m = ad[ad.size() - 2];
  s.k = ad.back();
  s.n = bd.back();
  if (s.k != bd[bd.size() - 2]) {
    return InvalidNode(node, "inner dimensions differ: ", ir::DimsToString(a), " x ",
                       ir::DimsToString(b));
  }
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  ASSIGN_OR_RETURN(s.batch, BroadcastShapes(node, a_batch, b_batch));
  s.a_bstrides = BroadcastStrides(a_batch, s.batch);
  s.b_bstrides = BroadcastStrides(b_batch, s.batch);
  s.out = s.batch;
  if (!a_vec) s.out.push_back(s.m);
  if (!b_vec) s.out.push_back(s.n);
  return s;
}

namespace {

// Storage types whose accumulator GemmAccumulate is instantiated for.
template <typename T>
constexpr bool kGemmType = std::is_same_v<Acc<T>, float> || std::is_same_v<Acc<T>, double> ||
                           std::is_same_v<Acc<T>, uint32_t> || std::is_same_v<Acc<T>, uint64_t>;

std::vector<DataType> GemmTypes() {
  return {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64,
          DataType::kI32, DataType::kI64, DataType::kU32,  DataType::kU64};
}

// Y = alpha * A' * B' + beta * C.
class GemmKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<GemmKernel>(node);
    k->trans_a_ = node.GetInt("transA", 0) != 0;
    k->trans_b_ = node.GetInt("transB", 0) != 0;
    k->alpha_ = node.GetFloat("alpha", 1.0f);
    k->beta_ = node.GetFloat("beta", 1.0f);
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit GemmKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    if (node_.has_attr(kPackedBAttr)) {
      return InvalidNode(node_,
                         "B is stored packed for the AVX-512 GEMM, which this kernel cannot read "
                         "(the engine needs the CPU features it records)");
    }
    ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node_, ctx, 1));
    const ir::Tensor* c = ctx.input(2);
    if (c == nullptr && node_.since_version < 11) {
      return InvalidNode(node_, "input C is required before opset 11");
    }
    if (a->rank() != 2 || b->rank() != 2) {
      return InvalidNode(node_, "A and B must be 2-D, got ", ir::DimsToString(a->dims()), " and ",
                         ir::DimsToString(b->dims()));
    }
    if (a->dtype() != b->dtype() || (c && c->dtype() != a->dtype())) {
      return InvalidNode(node_, "A, B and C must have the same dtype");
    }
    const int64_t m = trans_a_ ? a->dim(1) : a->dim(0);
    const int64_t k = trans_a_ ? a->dim(0) : a->dim(1);
    const int64_t kb = trans_b_ ? b->dim(1) : b->dim(0);
    const int64_t n = trans_b_ ? b->dim(0) : b->dim(1);
    if (k != kb) {
      return InvalidNode(node_, "inner dimensions differ: A' is ", m, "x", k, ", B' is ", kb, "x",
                         n);
    }
    // C broadcasts unidirectionally to (M, N).
    int64_t c_rs = 0, c_cs = 0;
    if (c) {
      if (c->rank() > 2) return InvalidNode(node_, "C must have rank <= 2");
      std::vector<int64_t> cd = c->dims();
      while (cd.size() < 2) cd.insert(cd.begin(), 1);
      if ((cd[0] != 1 && cd[0] != m) || (cd[1] != 1 && cd[1] != n)) {
        return InvalidNode(node_, "C of shape ", ir::DimsToString(c->dims()),
                           " cannot be broadcast to [", m, ",", n, "]");
      }
      c_rs = cd[0] == 1 ? 0 : cd[1];
      c_cs = cd[1] == 1 ? 0 : 1;
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a->dtype(), {m, n}));
    return DispatchAll(a->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (kGemmType<T>) {
        Evaluate(*a, *b, c, c_rs, c_cs, m, n, k, y->data<T>());
        return absl::OkStatus();
      } else {
        return InvalidNode(node_, "unsupported dtype ", DataTypeOnnxName(a->dtype()));
      }
    });
  }

 private:
  template <typename T>
  void Evaluate(const ir::Tensor& a, const ir::Tensor& b, const ir::Tensor* c, int64_t c_rs,
                int64_t c_cs, int64_t m, int64_t n, int64_t k, T* y) const {
    using A = Acc<T>;
    std::vector<A> abuf, bbuf, cbuf, acc(m * n, A(0));
    const A* ap = AccData(a.data<T>(), a.num_elements(), abuf);
    const A* bp = AccData(b.data<T>(), b.num_elements(), bbuf);
    MatView<A> av = trans_a_ ? MatView<A>{ap, 1, m} : MatView<A>{ap, k, 1};
    MatView<A> bv = trans_b_ ? MatView<A>{bp, 1, k} : MatView<A>{bp, n, 1};
    GemmAccumulate(m, n, k, av, bv, acc.data(), n);
    const A* cp = c ? AccData(c->data<T>(), c->num_elements(), cbuf) : nullptr;
    // Integer Gemm scales by the truncated alpha/beta (exact for the usual 1 and 0).
    const A alpha = static_cast<A>(static_cast<Compute<T>>(alpha_));
    const A beta = static_cast<A>(static_cast<Compute<T>>(beta_));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        A v = alpha * acc[i * n + j];
        if (cp) v += beta * cp[i * c_rs + j * c_cs];
        y[i * n + j] = Store<T>(v);
      }
    }
  }

  const ir::Node& node_;
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1.0f, beta_ = 1.0f;
};

template <typename T>
void MatMulCompute(const ir::Tensor& a, const ir::Tensor& b, const MatMulShape& s, T* y) {
  using A = Acc<T>;
  std::vector<A> abuf, bbuf;
  const A* ap = AccData(a.data<T>(), a.num_elements(), abuf);
  const A* bp = AccData(b.data<T>(), b.num_elements(), bbuf);
  const int64_t m = s.m, n = s.n, k = s.k;
  constexpr bool kDirect = std::is_same_v<T, A> || std::is_integral_v<T>;
  std::vector<A> acc(kDirect ? 0 : m * n);
  ForEachMatMulBatch(s, [&](int64_t bi, int64_t aoff, int64_t boff) {
    A* out = kDirect ? reinterpret_cast<A*>(y + bi * m * n) : acc.data();
    std::fill(out, out + m * n, A(0));
    GemmAccumulate(m, n, k, MatView<A>{ap + aoff * m * k, k, 1},
                   MatView<A>{bp + boff * k * n, n, 1}, out, n);
    if constexpr (!kDirect) {
      for (int64_t i = 0; i < m * n; ++i) y[bi * m * n + i] = Store<T>(acc[i]);
    }
  });
}

absl::Status MatMulRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node, ctx, 1));
  if (a->dtype() != b->dtype()) return InvalidNode(node, "A and B must have the same dtype");
  ASSIGN_OR_RETURN(const MatMulShape s, PlanMatMul(node, a->dims(), b->dims()));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a->dtype(), s.out));
  return DispatchAll(a->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if constexpr (kGemmType<T>) {
      MatMulCompute<T>(*a, *b, s, y->data<T>());
      return absl::OkStatus();
    } else {
      return InvalidNode(node, "unsupported dtype ", DataTypeOnnxName(a->dtype()));
    }
  });
}

}  // namespace

void RegisterGemmOps(Registry& r) {
  r.AddRef(ir::OpType::kGemm, GemmTypes(), &GemmKernel::Create);
  r.AddRef(ir::OpType::kMatMul, GemmTypes(), &FunctionKernel<MatMulRun>::Create);
}

}  // namespace kiln::kernels::cpu::ref::nn
