// FusedConvChain: the channels-last fp32, fp16 or bf16 convolution chain of an inverted-residual
// block (conv_chain.h; made by passes/conv_chain.h from FusedConv / Conv nodes running NHWC).
//
// Inputs: 0 X [N, H, W, C0] (NHWC), 1 W0 [C1, C0, 1, 1] and 2 B0 [C1] of the 1x1 expansion (both
// absent when the chain starts at the depthwise convolution), 3 W1 [C1, 1, kh, kw] and 4 B1 [C1]
// of the depthwise convolution, 5 W2 [C2, C1, 1, 1] and 6 B2 [C2] of the 1x1 projection (both
// absent when the chain ends at the depthwise convolution: then C2 = C1), 7 the optional residual
// Z [N, OH, OW, C2] (only after a projection); every bias optional. Output Y [N, OH, OW, C2].
// Attributes: `strides` and `pads` (ONNX order: top, left, bottom, right) of the depthwise
// convolution, and the activation of each convolution as FusedConv has it, prefixed `expand_`,
// `depthwise_` and `project_` (none, Relu, LeakyRelu, Clip or HardSwish); `pool` 1 when the
// chain's output is then max-pooled 2 x 2 with stride 2 (a MaxPool it took in, conv_chain.h):
// Y is [N, OH / 2, OW / 2, C2].
//
// The same kernel runs a channels-last depthwise Conv or FusedConv alone (inputs X, W, B; its
// `activation`), preferred to oneDNN's convolution for those nodes.
//
// X, the weights, the biases, Z and Y are all fp32, all fp16 or all bf16 (a 16-bit chain computes
// in fp32; a bf16 chain rounds each step's output to bf16, as its member convolutions do, an fp16
// chain only Y, its interior staying fp32 as a fused kernel's may: DESIGN.md §5, conv_chain.h).
// The weights are packed (16-bit ones widened to fp32, exactly) at the first run of each weight
// buffer (as the oneDNN convolution reorders its W). The rows in flight live in one scratch
// buffer of the calling thread that all the chains share (ref::ThreadScratch), grown at need: the
// next chain finds it in the cache (MobileNetV2 fp32 1-2% faster on one thread, ~4% on two, than
// with a buffer per chain).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/conv_chain.h"
#include "engine/kernels/cpu/avx512/conv_chain_nodes.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/fused_activation.h"

