// LSTM, GRU and RNN on float, float16 and bfloat16: the input projection of the whole sequence
// (every direction's Xt W^T + Wb + Rb) as one fp32 GEMM of the AVX-512 core (gemm.h), with W
// packed once, then the time loop of recurrent.h over R packed once in its own layout. Checks,
// shapes and semantics are the reference kernel's (cpu/ref/recurrent.h); its numbers differ from
// the reference's only by the order of the sums (the projection's, the biases folded into it,
// the recurrent dot products in 16-lane partial sums) and by SigmoidF32 / TanhF32 (math.h) in
// place of the C library's exp and tanh. A node with other activations (Affine, Elu, ...) runs
// on the reference kernel (`supports`).
//
// LSTMQuantizedR (cpu/ref/recurrent.h): R's integers q - zero_point are packed exactly, in int8
// when every one fits, else int16, and each step's dot product of a row is scaled once by the
// row's scale: s * (h . (q - zp)) for the reference's h . ((q - zp) * s), the same real number
// rounded in another order (a quarter of fp32 R's bytes to read per step).
//
// Precision (DESIGN.md §5): fp16 and bf16 inputs are widened exactly to fp32, every sum and gate
// is computed in fp32 and each output is rounded once. The recurrent state stays in fp32 between
// steps, as in the reference kernel (higher than assigned, which the guarantee allows).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/avx512/recurrent.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/recurrent.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

namespace rnn = ref::rnn;

// Input slots.
enum Slot { kX, kW, kR, kB, kSequenceLens, kInitialH, kInitialC, kP, kRScale, kRZeroPoint };

// Multiply-adds of one step a thread must have before the loop takes another thread: below, the
// per-step barrier costs about as much as the work it splits.
constexpr int64_t kMinStepMacsPerThread = int64_t{1} << 17;

// A 64-byte aligned array that only grows.
template <typename T>
class AlignedArray {
 public:
  // False when the memory cannot be had.
  bool Reserve(int64_t n) {
    if (n <= size_ && p_ != nullptr) return true;
    const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T) + 63) / 64 * 64;
    p_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    size_ = p_ != nullptr ? n : 0;
    return p_ != nullptr;
  }
  T* data() const { return p_.get(); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> p_;
  int64_t size_ = 0;
};

bool FastAct(const rnn::Act& a, RnnActType* out) {
  switch (a.kind) {
    case rnn::ActKind::kSigmoid:
      *out = RnnActType::kSigmoid;
      return true;
    case rnn::ActKind::kTanh:
      *out = RnnActType::kTanh;
      return true;
    case rnn::ActKind::kRelu:
      *out = RnnActType::kRelu;
      return true;
    default:
      return false;
  }
}

// `n` values of `dtype` (kF32, kF16, kBF16) as fp32 into `out`.
void Widen(DataType dtype, const void* src, float* out, int64_t n) {
  if (dtype == DataType::kF32) {
    std::memcpy(out, src, n * sizeof(float));
  } else {
    ConvertArray(dtype, DataType::kF32, src, out, n);
  }
}

// Rows [g_begin, g_begin + gates) * hs of one direction's R ([*][hs], row-major, elements of E)
// in the time loop's layout: blocks of 16 units, each [hs][gates][16], units past hs zero.
template <typename E>
void PackR(const E* r, int64_t hs, int g_begin, int gates, E* out) {
  const int64_t nb = (hs + kRnnBlock - 1) / kRnnBlock;
  for (int64_t j = 0; j < nb; ++j) {
    for (int g = 0; g < gates; ++g) {
      for (int64_t l = 0; l < kRnnBlock; ++l) {
        const int64_t u = j * kRnnBlock + l;
        const E* row = u < hs ? r + ((g_begin + g) * hs + u) * hs : nullptr;
        E* dst = out + (j * hs * gates + g) * kRnnBlock + l;
        for (int64_t k = 0; k < hs; ++k) dst[k * gates * kRnnBlock] = row ? row[k] : E(0);
      }
    }
  }
}

