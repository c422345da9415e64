// Gemm and MatMul on float, float16 and bfloat16 through the AVX-512 GEMM core (gemm.h). Shape
// rules and errors are the reference kernels' (cpu/ref/nn_gemm.cc); the numbers differ from the
// reference only by the accumulation order that gemm.h defines.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/fused_activation.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

using ref::BroadcastShapes;
using ref::BroadcastStrides;
using ref::InvalidNode;
using ref::RequireInput;

GemmType ToGemmType(DataType t) {
  switch (t) {
    case DataType::kF16:
      return GemmType::kF16;
    case DataType::kBF16:
      return GemmType::kBF16;
    default:
      return GemmType::kF32;
  }
}

// Bf16DotPathAllowed of `n` values and, when given, of `n2` more at `v2`, over the threads for
// large tensors (activations scanned on every run): both in one parallel loop.
bool DotPathAllowed(const uint16_t* v, int64_t n, const uint16_t* v2 = nullptr, int64_t n2 = 0) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  const int64_t chunks1 = (n + kChunk - 1) / kChunk;
  const int64_t chunks = chunks1 + (n2 + kChunk - 1) / kChunk;
  if (chunks < 4) return Bf16DotPathAllowed(v, n) && Bf16DotPathAllowed(v2, n2);
  std::atomic<bool> allowed{true};
  ParallelFor(chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1 && allowed.load(std::memory_order_relaxed); ++c) {
      const bool first = c < chunks1;
      const int64_t begin = (first ? c : c - chunks1) * kChunk;
      if (!Bf16DotPathAllowed((first ? v : v2) + begin,
                              std::min(kChunk, (first ? n : n2) - begin))) {
        allowed.store(false, std::memory_order_relaxed);
      }
    }
  });
  return allowed.load();
}

// Bf16DotPathAllowed of A and B, B's kept between runs when B is the node's constant (a
// weight): the scan of a big weight costs as much as reading it, on every run.
class WeightScan {
 public:
  bool Allowed(const ir::Node& node, const ir::Tensor& a, const ir::Tensor& b) {
    const ir::Value* v = node.input(1);
    const bool weight = v && v->constant && v->constant->raw_data() == b.raw_data();
    if (!weight) {
      return DotPathAllowed(a.data<uint16_t>(), a.num_elements(), b.data<uint16_t>(),
                            b.num_elements());
    }
    if (!DotPathAllowed(a.data<uint16_t>(), a.num_elements())) return false;
    if (scanned_ != b.raw_data()) {
      allowed_ = Bf16DotPathAllowed(b.data<uint16_t>(), b.num_elements());
      scanned_ = b.raw_data();
    }
    return allowed_;
  }

 private:
  const void* scanned_ = nullptr;
  bool allowed_ = false;
};

// Sets the bf16 path choice of gemm.h from the whole input tensors.
void ChooseBf16Path(GemmArgs& g, const ir::Node& node, const ir::Tensor& a, const ir::Tensor& b,
                    WeightScan& scan) {
  if (g.type != GemmType::kBF16) return;
  g.bf16_dot = scan.Allowed(node, a, b);
}

// B of a node whose weight the build packed (PackWeights in the builder): B's logical [K, N] from
// kPackedBAttr, checked against B's values (fp32 and fp16 strips hold [K][64] values, bf16 ones
// [K/2][64][2] pairs); empty when B is not packed.
absl::StatusOr<std::vector<int64_t>> PackedB(const ir::Node& node, const ir::Tensor& b) {
  const std::vector<int64_t> packed = node.GetInts(kPackedBAttr);
  if (packed.empty()) return packed;
  const bool bf16 = b.dtype() == DataType::kBF16;
  if (packed.size() != 2 || packed[0] <= 0 || packed[1] <= 0 ||
      (!bf16 && b.dtype() != DataType::kF32 && b.dtype() != DataType::kF16) ||
      b.num_elements() !=
          (packed[1] + 63) / 64 *
              (bf16 ? PackedBStripElems(packed[0]) : PackedBStripElemsF32(packed[0]))) {
    return InvalidNode(node, "packed B of ", b.num_elements(), " values does not match ",
                       kPackedBAttr, " ", ir::DimsToString(packed));
  }
  return packed;
}