namespace kiln::kernels::cpu::avx512 {

namespace {

// Channels rounded up to whole 16-float vectors: the stride of the packed weights and biases.
int64_t ChainPadded(int64_t c) { return (c + 15) / 16 * 16; }

// Floats of packed 1x1 weights for `k` inputs and `n` outputs.
int64_t ChainPackedElems(int64_t k, int64_t n) { return ChainPadded(n) * k; }

// 1x1 W [n, k] (ONNX [M, C, 1, 1]) in panels of 16 outputs, [n/16][k][16], zero padded.
void ChainPack1x1(const float* w, int64_t k, int64_t n, float* out) {
  std::memset(out, 0, ChainPackedElems(k, n) * sizeof(float));
  for (int64_t j = 0; j < n; ++j) {
    float* panel = out + (j / 16) * k * 16 + j % 16;
    for (int64_t i = 0; i < k; ++i) panel[i * 16] = w[j * k + i];
  }
}

// bf16 elements of 1x1 weights for `k` inputs and `n` outputs packed in pairs.
int64_t ChainDotElems(int64_t k, int64_t n) { return ChainPadded(n) * ((k + 1) / 2) * 2; }

// 1x1 W [n, k] of bf16 values (widened) as bf16 pairs [n/16][ceil(k/2)][16][2], zero padded:
// the operand of vdpbf16ps (conv_chain.h, w0_dot / w2_dot).
void ChainPack1x1Dot(const float* w, int64_t k, int64_t n, uint16_t* out) {
  const int64_t pairs = (k + 1) / 2;
  std::memset(out, 0, ChainDotElems(k, n) * sizeof(uint16_t));
  for (int64_t j = 0; j < n; ++j) {
    uint16_t* panel = out + (j / 16) * pairs * 32 + (j % 16) * 2;
    for (int64_t i = 0; i < k; ++i) panel[(i / 2) * 32 + i % 2] = FloatToBFloat16Bits(w[j * k + i]);
  }
}

// Whether a bf16 chain's 1x1 steps run on vdpbf16ps (else fp32 FMAs on the widened values, the
// same sums in ascending order). Measured in MobileNetV2 bf16 on one thread: on the Zen machine
// without AMX the chains with vdpbf16ps took 1.9 ms against the separate oneDNN convolutions'
// 2.2; on the AMX Xeon 9.2 ms, 2.3x the fp32 chains (its vdpbf16ps was issued from A broadcast
// through general registers, since fixed, but not measured again there), where oneDNN's bf16
// convolutions run on AMX. So vdpbf16ps only without AMX; KILN_CHAIN_BF16_DOT=0 or 1 chooses
// (a measuring knob, as KILN_NO_AMX), read once.
bool ChainBf16Dot() {
  static const bool dot = [] {
    const char* v = std::getenv("KILN_CHAIN_BF16_DOT");
    if (v != nullptr && *v != '\0') return std::string(v) != "0";
    return (DetectCpuFeatures() & kCpuAmxTile) == 0;
  }();
  return dot;
}

// Whether bf16 blocks (and bf16 depthwise convolutions alone) take this kernel at all: where its
// 1x1 steps run on vdpbf16ps, or when KILN_CHAIN_BF16_DOT names a path. On the AMX Xeon,
// oneDNN's bf16 convolutions run on AMX tiles and MobileNetV2 bf16-layernorm took 3.8 ms at one
// thread and 2.9-3.1 at four with them, against 6.0-10.7 and 3.7-4.1 with chains on fp32 FMAs
// (1.75-1.85 against 2.0-2.1 at sixteen): there bf16 stays with oneDNN.
bool ChainTakesBf16() {
  static const bool take = [] {
    const char* v = std::getenv("KILN_CHAIN_BF16_DOT");
    return (v != nullptr && *v != '\0') || ChainBf16Dot();
  }();
  return take;
}

// Depthwise W [c, 1, kh, kw] as [kh * kw][ChainPadded(c)], zero padded.
void ChainPackDepthwise(const float* w, int64_t c, int64_t taps, float* out) {
  const int64_t cp = ChainPadded(c);
  std::memset(out, 0, taps * cp * sizeof(float));
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t t = 0; t < taps; ++t) out[t * cp + ch] = w[ch * taps + t];
  }
}

// Where a node keeps the kernel's operands: input indices (-1: the node has none) of X, each
// step's W and B and the residual Z, and each step's activation attribute prefix and W's name.
struct Operands {
  int x, w[3], b[3], z;
  const char* prefix[3];
  const char* w_name[3];
};

// FusedConvChain: X, W0, B0, W1, B1, W2, B2, Z.
constexpr Operands kChainOperands = {
    0, {1, 3, 5}, {2, 4, 6}, 7, {"expand_", "depthwise_", "project_"}, {"W0", "W1", "W2"}};
// A depthwise Conv or FusedConv alone: X, W, B (the depthwise step only).
constexpr Operands kDepthwiseOperands = {0,  {-1, 1, -1},  {-1, 2, -1},
                                         -1, {"", "", ""}, {"", "W", ""}};

const std::vector<std::pair<std::string, ref::ActKind>>& ChainActivations() {
  static const auto* v = new std::vector<std::pair<std::string, ref::ActKind>>{
      {"", ref::ActKind::kNone},
      {"Relu", ref::ActKind::kRelu},
      {"LeakyRelu", ref::ActKind::kLeakyRelu},
      {"Clip", ref::ActKind::kClip},
      {"HardSwish", ref::ActKind::kHardSwish}};
  return *v;
}

ChainActivation ToChain(const ref::Activation& a) {
  ChainActivation c;
  switch (a.kind) {
    case ref::ActKind::kRelu:
      c.kind = ChainActivation::kRelu;
      break;
    case ref::ActKind::kLeakyRelu:
      c.kind = ChainActivation::kLeakyRelu;
      break;
    case ref::ActKind::kClip:
      c.kind = ChainActivation::kClip;
      break;
    case ref::ActKind::kHardSwish:
      c.kind = ChainActivation::kHardSwish;
      break;
    default:
      c.kind = ChainActivation::kNone;
  }
  c.alpha = a.alpha;
  c.lo = a.lo;
  c.hi = a.hi;
  return c;
}