class RecurrentKernel final : public Kernel {
 public:
  // Activations the time loop computes, on every direction.
  static bool Supports(const ir::Node& node) {
    absl::StatusOr<rnn::Attrs> a = rnn::ReadAttrs(node);
    if (!a.ok()) return false;
    RnnActType t;
    for (const rnn::Act& act : a->acts) {
      if (!FastAct(act, &t)) return false;
    }
    return true;
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(rnn::Attrs attrs, rnn::ReadAttrs(node));
    auto k = std::unique_ptr<RecurrentKernel>(new RecurrentKernel(node, std::move(attrs)));
    // Constant weights are packed now, once; others at each run.
    const ir::Value* w = node.input(kW);
    const ir::Value* r = node.input(kR);
    const ir::Value* sc = node.input(kRScale);
    const ir::Value* zp = node.input(kRZeroPoint);
    auto constant = [](const ir::Value* v) { return v && v->constant && !v->is_graph_input; };
    if (constant(w) && constant(r)) {
      if (!k->a_.quantized_r) {
        k->PackIfValid(*w->constant, *r->constant, nullptr, nullptr);
      } else if (constant(sc) && constant(zp)) {
        k->PackIfValid(*w->constant, *r->constant, &*sc->constant, &*zp->constant);
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const rnn::Problem p, rnn::Prepare(node_, a_, ctx));
    const DataType dt = p.x->dtype();
    if (dt != DataType::kF32 && dt != DataType::kF16 && dt != DataType::kBF16) {
      return ref::InvalidNode(node_, "unsupported dtype ", DataTypeOnnxName(dt));
    }
    const int64_t hs = p.hidden, batch = p.batch, seq = p.seq, in = p.input;
    const int64_t rows = seq * batch, n_all = p.dirs * a_.gates * hs;
    if (!Packed(p) && !Pack(*p.w, *p.r, p.r_scale, p.r_zero_point, hs, in)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(node_.Label(), " cannot allocate the packed weights"));
    }

    // Every direction's input projection at once: [seq * batch][dirs * gates * hs].
    xproj_.resize(rows * n_all);
    ComputeBias(p);
    const float* xf = p.x->data<float>();
    if (dt != DataType::kF32) {
      xf_.resize(rows * in);
      Widen(dt, p.x->raw_data(), xf_.data(), rows * in);
      xf = xf_.data();
    }
    if (in == 0 || rows == 0) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < n_all; ++j) xproj_[i * n_all + j] = has_bias_ ? bias_[j] : 0.0f;
      }
    } else {
      GemmArgs g;
      g.type = GemmType::kF32;
      g.m = rows;
      g.n = n_all;
      g.k = in;
      g.a = xf;
      g.a_rs = in;
      g.a_cs = 1;
      g.b_packed_f32 = w_packed_.data();
      g.y = xproj_.data();
      g.y_rs = n_all;
      if (has_bias_) {
        g.scale = true;
        g.c = bias_.data();
        g.c_rs = 0;
        g.c_cs = 1;
      }
      GemmAvx512(g);
    }

    // States in fp32, [dirs][batch][hs].
    const int64_t states = p.dirs * batch * hs;
    h_state_.assign(states, 0.0f);
    if (a_.cell == rnn::Cell::kLstm) c_state_.assign(states, 0.0f);
    for (int d = 0; d < p.dirs; ++d) {
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t src = p.StateRow(d, b), dst = (d * batch + b) * hs;
        const int64_t bytes = src * DataTypeSize(dt);
        if (p.init_h != nullptr) {
          Widen(dt, static_cast<const char*>(p.init_h->raw_data()) + bytes, &h_state_[dst], hs);
        }
        if (p.init_c != nullptr) {
          Widen(dt, static_cast<const char*>(p.init_c->raw_data()) + bytes, &c_state_[dst], hs);
        }
      }
    }
    scratch_.resize(3 * p.dirs * batch * hs);

    RnnLoopArgs l;
    l.cell = CellType();
    l.weight_type = a_.quantized_r ? r_int_type_ : dt;
    l.r_scale_gs = r_scale_gs_;
    l.y_type = dt;
    l.seq = seq;
    l.batch = batch;
    l.hidden = hs;
    l.dirs = p.dirs;
    for (int d = 0; d < p.dirs; ++d) {
      l.reverse[d] = a_.DirReverse(d);
      const int acts = a_.acts_per_dir;
      FastAct(a_.act(d, 0), &l.f[d]);
      if (acts > 1) FastAct(a_.act(d, 1), &l.g[d]);
      if (acts > 2) FastAct(a_.act(d, 2), &l.h[d]);
      l.r0[d] = r_packed_.data() + d * r_dir_bytes_;
      l.r1[d] = r_packed_.data() + d * r_dir_bytes_ + r0_bytes_;
      l.r_scale[d] = a_.quantized_r ? r_scale_.data() + d * a_.gates * r_scale_gs_ : nullptr;
      l.rbh[d] = has_bias_ && a_.cell == rnn::Cell::kGru && a_.linear_before_reset
                     ? rbh_.data() + d * hs
                     : nullptr;
      l.peep[d] = p.p != nullptr ? peep_.data() + d * 3 * hs : nullptr;
    }
    l.lens = p.lens.data();
    l.xproj = xproj_.data();
    l.x_ts = p.layout == 0 ? batch : 1;
    l.x_bs = p.layout == 0 ? 1 : seq;
    l.x_row = n_all;
    l.clip = a_.clip;
    l.input_forget = a_.input_forget;
    l.linear_before_reset = a_.linear_before_reset;
    l.h_state = h_state_.data();
    l.c_state = c_state_.empty() ? nullptr : c_state_.data();
    if (p.y != nullptr) {
      l.y = p.y->raw_data();
      // Y [seq, dirs, batch, hs] (layout 0) or [batch, seq, dirs, hs] (layout 1).
      l.y_ts = p.layout == 0 ? p.dirs * batch * hs : p.dirs * hs;
      l.y_ds = p.layout == 0 ? batch * hs : hs;
      l.y_bs = p.layout == 0 ? hs : seq * p.dirs * hs;
      ZeroPastLengths(p);
    }
    l.scratch = scratch_.data();
    // Threads per direction by the work of a step; a bidirectional node runs its directions on
    // two teams at once (recurrent.h), which needs no barrier between teams of one.
    const int64_t step_macs = batch * a_.gates * hs * hs;
    const int max_threads = std::max(1, omp_get_max_threads());
    const int64_t team = std::clamp<int64_t>(step_macs / kMinStepMacsPerThread, 1, max_threads);
    l.threads = static_cast<int>(std::min<int64_t>(p.dirs * team, max_threads));
    RnnLoopAvx512(l);

    // Y_h and Y_c: the state after each entry's last step, zero for an empty sequence.
    for (int d = 0; d < p.dirs; ++d) {
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t src = (d * batch + b) * hs, dst = p.StateRow(d, b);
        if (p.y_h != nullptr) WriteState(p, &h_state_[src], p.y_h, dst, p.lens[b] > 0);
        if (p.y_c != nullptr) WriteState(p, &c_state_[src], p.y_c, dst, p.lens[b] > 0);
      }
    }
    return absl::OkStatus();
  }

 private:
  RecurrentKernel(const ir::Node& node, rnn::Attrs attrs) : node_(node), a_(std::move(attrs)) {}

  RnnCellType CellType() const {
    return a_.cell == rnn::Cell::kLstm  ? RnnCellType::kLstm
           : a_.cell == rnn::Cell::kGru ? RnnCellType::kGru
                                        : RnnCellType::kRnn;
  }
  // Gates of the two packed parts of R (recurrent.h).
  int Gates0() const { return RnnGates0(CellType(), a_.linear_before_reset); }
  int Gates1() const { return a_.gates - Gates0(); }

  // Packs constant W and R (and R's scale and zero point) when their dims and dtypes agree with
  // the attributes (the run checks them again and reports what does not).
  void PackIfValid(const ir::Tensor& w, const ir::Tensor& r, const ir::Tensor* scale,
                   const ir::Tensor* zp) {
    const DataType dt = w.dtype();
    const bool r_ok = a_.quantized_r ? (r.dtype() == DataType::kI8 || r.dtype() == DataType::kU8) &&
                                           IsFloating(scale->dtype()) && zp->dtype() == r.dtype()
                                     : r.dtype() == dt;
    if (!r_ok || (dt != DataType::kF32 && dt != DataType::kF16 && dt != DataType::kBF16) ||
        w.rank() != 3 || r.rank() != 3) {
      return;
    }
    const int64_t hs = a_.hidden_size >= 0 ? a_.hidden_size : r.dim(2);
    const int64_t dirs = a_.num_directions, gh = a_.gates * hs;
    if (w.dim(0) != dirs || w.dim(1) != gh || r.dim(0) != dirs || r.dim(1) != gh ||
        r.dim(2) != hs) {
      return;
    }
    if (a_.quantized_r && (scale->dims() != std::vector<int64_t>{dirs, gh} ||
                           zp->dims() != std::vector<int64_t>{dirs, gh})) {
      return;
    }
    Pack(w, r, scale, zp, hs, w.dim(2));
  }

  // Whether the packed weights are those of this run's W and R (constants packed before).
  bool Packed(const rnn::Problem& p) const {
    return w_src_ != nullptr && w_src_ == p.w->raw_data() && r_src_ == p.r->raw_data() &&
           packed_hidden_ == p.hidden && packed_input_ == p.input && IsConstant(kW, *p.w) &&
           IsConstant(kR, *p.r) &&
           (!a_.quantized_r ||
            (IsConstant(kRScale, *p.r_scale) && IsConstant(kRZeroPoint, *p.r_zero_point) &&
             scale_src_ == p.r_scale->raw_data() && zp_src_ == p.r_zero_point->raw_data()));
  }

  bool IsConstant(int slot, const ir::Tensor& t) const {
    const ir::Value* v = node_.input(slot);
    return v && v->constant && !v->is_graph_input && v->constant->raw_data() == t.raw_data();
  }

  // W^T of every direction for the GEMM ([in][dirs * gates * hs], fp32) and R per direction in
  // the loop's layout, in R's storage type (quantized R: its integers q - zero_point, with the
  // row scales in r_scale_). False when the memory cannot be had.
  bool Pack(const ir::Tensor& w, const ir::Tensor& r, const ir::Tensor* scale, const ir::Tensor* zp,
            int64_t hs, int64_t in) {
    const DataType dt = w.dtype();
    const int64_t n_all = a_.num_directions * a_.gates * hs;
    const float* wf = w.data<float>();
    std::vector<float> widened;
    if (dt != DataType::kF32) {
      widened.resize(w.num_elements());
      Widen(dt, w.raw_data(), widened.data(), w.num_elements());
      wf = widened.data();
    }
    if (!w_packed_.Reserve(PackedBElemsF32(in, n_all))) return false;
    // B = W^T: element (k, n) of B is W's row n, column k.
    if (in > 0 && n_all > 0) PackBF32Strided(wf, in, n_all, 1, in, w_packed_.data());

    if (a_.quantized_r) return PackQuantizedR(r, *scale, *zp, hs) && RecordSources(w, r, hs, in);
    const int64_t esize = dt == DataType::kF32 ? 4 : 2;
    const int g0 = Gates0(), g1 = Gates1();
    r0_bytes_ = RnnPackedElems(hs, g0) * esize;
    const int64_t r1_bytes = g1 > 0 ? RnnPackedElems(hs, g1) * esize : 0;
    r_dir_bytes_ = (r0_bytes_ + r1_bytes + 63) / 64 * 64;
    if (!r_packed_.Reserve(a_.num_directions * r_dir_bytes_)) return false;
    for (int d = 0; d < a_.num_directions; ++d) {
      char* out = r_packed_.data() + d * r_dir_bytes_;
      auto pack = [&](auto* src) {
        using E = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
        const E* rd = src + d * a_.gates * hs * hs;
        PackR(rd, hs, 0, g0, reinterpret_cast<E*>(out));
        if (g1 > 0) PackR(rd, hs, g0, g1, reinterpret_cast<E*>(out + r0_bytes_));
      };
      if (dt == DataType::kF32) {
        pack(r.data<float>());
      } else {
        pack(r.data<uint16_t>());
      }
    }
    return RecordSources(w, r, hs, in);
  }

  // Records what the weights were packed from.
  bool RecordSources(const ir::Tensor& w, const ir::Tensor& r, int64_t hs, int64_t in) {
    w_src_ = w.raw_data();
    r_src_ = r.raw_data();
    packed_hidden_ = hs;
    packed_input_ = in;
    return true;
  }

  // R's integers q - zero_point ([dirs][gates * hs][hs]) in the loop's layout, as int8 when each
  // fits in it (always with a zero point of 0 and int8 R), else int16 (|q - zp| <= 255), and the
  // row scales as fp32, gate g of direction d at r_scale_ + (d * gates + g) * r_scale_gs_.
  bool PackQuantizedR(const ir::Tensor& r, const ir::Tensor& scale, const ir::Tensor& zp,
                      int64_t hs) {
    const int dirs = a_.num_directions, gates = a_.gates;
    const int64_t gh = gates * hs;
    const bool u8 = r.dtype() == DataType::kU8;
    auto at = [&](const ir::Tensor& t, int64_t i) -> int32_t {
      return u8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
    };
    std::vector<int16_t> diff(static_cast<size_t>(dirs * gh * hs));
    bool fits8 = true;
    for (int64_t row = 0; row < dirs * gh; ++row) {
      const int32_t z = at(zp, row);
      for (int64_t k = 0; k < hs; ++k) {
        const int32_t v = at(r, row * hs + k) - z;
        fits8 = fits8 && v >= -128 && v <= 127;
        diff[row * hs + k] = static_cast<int16_t>(v);
      }
    }
    r_int_type_ = fits8 ? DataType::kI8 : DataType::kI16;
    const int64_t esize = fits8 ? 1 : 2;
    const int g0 = Gates0(), g1 = Gates1();
    r0_bytes_ = RnnPackedElems(hs, g0) * esize;
    const int64_t r1_bytes = g1 > 0 ? RnnPackedElems(hs, g1) * esize : 0;
    r_dir_bytes_ = (r0_bytes_ + r1_bytes + 63) / 64 * 64;
    if (!r_packed_.Reserve(dirs * r_dir_bytes_)) return false;
    for (int d = 0; d < dirs; ++d) {
      char* out = r_packed_.data() + d * r_dir_bytes_;
      const int16_t* rd = diff.data() + d * gh * hs;
      if (fits8) {
        std::vector<int8_t> narrow(rd, rd + gh * hs);
        PackR(narrow.data(), hs, 0, g0, reinterpret_cast<int8_t*>(out));
        if (g1 > 0) PackR(narrow.data(), hs, g0, g1, reinterpret_cast<int8_t*>(out + r0_bytes_));
      } else {
        PackR(rd, hs, 0, g0, reinterpret_cast<int16_t*>(out));
        if (g1 > 0) PackR(rd, hs, g0, g1, reinterpret_cast<int16_t*>(out + r0_bytes_));
      }
    }
    r_scale_gs_ = (hs + kRnnBlock - 1) / kRnnBlock * kRnnBlock;
    r_scale_.assign(dirs * gates * r_scale_gs_, 0.0f);
    for (int d = 0; d < dirs; ++d) {
      for (int g = 0; g < gates; ++g) {
        for (int64_t u = 0; u < hs; ++u) {
          r_scale_[(d * gates + g) * r_scale_gs_ + u] =
              static_cast<float>(ir::ElementAsDouble(scale, d * gh + g * hs + u));
        }
      }
    }
    scale_src_ = scale.raw_data();
    zp_src_ = zp.raw_data();
    return true;
  }

  // The biases the projection adds (Wb + Rb; GRU with linear_before_reset: Wb alone for the h
  // gate, whose Rb goes to rbh_) and the peepholes, as fp32.
  void ComputeBias(const rnn::Problem& p) {
    const int64_t hs = p.hidden, gh = a_.gates * hs;
    has_bias_ = p.b != nullptr;
    if (has_bias_) {
      std::vector<float> b(p.b->num_elements());
      Widen(p.b->dtype(), p.b->raw_data(), b.data(), b.size());
      bias_.resize(p.dirs * gh);
      rbh_.resize(p.dirs * hs);
      const bool split_h = a_.cell == rnn::Cell::kGru && a_.linear_before_reset;
      for (int d = 0; d < p.dirs; ++d) {
        const float* wb = b.data() + d * 2 * gh;
        const float* rb = wb + gh;
        for (int64_t j = 0; j < gh; ++j) {
          bias_[d * gh + j] = split_h && j >= 2 * hs ? wb[j] : wb[j] + rb[j];
        }
        for (int64_t u = 0; u < hs && split_h; ++u) rbh_[d * hs + u] = rb[2 * hs + u];
      }
    }
    if (p.p != nullptr) {
      peep_.resize(p.p->num_elements());
      Widen(p.p->dtype(), p.p->raw_data(), peep_.data(), peep_.size());
    }
  }

  // Y is zero past each entry's length (the loop writes only the steps it runs).
  void ZeroPastLengths(const rnn::Problem& p) const {
    const int64_t row_bytes = p.hidden * DataTypeSize(p.y->dtype());
    char* y = static_cast<char*>(p.y->raw_data());
    for (int d = 0; d < p.dirs; ++d) {
      for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t t = p.lens[b]; t < p.seq; ++t) {
          std::memset(y + p.YRow(t, d, b) * DataTypeSize(p.y->dtype()), 0, row_bytes);
        }
      }
    }
  }

  // One state row into `out` at element `dst`, rounded to its dtype (zero unless `valid`).
  static void WriteState(const rnn::Problem& p, const float* src, ir::Tensor* out, int64_t dst,
                         bool valid) {
    const DataType dt = out->dtype();
    char* to = static_cast<char*>(out->raw_data()) + dst * DataTypeSize(dt);
    if (!valid) {
      std::memset(to, 0, p.hidden * DataTypeSize(dt));
    } else if (dt == DataType::kF32) {
      std::memcpy(to, src, p.hidden * sizeof(float));
    } else {
      ConvertArray(DataType::kF32, dt, src, to, p.hidden);
    }
  }

  const ir::Node& node_;
  const rnn::Attrs a_;
  // Packed weights and what they were packed from.
  AlignedArray<float> w_packed_;
  AlignedArray<char> r_packed_;
  int64_t r0_bytes_ = 0, r_dir_bytes_ = 0;
  const void* w_src_ = nullptr;
  const void* r_src_ = nullptr;
  int64_t packed_hidden_ = -1, packed_input_ = -1;
  // Quantized R: the integer storage of r_packed_, the row scales and their sources.
  DataType r_int_type_ = DataType::kI8;
  std::vector<float> r_scale_;
  int64_t r_scale_gs_ = 0;
  const void* scale_src_ = nullptr;
  const void* zp_src_ = nullptr;
  // Per-run buffers, kept between runs.
  bool has_bias_ = false;
  std::vector<float> bias_, rbh_, peep_, xf_, xproj_, h_state_, c_state_, scratch_;
};

}  // namespace

int64_t RnnPackedElems(int64_t hidden, int gates) {
  return (hidden + kRnnBlock - 1) / kRnnBlock * hidden * gates * kRnnBlock;
}

int RnnGates0(RnnCellType cell, bool linear_before_reset) {
  if (cell == RnnCellType::kLstm) return 4;
  if (cell == RnnCellType::kRnn) return 1;
  return linear_before_reset ? 3 : 2;
}

void RegisterRecurrent(Registry& r) {
  for (ir::OpType op :
       {ir::OpType::kLSTM, ir::OpType::kLSTMQuantizedR, ir::OpType::kGRU, ir::OpType::kRNN}) {
    KernelDef def{op,           {DataType::kF32, DataType::kF16}, 0, Backend::kCpu,
                  Isa::kAvx512, &RecurrentKernel::Create};
    def.supports = &RecurrentKernel::Supports;
    def.openmp_regions = true;
    r.Add(def);
    def.dtypes = {DataType::kBF16};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for the bf16 outputs
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