// GemmArgs reading the packed B `b` (PackedB) with A `a`.
void UsePackedB(GemmArgs& g, const ir::Tensor& a, const ir::Tensor& b) {
  if (b.dtype() == DataType::kF32) {
    g.b_packed_f32 = b.data<float>();
  } else if (b.dtype() == DataType::kF16) {
    g.b_packed_f16 = b.data<uint16_t>();
  } else {
    // Packed only when free of subnormals, so B never bars the dot path.
    g.b_packed = b.data<uint16_t>();
    g.bf16_dot = DotPathAllowed(a.data<uint16_t>(), a.num_elements());
  }
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
    // A weight the build packed: its logical [K, N] (transB already applied).
    ASSIGN_OR_RETURN(const std::vector<int64_t> packed, PackedB(node_, *b));
    const int64_t kb = !packed.empty() ? packed[0] : trans_b_ ? b->dim(1) : b->dim(0);
    const int64_t n = !packed.empty() ? packed[1] : trans_b_ ? b->dim(0) : b->dim(1);
    if (k != kb) {
      return InvalidNode(node_, "inner dimensions differ: A' is ", m, "x", k, ", B' is ", kb, "x",
                         n);
    }
    GemmArgs g;
    if (c) {
      if (c->rank() > 2) return InvalidNode(node_, "C must have rank <= 2");
      std::vector<int64_t> cd = c->dims();
      while (cd.size() < 2) cd.insert(cd.begin(), 1);
      if ((cd[0] != 1 && cd[0] != m) || (cd[1] != 1 && cd[1] != n)) {
        return InvalidNode(node_, "C of shape ", ir::DimsToString(c->dims()),
                           " cannot be broadcast to [", m, ",", n, "]");
      }
      g.c = c->raw_data();
      g.c_rs = cd[0] == 1 ? 0 : cd[1];
      g.c_cs = cd[1] == 1 ? 0 : 1;
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a->dtype(), {m, n}));
    g.type = ToGemmType(a->dtype());
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a->raw_data();
    g.a_rs = trans_a_ ? 1 : k;
    g.a_cs = trans_a_ ? m : 1;
    g.b = b->raw_data();
    g.b_rs = trans_b_ ? 1 : n;
    g.b_cs = trans_b_ ? k : 1;
    g.y = y->raw_data();
    g.y_rs = n;
    g.scale = true;
    g.alpha = alpha_;
    g.beta = beta_;
    const ir::Value* bv = node_.input(1);
    const bool weight = bv && bv->constant && !bv->is_graph_input && k > 0 && n > 0;
    if (!packed.empty()) {
      UsePackedB(g, *a, *b);
    } else if (weight && a->dtype() == DataType::kF32) {
      // A constant B (a classifier's weight, usually transposed): packed once, at
      // the first run, as the build packs MatMul weights; the same values, read contiguously
      // (nullptr, and B read as it is, when the buffer cannot be had).
      g.b_packed_f32 = packed_.Get(b->data<float>(), k, n, g.b_rs, g.b_cs);
    } else if (weight && a->dtype() == DataType::kF16) {
      g.b_packed_f16 = packed_f16_.Get(b->data<uint16_t>(), k, n, g.b_rs, g.b_cs);
    } else if (weight && a->dtype() == DataType::kBF16) {
      // Either bf16 path reads a packed B (the fp32 one widens each strip).
      g.b_packed = packed_bf16_.Get(b->data<uint16_t>(), k, n, g.b_rs, g.b_cs);
      ChooseBf16Path(g, node_, *a, *b, scan_);
    } else {
      ChooseBf16Path(g, node_, *a, *b, scan_);
    }
    GemmAvx512(g);
    return absl::OkStatus();
  }

 private:
  const ir::Node& node_;
  bool trans_a_ = false, trans_b_ = false;
  float alpha_ = 1.0f, beta_ = 1.0f;
  WeightScan scan_;
  PackedWeightF32 packed_;        // a constant fp32 B
  PackedWeightF16 packed_f16_;    // a constant fp16 B
  PackedWeightBf16 packed_bf16_;  // a constant bf16 B
};