struct FreeAligned {
  void operator()(void* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float, FreeAligned>;

AlignedFloats AllocateAligned(int64_t floats) {
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(floats, 16)) * 4 + 63) / 64 * 64;
  return AlignedFloats(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

bool AllEqual(const std::vector<int64_t>& v, int64_t x) {
  return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
}

// The types a chain runs in.
bool ChainType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

// A constant of type `t` (not an overridable graph input).
bool ConstantOf(const ir::Value* v, DataType t) {
  return v && v->constant && !v->is_graph_input && v->dtype == t;
}

// The values of an fp32, fp16 or bf16 tensor as fp32 (widened exactly).
std::vector<float> Widened(const ir::Tensor& t) {
  std::vector<float> out(t.num_elements());
  if (t.dtype() == DataType::kF32) {
    std::memcpy(out.data(), t.raw_data(), out.size() * sizeof(float));
  } else {
    ConvertArray(t.dtype(), DataType::kF32, t.raw_data(), out.data(), t.num_elements());
  }
  return out;
}

// The weights and biases the kernel reads, with their shapes checked against each other.
struct ChainWeights {
  const ir::Tensor* w[3] = {nullptr, nullptr, nullptr};  // W0 (or nullptr), W1, W2
  const ir::Tensor* b[3] = {nullptr, nullptr, nullptr};
  int64_t c0 = 0, c1 = 0, c2 = 0, kh = 0, kw = 0;
};

class ConvChainKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> CreateChain(const ir::Node& node) {
    return Create(node, kChainOperands);
  }
  static absl::StatusOr<std::unique_ptr<Kernel>> CreateDepthwise(const ir::Node& node) {
    return Create(node, kDepthwiseOperands);
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node, const Operands& io) {
    auto k = std::unique_ptr<ConvChainKernel>(new ConvChainKernel(node, io));
    for (int s = 0; s < 3; ++s) {
      if (s != 1 && io.w[s] < 0) continue;  // a step the node cannot have: no activation
      ASSIGN_OR_RETURN(const ref::Activation a,
                       ref::ReadActivation(node, ChainActivations(), io.prefix[s]));
      k->act_[s] = ToChain(a);
    }
    const std::vector<int64_t> strides = node.GetInts("strides", {1, 1});
    const std::vector<int64_t> pads = node.GetInts("pads", {0, 0, 0, 0});
    if (strides.size() != 2 || strides[0] < 1 || strides[1] < 1) {
      return ref::InvalidNode(node, "strides must be two values >= 1");
    }
    if (pads.size() != 4 || *std::min_element(pads.begin(), pads.end()) < 0) {
      return ref::InvalidNode(node, "pads must be four values >= 0");
    }
    k->strides_ = {strides[0], strides[1]};
    k->pads_ = {pads[0], pads[1], pads[2], pads[3]};
    k->pool_ = node.GetInt("pool", 0) != 0;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  // FusedConvChain: X, Y and Z of one type, fp32, fp16 or bf16, the weights constants of that type
  // (not overridable graph inputs), a residual only after a projection.
  static bool SupportsChain(const ir::Node& node) {
    if (!OneTypeInOut(node)) return false;
    const DataType t = node.input(0)->dtype;
    if (t == DataType::kBF16 && !ChainTakesBf16()) return false;
    for (int s = 0; s < 3; ++s) {
      if (!ConstantOrAbsent(node.input(kChainOperands.w[s]), t) ||
          !ConstantOrAbsent(node.input(kChainOperands.b[s]), t)) {
        return false;
      }
    }
    const ir::Value* z = node.input(kChainOperands.z);
    const bool project = node.input(kChainOperands.w[2]) != nullptr;
    return node.input(kChainOperands.w[1]) &&
           (project || (!node.input(kChainOperands.b[2]) && !z)) && (!z || z->dtype == t);
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, io_.x));
    const DataType t = x->dtype();
    if (x->rank() != 4 || !ChainType(t)) {
      return ref::InvalidNode(node_,
                              "X must be a rank-4 float, float16 or bfloat16 NHWC tensor, got ",
                              DataTypeName(t), " ", ir::DimsToString(x->dims()));
    }
    ASSIGN_OR_RETURN(const ChainWeights cw, Weights(ctx, t));
    const auto& d = x->dims();
    if (d[3] != cw.c0) {
      return ref::InvalidNode(node_, "X has ", d[3], " channels, the first convolution's W ",
                              cw.c0);
    }
    const int64_t hp = d[1] + pads_[0] + pads_[2], wp = d[2] + pads_[1] + pads_[3];
    if (hp < cw.kh || wp < cw.kw) {
      return ref::InvalidNode(node_, "the padded input ", hp, "x", wp,
                              " is smaller than the depthwise window ", cw.kh, "x", cw.kw);
    }
    const int64_t oh = (hp - cw.kh) / strides_[0] + 1, ow = (wp - cw.kw) / strides_[1] + 1;
    const std::vector<int64_t> z_dims = {d[0], oh, ow, cw.c2};
    const std::vector<int64_t> y_dims =
        pool_ ? std::vector<int64_t>{d[0], oh / 2, ow / 2, cw.c2} : z_dims;
    const ir::Tensor* z = io_.z < 0 ? nullptr : ctx.input(io_.z);
    if (z != nullptr && cw.w[2] == nullptr) {
      return ref::InvalidNode(node_, "a residual Z needs the projection W2");
    }
    if (z != nullptr && (z->dims() != z_dims || z->dtype() != t)) {
      return ref::InvalidNode(node_, "Z of ", DataTypeName(z->dtype()), " ",
                              ir::DimsToString(z->dims()), " does not match Y",
                              pool_ ? " before its pool (" : " (", DataTypeName(t), " ",
                              ir::DimsToString(z_dims), ")");
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, y_dims));
    if (y->num_elements() == 0 || x->num_elements() == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Pack(cw));

    ConvChainArgs a;
    a.n = d[0];
    a.h = d[1];
    a.w = d[2];
    a.c0 = cw.c0;
    a.half = t != DataType::kF32;
    a.bf16 = t == DataType::kBF16;
    a.x = x->raw_data();
    a.w0 = packed_[0].get();  // nullptr without the step, as its bias
    a.b0 = bias_[0].get();
    a.c1 = cw.c1;
    a.w1 = packed_[1].get();
    a.b1 = bias_[1].get();
    a.kh = cw.kh;
    a.kw = cw.kw;
    a.sh = strides_[0];
    a.sw = strides_[1];
    a.pad_top = pads_[0];
    a.pad_left = pads_[1];
    a.oh = oh;
    a.ow = ow;
    a.w2 = packed_[2].get();
    a.w0_dot = dot_[0].get();  // bf16 chains only
    a.w2_dot = dot_[2].get();
    a.b2 = bias_[2].get();
    a.c2 = cw.c2;
    a.act0 = act_[0];
    a.act1 = act_[1];
    a.act2 = act_[2];
    a.z = z ? z->raw_data() : nullptr;
    a.y = y->raw_data();
    a.pool = pool_;
    a.threads = omp_get_max_threads();
    a.threads = static_cast<int>(ConvChainThreads(a));
    const int64_t need = ConvChainScratchFloats(a);
    a.scratch = ref::ThreadScratch(ref::kScratchChainRows, need);
    if (a.scratch == nullptr)
      return absl::ResourceExhaustedError("out of memory for the chain's rows");
    ConvChainAvx512(a);
    return absl::OkStatus();
  }

 private:
  ConvChainKernel(const ir::Node& node, const Operands& io) : node_(node), io_(io) {}

  // X of a chain type and one output (Y takes X's type).
  static bool OneTypeInOut(const ir::Node& node) {
    const ir::Value* x = node.input(0);
    return x && ChainType(x->dtype) && node.num_outputs() == 1 && node.outputs[0];
  }

  static bool ConstantOrAbsent(const ir::Value* v, DataType t) { return !v || ConstantOf(v, t); }

  // W0 [C1, C0, 1, 1] (optional), W1 [C1, 1, kh, kw], W2 [C2, C1, 1, 1] (optional), biases [C1],
  // [C1], [C2]; all of X's type `t`.
  absl::StatusOr<ChainWeights> Weights(KernelContext& ctx, DataType t) const {
    ChainWeights cw;
    const char* const* names = io_.w_name;
    for (int s = 0; s < 3; ++s) {
      cw.w[s] = io_.w[s] < 0 ? nullptr : ctx.input(io_.w[s]);
      cw.b[s] = io_.b[s] < 0 ? nullptr : ctx.input(io_.b[s]);
      if (cw.w[s] == nullptr) {
        if (s != 1 && cw.b[s] == nullptr) continue;
        return ref::InvalidNode(node_, "input ", names[s], " is missing");
      }
      if (cw.w[s]->rank() != 4 || cw.w[s]->dtype() != t) {
        return ref::InvalidNode(node_, names[s], " must be a rank-4 ", DataTypeName(t),
                                " tensor as X, got ", DataTypeName(cw.w[s]->dtype()), " ",
                                ir::DimsToString(cw.w[s]->dims()));
      }
    }
    const auto& w1 = cw.w[1]->dims();
    cw.c1 = w1[0];
    cw.kh = w1[2];
    cw.kw = w1[3];
    if (w1[1] != 1 || cw.kh < 1 || cw.kw < 1 || cw.kh > 16) {
      return ref::InvalidNode(node_, "W1 ", ir::DimsToString(w1),
                              " is not a depthwise window [C, 1, kh, kw] with kh <= 16");
    }
    cw.c0 = cw.c1;
    if (cw.w[0] != nullptr) {
      const auto& w0 = cw.w[0]->dims();
      if (w0[0] != cw.c1 || w0[2] != 1 || w0[3] != 1) {
        return ref::InvalidNode(node_, "W0 ", ir::DimsToString(w0), " is not a 1x1 kernel of ",
                                cw.c1, " outputs");
      }
      cw.c0 = w0[1];
    }
    cw.c2 = cw.c1;
    if (cw.w[2] != nullptr) {
      const auto& w2 = cw.w[2]->dims();
      if (w2[1] != cw.c1 || w2[2] != 1 || w2[3] != 1) {
        return ref::InvalidNode(node_, "W2 ", ir::DimsToString(w2), " is not a 1x1 kernel of ",
                                cw.c1, " inputs");
      }
      cw.c2 = w2[0];
    }
    const int64_t outs[3] = {cw.c1, cw.c1, cw.c2};
    for (int s = 0; s < 3; ++s) {
      const ir::Tensor* b = cw.b[s];
      if (b && (b->rank() != 1 || b->dim(0) != outs[s] || b->dtype() != t)) {
        return ref::InvalidNode(node_, "bias ", s, " ", DataTypeName(b->dtype()), " ",
                                ir::DimsToString(b->dims()), " must be ", DataTypeName(t), " [",
                                outs[s], "]");
      }
    }
    return cw;
  }

  // Packs the weights and pads the biases when a weight buffer differs from the last run's;
  // nothing for a step the chain does not have (the depthwise step is always there).
  absl::Status Pack(const ChainWeights& cw) {
    std::array<const void*, 6> sources = {};
    for (int s = 0; s < 3; ++s) {
      sources[2 * s] = cw.w[s] ? cw.w[s]->raw_data() : nullptr;
      sources[2 * s + 1] = cw.b[s] ? cw.b[s]->raw_data() : nullptr;
    }
    if (packed_[1] && sources == sources_) return absl::OkStatus();
    const int64_t ins[3] = {cw.c0, 1, cw.c1}, outs[3] = {cw.c1, cw.c1, cw.c2};
    for (int s = 0; s < 3; ++s) {
      if (cw.w[s] == nullptr) {
        packed_[s].reset();
        bias_[s].reset();
        dot_[s].reset();
        continue;
      }
      const int64_t elems =
          s == 1 ? cw.kh * cw.kw * ChainPadded(cw.c1) : ChainPackedElems(ins[s], outs[s]);
      packed_[s] = AllocateAligned(elems);
      bias_[s] = AllocateAligned(ChainPadded(outs[s]));
      if (!packed_[s] || !bias_[s]) return absl::ResourceExhaustedError("out of memory packing W");
      const std::vector<float> w = Widened(*cw.w[s]);
      dot_[s].reset();
      if (s == 1) {
        ChainPackDepthwise(w.data(), cw.c1, cw.kh * cw.kw, packed_[s].get());
      } else {
        ChainPack1x1(w.data(), ins[s], outs[s], packed_[s].get());
        if (cw.w[s]->dtype() == DataType::kBF16 && ChainBf16Dot()) {
          // The 1x1 steps of a bf16 chain on vdpbf16ps (the kernel's bf16 registration needs
          // kCpuAvx512Bf16; ChainBf16Dot says where it pays).
          dot_[s].reset(static_cast<uint16_t*>(
              std::aligned_alloc(64, (ChainDotElems(ins[s], outs[s]) * 2 + 63) / 64 * 64)));
          if (!dot_[s]) return absl::ResourceExhaustedError("out of memory packing W");
          ChainPack1x1Dot(w.data(), ins[s], outs[s], dot_[s].get());
        }
      }
      std::memset(bias_[s].get(), 0, ChainPadded(outs[s]) * sizeof(float));
      if (cw.b[s] != nullptr) {
        const std::vector<float> b = Widened(*cw.b[s]);
        std::memcpy(bias_[s].get(), b.data(), outs[s] * sizeof(float));
      }
    }
    sources_ = sources;
    return absl::OkStatus();
  }

  const ir::Node& node_;
  const Operands& io_;
  ChainActivation act_[3];
  std::array<int64_t, 2> strides_ = {1, 1};
  std::array<int64_t, 4> pads_ = {0, 0, 0, 0};
  bool pool_ = false;  // Y max-pooled 2 x 2, stride 2
  AlignedFloats packed_[3], bias_[3];
  std::unique_ptr<uint16_t, FreeAligned> dot_[3];
  std::array<const void*, 6> sources_ = {};
};

}  // namespace