// numpy.matmul: 1-D operands are promoted (and the added dim dropped), batch dims broadcast.
// With `bias` (FusedMatMul's [N] or [1] bias, A's dtype), the GEMM epilogue adds it to the fp32
// dot product before the one rounding to the output type. `fused`: FusedMatMul, whose member 0
// (the MatMul) is kept inside: offered to an interior tap as the fp32 dot products. With
// `bias_sum` (FusedMatMul with GELU): the interior tap of member 1, the bias sum, is asked for
// into it, and when nobody wants it the GEMM applies GELU in its epilogue (GemmArgs::gelu) and
// returns gelu_done.
absl::StatusOr<ir::Tensor*> MatMulCore(const ir::Node& node, KernelContext& ctx,
                                       const ir::Tensor* bias, bool fused, WeightScan& scan,
                                       float** bias_sum = nullptr, bool* gelu_done = nullptr) {
  ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node, ctx, 1));
  if (a->dtype() != b->dtype()) return InvalidNode(node, "A and B must have the same dtype");
  if (a->rank() == 0 || b->rank() == 0) return InvalidNode(node, "operands must not be scalars");
  std::vector<int64_t> ad = a->dims(), bd = b->dims();
  // A weight the build packed (PackWeights in the builder): B's logical [K, N] is recorded.
  ASSIGN_OR_RETURN(const std::vector<int64_t> packed, PackedB(node, *b));
  if (!packed.empty()) bd = packed;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back();
  const int64_t kb = bd[bd.size() - 2], n = bd.back();
  if (k != kb) {
    return InvalidNode(node, "inner dimensions differ: ", ir::DimsToString(a->dims()), " x ",
                       ir::DimsToString(b->dims()));
  }
  std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  ASSIGN_OR_RETURN(std::vector<int64_t> batch, BroadcastShapes(node, a_batch, b_batch));
  std::vector<int64_t> as = BroadcastStrides(a_batch, batch);
  std::vector<int64_t> bs = BroadcastStrides(b_batch, batch);
  std::vector<int64_t> out = batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a->dtype(), out));
  const int64_t nbatch = ir::NumElementsOf(batch);
  // Element offsets of each batch's A and B matrices (broadcast dims have stride 0).
  std::vector<int64_t> a_off(nbatch), b_off(nbatch), idx(batch.size(), 0);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      ao += idx[d] * as[d];
      bo += idx[d] * bs[d];
    }
    a_off[bi] = ao * m * k;
    b_off[bi] = bo * k * n;
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  GemmArgs g;
  g.type = ToGemmType(a->dtype());
  g.batch = nbatch;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a->raw_data();
  g.a_rs = k;
  g.a_offsets = a_off.data();
  g.b = b->raw_data();
  g.b_rs = n;
  g.b_offsets = b_off.data();
  g.y = y->raw_data();
  g.y_rs = n;
  g.y_batch = m * n;
  if (bias != nullptr) {
    if (bias->dtype() != a->dtype() || bias->rank() != 1 ||
        (bias->num_elements() != n && bias->num_elements() != 1)) {
      return InvalidNode(node, "bias must be [", n, "] or [1] of the input dtype, got ",
                         ir::DimsToString(bias->dims()));
    }
    g.scale = true;
    g.c = bias->raw_data();
    g.c_rs = 0;
    g.c_cs = bias->num_elements() == n ? 1 : 0;
  }
  if (fused) g.acc = ctx.interior(0, y->num_elements());
  if (bias_sum != nullptr) {
    *bias_sum = ctx.interior(1, y->num_elements());
    g.gelu = *bias_sum == nullptr;
    *gelu_done = g.gelu;
  }
  if (!packed.empty()) {
    UsePackedB(g, *a, *b);
  } else {
    ChooseBf16Path(g, node, *a, *b, scan);
  }
  GemmAvx512(g);
  return y;
}

class MatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(new MatMulKernel(node));
  }
  absl::Status Run(KernelContext& ctx) override {
    return MatMulCore(node_, ctx, nullptr, /*fused=*/false, scan_).status();
  }

 private:
  explicit MatMulKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
  WeightScan scan_;
};

// FusedMatMul = activation(MatMul(A, B) + bias): the bias is added to the fp32 dot product in
// the GEMM epilogue; the activation then reads that sum rounded once to the output type, as the
// unfused activation would (effective precision = assigned, never lower).
class FusedMatMulKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(ref::Activation act, ref::ReadActivation(node, ref::MatMulActivations()));
    return std::unique_ptr<Kernel>(new FusedMatMulKernel(node, act));
  }

  // The fast path takes A, B, bias and Y of one dtype and a constant [N] or [1] bias.
  static bool Supports(const ir::Node& node) {
    const ir::Value* a = node.input(0);
    const ir::Value* b = node.input(1);
    const ir::Value* bias = node.input(2);
    const ir::Value* y = node.outputs.empty() ? nullptr : node.outputs[0];
    if (!a || !b || !y || b->dtype != a->dtype || y->dtype != a->dtype) return false;
    return !bias || (bias->dtype == a->dtype && bias->shape.rank_known && bias->shape.rank() == 1);
  }

  absl::Status Run(KernelContext& ctx) override {
    // GELU in the GEMM's epilogue (the arithmetic of the pass below on the stored bias sum,
    // while the tile is in cache) unless a tap wants the bias sum, which the GEMM then never
    // stores.
    float* sum = nullptr;
    bool gelu_done = false;
    const bool gelu = act_.kind == ref::ActKind::kGelu;
    ASSIGN_OR_RETURN(ir::Tensor * y,
                     MatMulCore(node_, ctx, ctx.input(2), /*fused=*/true, scan_,
                                gelu ? &sum : nullptr, gelu ? &gelu_done : nullptr));
    if (act_.kind == ref::ActKind::kNone || gelu_done) return absl::OkStatus();
    return ref::DispatchFloat(y->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T* p = y->data<T>();
      const int64_t n = y->num_elements();
      // `m` stored values from `src` as fp32 into `dst`, and back (the vectorised conversions,
      // bit for bit those of ref::Load and ref::Store).
      auto widen = [](const T* src, float* dst, int64_t m) {
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(dst, src, m * sizeof(float));
        } else if constexpr (std::is_same_v<T, Float16>) {
          HalfToFloat(reinterpret_cast<const uint16_t*>(src), dst, m);
        } else if constexpr (std::is_same_v<T, BFloat16>) {
          Bf16ToFloat(reinterpret_cast<const uint16_t*>(src), dst, m);
        } else {
          for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<float>(ref::Load(src[i]));
        }
      };
      auto narrow = [](const float* src, T* dst, int64_t m) {
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(dst, src, m * sizeof(float));
        } else if constexpr (std::is_same_v<T, Float16>) {
          FloatToHalf(src, reinterpret_cast<uint16_t*>(dst), m);
        } else if constexpr (std::is_same_v<T, BFloat16>) {
          FloatToBf16(src, reinterpret_cast<uint16_t*>(dst), m);
        } else {
          for (int64_t i = 0; i < m; ++i) dst[i] = ref::Store<T>(src[i]);
        }
      };
      // Member 1, the bias Add, is the activation's input: offered as stored.
      if (!gelu) sum = ctx.interior(1, n);
      if (sum != nullptr) widen(p, sum, n);
      if (act_.kind == ref::ActKind::kGelu) {
        // ew::GeluOp's arithmetic in fp32, erf 16 at a time (GeluF32, math.h): within the
        // vector erf's bound of the scalar one.
        constexpr int64_t kChunk = 1024;
        const int64_t chunks = (n + kChunk - 1) / kChunk;
        ParallelFor(chunks, [&](int64_t c_begin, int64_t c_end) {
          for (int64_t c = c_begin; c < c_end; ++c) {
            const int64_t begin = c * kChunk, m = std::min(kChunk, n - begin);
            alignas(64) float x[kChunk];
            widen(p + begin, x, m);
            GeluF32(x, x, m);
            narrow(x, p + begin, m);
          }
        });
        return absl::OkStatus();
      }
      ref::WithActivation<float>(act_, [&](auto op) {
        ParallelFor(n, [&](int64_t i_begin, int64_t i_end) {
          for (int64_t i = i_begin; i < i_end; ++i) {
            p[i] = ref::Store<T>(op(static_cast<float>(ref::Load(p[i]))));
          }
        });
      });
      return absl::OkStatus();
    });
  }

 private:
  FusedMatMulKernel(const ir::Node& node, ref::Activation act) : node_(node), act_(act) {}
  const ir::Node& node_;
  ref::Activation act_;
  WeightScan scan_;
};

}  // namespace