bool ChainMemberConv(const ir::Node& n) {
  if ((n.op != ir::OpType::kConv && n.op != ir::OpType::kFusedConv) ||
      n.GetInt(kChannelsLastAttr, 0) == 0 || n.num_outputs() != 1 || !n.outputs[0] || !n.input(0) ||
      !ChainType(n.input(0)->dtype) || n.outputs[0]->dtype != n.input(0)->dtype) {
    return false;
  }
  const DataType t = n.input(0)->dtype;
  const ir::Value* w = n.input(1);
  if (!ConstantOf(w, t) || w->constant->rank() != 4 || (n.input(2) && !ConstantOf(n.input(2), t))) {
    return false;
  }
  const std::string act = n.GetString("activation", "");
  const std::string pad = n.GetString("auto_pad", "NOTSET");
  const std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  const auto& wd = w->constant->dims();
  return (act.empty() || act == "Relu" || act == "LeakyRelu" || act == "Clip" ||
          act == "HardSwish") &&
         (pad == "NOTSET" || pad.empty()) && AllEqual(n.GetInts("dilations"), 1) &&
         (kernel.empty() || kernel == std::vector<int64_t>{wd[2], wd[3]}) &&
         n.GetInts("strides", {1, 1}).size() == 2 && n.GetInts("pads", {0, 0, 0, 0}).size() == 4;
}