void RegisterGemmOps(Registry& r) {
  for (ir::OpType op : {ir::OpType::kGemm, ir::OpType::kMatMul}) {
    KernelFactory f = op == ir::OpType::kGemm ? &GemmKernel::Create : &MatMulKernel::Create;
    r.Add(KernelDef{op, {DataType::kF32, DataType::kF16}, 0, Backend::kCpu, Isa::kAvx512, f});
    KernelDef bf16{op, {DataType::kBF16}, 0, Backend::kCpu, Isa::kAvx512, f};
    bf16.cpu_features = kCpuAvx512Bf16;  // vdpbf16ps, vcvtneps2bf16
    r.Add(bf16);
  }
  KernelDef fused{
      ir::OpType::kFusedMatMul,  {DataType::kF32, DataType::kF16}, 0, Backend::kCpu, Isa::kAvx512,
      &FusedMatMulKernel::Create};
  fused.supports = &FusedMatMulKernel::Supports;
  r.Add(fused);
  fused.dtypes = {DataType::kBF16};
  fused.cpu_features = kCpuAvx512Bf16;
  r.Add(fused);
}

int64_t PackedBElemsF32(int64_t k, int64_t n) { return (n + 63) / 64 * PackedBStripElemsF32(k); }

template <GemmType kType>
void PackedWeight<kType>::Free::operator()(T* p) const {
  std::free(p);
}

template <GemmType kType>
int64_t PackedWeight<kType>::Elems(int64_t k, int64_t n) {
  if constexpr (kType == GemmType::kBF16) return (n + 63) / 64 * PackedBStripElems(k);
  return PackedBElemsF32(k, n);
}

template <GemmType kType>
auto PackedWeight<kType>::Get(const T* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs,
                              int64_t count, int64_t offset) -> const T* {
  const std::array<int64_t, 6> key = {k, n, b_rs, b_cs, count, offset};
  if (packed_ != nullptr && source_ == b && key_ == key) return packed_.get();
  const int64_t elems = Elems(k, n);
  const size_t bytes = static_cast<size_t>(count * elems) * sizeof(T);
  packed_.reset(static_cast<T*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (packed_ == nullptr) return nullptr;
  for (int64_t c = 0; c < count; ++c) {
    T* out = packed_.get() + c * elems;
    if constexpr (kType == GemmType::kF32) {
      PackBF32Strided(b + c * offset, k, n, b_rs, b_cs, out);
    } else if constexpr (kType == GemmType::kF16) {
      PackBHalfStrided(b + c * offset, k, n, b_rs, b_cs, out);
    } else {
      PackBBf16Strided(b + c * offset, k, n, b_rs, b_cs, out);
    }
  }
  source_ = b;
  key_ = key;
  return packed_.get();
}

template class PackedWeight<GemmType::kF32>;
template class PackedWeight<GemmType::kF16>;
template class PackedWeight<GemmType::kBF16>;

}  // namespace kiln::kernels::cpu::avx512