bool ChainPointwiseConv(const ir::Node& n) {
  if (!ChainMemberConv(n)) return false;
  const auto& wd = n.input(1)->constant->dims();
  return wd[2] == 1 && wd[3] == 1 && n.GetInt("group", 1) == 1 &&
         AllEqual(n.GetInts("strides"), 1) && AllEqual(n.GetInts("pads"), 0);
}

bool ChainDepthwiseConv(const ir::Node& n) {
  if (!ChainMemberConv(n) || n.input(3)) return false;
  if (n.input(0)->dtype == DataType::kBF16 && !ChainTakesBf16()) return false;
  const auto& wd = n.input(1)->constant->dims();
  return wd[1] == 1 && n.GetInt("group", 1) == wd[0] && wd[0] > 1 && wd[2] <= 16;
}

void RegisterConvChain(Registry& r) {
  // bf16 apart: vcvtneps2bf16 for its stores needs kCpuAvx512Bf16.
  const std::pair<std::vector<DataType>, uint64_t> types[] = {{{DataType::kF32, DataType::kF16}, 0},
                                                              {{DataType::kBF16}, kCpuAvx512Bf16}};
  for (const auto& [dtypes, features] : types) {
    KernelDef def{ir::OpType::kFusedConvChain,  dtypes, 0, Backend::kCpu, Isa::kAvx512,
                  &ConvChainKernel::CreateChain};
    def.supports = &ConvChainKernel::SupportsChain;
    def.cpu_features = features;
    r.Add(def);
    // Depthwise convolutions alone: the chain's depthwise step, preferred to oneDNN's (measured
    // 1.2-1.6x faster at MobileNetV2's shapes, bench/conv_bench.cc).
    for (ir::OpType op : {ir::OpType::kConv, ir::OpType::kFusedConv}) {
      KernelDef dw{op, dtypes, 0, Backend::kCpu, Isa::kAvx512, &ConvChainKernel::CreateDepthwise};
      dw.supports = &ChainDepthwiseConv;
      dw.preferred = true;
      dw.cpu_features = features;
      r.Add(dw);
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
