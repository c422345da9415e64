// The recurrent ops LSTM, GRU and RNN on OpenCL, for fp32, fp16 and bf16 storage: what the
// reference kernel (cpu/ref/recurrent.{h,cc}) runs, with its attribute and input checks
// (rnn::ReadAttrs, rnn::Prepare) and error messages: directions forward, reverse and
// bidirectional, sequence_lens, initial_h / initial_c, peepholes, every activation of the operator
// docs with its alpha / beta, clip, input_forget, linear_before_reset, layout 0 and 1, and the
// optional outputs Y, Y_h, Y_c. `supports` refuses what differs from that (operands of another
// dtype than X's, a sequence_lens that is not int32: the reference's own errors, on the CPU);
// LSTMQuantizedR has no kernel here.
//
// Design: per chunk of time steps, two launches.
//  1. `project`: Xt W^T + Wb for every (direction, step, batch entry) of the chunk, one 16 x 16
//     tiled GEMM over all compute units, into an fp32 scratch indexed by step (a reversed
//     direction's row s is its entry's time len - 1 - s), so the recurrence reads it in order.
//  2. `recur`: one work-group per (direction, batch entry) loops over the chunk's steps; each
//     item owns units u = l, l + L, ...: it computes the unit's gates' Ht-1 R^T dot products, the
//     gates and the new state, and writes Y; a barrier ends each step. The state (Ht-1 and Ht,
//     Ct; GRU's zt and rt . Ht-1) lives in local memory when it fits (kMaxLocalStateFloats), else
//     in a global scratch, where it also stays between chunks.
// R is read transposed and widened (RT[d][k][j], fp32), so the items of a group read consecutive
// words: `transpose_r` makes it at every run, or once when R is a constant of the graph. Chunks
// keep the projection scratch under kMaxProjectionFloats; an LSTM of Silero VAD's size (hidden
// and input 128, batch 1) is one chunk: three launches (two with a constant R).
//
// Arithmetic: that of the reference, operation for operation, in fp32: each dot product is
// acc = 0, then acc = acc + v[k] * m[k] (the product rounded, then the sum; FP_CONTRACT OFF) for
// k = 0 .. n-1 in order, then acc + bias (acc + 0 without B); each gate's input is
// (Xt W^T + Wb) + (Ht-1 R^T + Rb) [+ P . Ct-1], then clip, then the activation, and the state
// updates in the reference's order of operations (recurrent.h). Given the same inputs, every sum
// and product is the reference's bit for bit; the results differ only through the activations'
// exp, tanh and log1p (the device's built-ins, within a few ulps of the C library's), and what
// such a difference makes of later steps. The state stays in fp32 between steps, as on the CPU;
// each output is rounded once to its storage type.
//
// sequence_lens decides how many steps each entry runs and is checked on the host, as the
// reference checks it (values in [0, seq]): a constant one is read from the graph, any other read
// back from the device (a blocking read of batch int32s) before the launches.
#include "engine/kernels/cpu/ref/recurrent.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"
#include "engine/kernels/opencl/row_ops.h"

namespace kiln::kernels::opencl {
namespace {

namespace rnn = cpu::ref::rnn;
using ir::OpType;

// Input slots (recurrent.h).
enum Slot { kX, kW, kR, kB, kSequenceLens, kInitialH, kInitialC, kP };

// The projection scratch holds at most this many floats (16 MiB) unless one step needs more:
// the sequence is cut into chunks of as many steps as fit.
constexpr int64_t kMaxProjectionFloats = int64_t{1} << 22;
// The recurrent state (4 * hidden floats per group) is kept in local memory up to this many
// floats (16 KiB, half of OpenCL's minimum for a device's local memory) and half the device's.
constexpr int64_t kMaxLocalStateFloats = 4096;

// The `recur` kernel's flags.
enum Flags {
  kHasB = 1,
  kHasP = 2,
  kHasH0 = 4,
  kHasC0 = 8,
  kHasLens = 16,
  kWantY = 32,
  kWantYH = 64,
  kWantYC = 128,
  kReverse = 256,     // every direction reversed ("reverse"); direction 1 always is
  kFirstChunk = 512,  // the state starts from initial_h / initial_c
  kLastChunk = 1024,  // Y_h and Y_c are written
  kOption = 2048,     // LSTM input_forget, GRU linear_before_reset
};

// Activation kinds as the kernels number them: rnn::ActKind's values (relu 0 .. softplus 10).
static_assert(static_cast<int>(rnn::ActKind::kRelu) == 0 &&
              static_cast<int>(rnn::ActKind::kSoftplus) == 10);

// The activations as kernel arguments: 4 bits of kind per activation, (direction, f/g/h) at
// bits 12 d + 4 j (a single direction's serve as direction 1's), and their alphas and betas at
// component 3 d + j.
struct ActArgs {
  cl_int kinds = 0;
  cl_float8 alpha{}, beta{};
};

ActArgs MakeActArgs(const rnn::Attrs& a) {
  ActArgs r;
  for (int d = 0; d < 2; ++d) {
    for (int j = 0; j < a.acts_per_dir; ++j) {
      const rnn::Act& act = a.act(std::min(d, a.num_directions - 1), j);
      r.kinds |= static_cast<cl_int>(act.kind) << (12 * d + 4 * j);
      r.alpha.s[3 * d + j] = act.alpha;
      r.beta.s[3 * d + j] = act.beta;
    }
  }
  return r;
}

// Flags and helpers of the activations and kernels.
constexpr char kHelpers[] = R"(
#define F_B 1
#define F_P 2
#define F_H0 4
#define F_C0 8
#define F_LENS 16
#define F_Y 32
#define F_YH 64
#define F_YC 128
#define F_REV 256
#define F_FIRST 512
#define F_LAST 1024
#define F_OPT 2048
#if LOCAL_STATE
#define SP __local
#else
#define SP __global
#endif

// rnn::Act::Sigmoid: exp's argument kept <= 0.
inline float rnn_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + exp(-x));
  const float e = exp(x);
  return e / (1.0f + e);
}
inline float rnn_hard_sigmoid(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }
// The reference's Clip (NaN passes; +inf: no clip).
inline float clipv(float x, float c) { return x > c ? c : x < -c ? -c : x; }
// Activation kind k (rnn::ActKind) of x with its alpha a and beta b, as rnn::Act computes it.
inline float act(int k, float x, float a, float b) {
  switch (k) {
    case 0: return x < 0.0f ? 0.0f : x;                                   // Relu
    case 1: return kiln_tanh(x);                                          // Tanh
    case 2: return rnn_sigmoid(x);                                        // Sigmoid
    case 3: return a * x + b;                                             // Affine
    case 4: return x >= 0.0f ? x : a * x;                                 // LeakyRelu
    case 5: return x >= a ? x : 0.0f;                                     // ThresholdedRelu
    case 6: return a * kiln_tanh(b * x);                                  // ScaledTanh
    case 7: return rnn_hard_sigmoid(a * x + b);                           // HardSigmoid
    case 8: return x >= 0.0f ? x : a * (exp(x) - 1.0f);                   // Elu
    case 9: return x / (1.0f + fabs(x));                                  // Softsign
    default: return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x));        // Softplus
  }
}
)";

// The kernels, after the activations.
constexpr char kKernels[] = R"(

// RT[d][k][j] = R[d][j][k] in fp32 (n = dirs * gh * hs elements of R, read in order).
__kernel void transpose_r(__global const S_T* R, ulong ro, __global float* RT, ulong gh, ulong hs,
                          ulong n) {
  const ulong i = get_global_id(0);
  if (i >= n) return;
  const ulong k = i % hs, j = i / hs % gh, d = i / hs / gh;
  RT[(d * hs + k) * gh + j] = S_LD(R, ro + i);
}

// XW[d][row][j] = Xt W_j^T + Wb_j for the chunk's rows (s - s0) * batch + b, t the time of step
// s of entry b in direction d (none past the entry's length). One 16 x 16 tile of (row, j) per
// work-group; each output sums its products in k order (the reference's MatVec).
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void project(__global const S_T* X, ulong xo, __global const S_T* W, ulong wo,
             __global const S_T* B, ulong bo, __global const int* L, ulong lo,
             __global float* XW, ulong seq, ulong batch, ulong in, ulong gh, ulong s0,
             ulong steps, int layout, int flags) {
  __local float xs[16][17];
  __local float ws[16][17];
  const uint tx = get_local_id(0), ty = get_local_id(1);
  const ulong d = get_global_id(2);
  const ulong rows = steps * batch;
  const ulong row = get_group_id(1) * 16 + ty;
  const ulong wrow = get_group_id(0) * 16 + ty;  // the W row this item stages
  long xrow = -1;
  if (row < rows) {
    const ulong b = row % batch, s = s0 + row / batch;
    const ulong len = (flags & F_LENS) ? (ulong)L[lo + b] : seq;
    if (s < len) {
      const ulong t = ((flags & F_REV) || d == 1) ? len - 1 - s : s;
      xrow = layout == 0 ? t * batch + b : b * seq + t;
    }
  }
  __global const S_T* wd = W + wo + d * gh * in;
  float acc = 0.0f;
  for (ulong k0 = 0; k0 < in; k0 += 16) {
    const ulong k = k0 + tx;
    xs[ty][tx] = xrow >= 0 && k < in ? S_LD(X, xo + (ulong)xrow * in + k) : 0.0f;
    ws[ty][tx] = wrow < gh && k < in ? S_LD(wd, wrow * in + k) : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    // Only the k < in terms: adding a padding product could turn an accumulated -0 into +0.
    const uint kn = in - k0 < 16 ? (uint)(in - k0) : 16;
    for (uint kk = 0; kk < kn; ++kk) acc = acc + xs[ty][kk] * ws[tx][kk];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const ulong col = get_group_id(0) * 16 + tx;
  if (xrow < 0 || col >= gh) return;
  const float wb = (flags & F_B) ? S_LD(B, bo + d * 2 * gh + col) : 0.0f;
  XW[(d * rows + row) * gh + col] = acc + wb;
}

#define CLIP(x) clipv((x), clip)
// Activation j (f, g, h) of the group's direction.
#define ACT(j, x) act(kd >> (4 * j) & 15, (x), a##j, b##j)
#define RB(j) ((flags & F_B) ? S_LD(B, rbo + (j)) : 0.0f)
#define PEEP(j) S_LD(P, po + d * 3 * hs + (j))
#define YROW(t) ((layout == 0 ? ((t) * dirs + d) * batch + b : ((b * seq + (t)) * dirs + d)) * hs)

// One work-group per (direction d, batch entry b) = (group / batch, group % batch): steps s0 ..
// s0 + steps - 1 of the entry. State st: H at [0, hs) and [hs, 2 hs) (step s reads (s & 1),
// writes the other), Ct (LSTM) or zt (GRU) at [2 hs, 3 hs), rt . Ht-1 (GRU) at [3 hs, 4 hs).
__kernel void recur(__global const float* XW, __global const float* RT,
                    __global const S_T* B, ulong bo, __global const S_T* P, ulong po,
                    __global const S_T* H0, ulong h0o, __global const S_T* C0, ulong c0o,
                    __global const int* L, ulong lo, __global S_T* Y, ulong yo,
                    __global S_T* YH, ulong yho, __global S_T* YC, ulong yco,
                    __global float* GS, __local float* LS, ulong seq, ulong batch, ulong hs,
                    ulong dirs, int layout, float clip, ulong s0, ulong steps, int flags,
                    int kinds, float8 alpha, float8 beta) {
  const ulong g = get_group_id(0), d = g / batch, b = g % batch;
  const int kd = kinds >> (12 * d);
  const float a0 = d ? alpha.s3 : alpha.s0, a1 = d ? alpha.s4 : alpha.s1;
  const float a2 = d ? alpha.s5 : alpha.s2, b0 = d ? beta.s3 : beta.s0;
  const float b1 = d ? beta.s4 : beta.s1, b2 = d ? beta.s5 : beta.s2;
  const ulong l = get_local_id(0), nl = get_local_size(0);
  const ulong gh = GATES * hs;
  __global float* gs = GS + g * 4 * hs;
#if LOCAL_STATE
  __local float* st = LS;
  if (!(flags & F_FIRST)) {
    for (ulong i = l; i < 3 * hs; i += nl) st[i] = gs[i];
  }
#else
  __global float* st = gs;
#endif
  const ulong srow = (layout == 0 ? d * batch + b : b * dirs + d) * hs;
  if (flags & F_FIRST) {
    for (ulong u = l; u < hs; u += nl) {
      st[u] = (flags & F_H0) ? S_LD(H0, h0o + srow + u) : 0.0f;
      st[2 * hs + u] = (flags & F_C0) ? S_LD(C0, c0o + srow + u) : 0.0f;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
  const ulong len = (flags & F_LENS) ? (ulong)L[lo + b] : seq;
  const int rev = (flags & F_REV) || d == 1;
  __global const float* rt = RT + d * hs * gh;
  const ulong rbo = bo + d * 2 * gh + gh;  // Rb of direction d
  for (ulong s = s0; s < s0 + steps; ++s) {
    if (s >= len) {  // past the entry's length (the whole group alike): Y is zero at time s
      if (flags & F_Y) {
        for (ulong u = l; u < hs; u += nl) S_ST(0.0f, Y, yo + YROW(s) + u);
      }
      continue;
    }
    const ulong t = rev ? len - 1 - s : s;
    const ulong yrow = yo + YROW(t);
    SP float* hp = st + (s & 1) * hs;
    SP float* hn = st + ((s + 1) & 1) * hs;
    __global const float* xw = XW + ((d * steps + (s - s0)) * batch + b) * gh;
#if CELL == 0
    for (ulong u = l; u < hs; u += nl) {
      float a = 0.0f;
      for (ulong k = 0; k < hs; ++k) a = a + hp[k] * rt[k * gh + u];
      a = a + RB(u);
      const float h = ACT(0, CLIP(xw[u] + a));
      hn[u] = h;
      if (flags & F_Y) S_ST(h, Y, yrow + u);
    }
#elif CELL == 1
    const int lbr = flags & F_OPT;
    for (ulong u = l; u < hs; u += nl) {
      float az = 0.0f, ar = 0.0f, ah = 0.0f;
      if (lbr) {
        for (ulong k = 0; k < hs; ++k) {
          const float hk = hp[k];
          __global const float* r = rt + k * gh + u;
          az = az + hk * r[0];
          ar = ar + hk * r[hs];
          ah = ah + hk * r[2 * hs];
        }
      } else {
        for (ulong k = 0; k < hs; ++k) {
          const float hk = hp[k];
          __global const float* r = rt + k * gh + u;
          az = az + hk * r[0];
          ar = ar + hk * r[hs];
        }
      }
      az = az + RB(u);
      ar = ar + RB(hs + u);
      const float z = ACT(0, CLIP(xw[u] + az));
      const float r = ACT(0, CLIP(xw[hs + u] + ar));
      if (lbr) {
        // rt . (Ht-1 Rh^T + Rbh)
        ah = ah + RB(2 * hs + u);
        const float ht = ACT(1, CLIP(xw[2 * hs + u] + r * ah));
        const float h = (1.0f - z) * ht + z * hp[u];
        hn[u] = h;
        if (flags & F_Y) S_ST(h, Y, yrow + u);
      } else {
        st[2 * hs + u] = z;
        st[3 * hs + u] = r * hp[u];
      }
    }
    if (!lbr) {
      // (rt . Ht-1) Rh^T + Rbh, once every unit's rt . Ht-1 is there.
      barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
      SP const float* rh = st + 3 * hs;
      for (ulong u = l; u < hs; u += nl) {
        float ah = 0.0f;
        for (ulong k = 0; k < hs; ++k) ah = ah + rh[k] * rt[k * gh + 2 * hs + u];
        ah = ah + RB(2 * hs + u);
        const float ht = ACT(1, CLIP(xw[2 * hs + u] + ah));
        const float z = st[2 * hs + u];
        const float h = (1.0f - z) * ht + z * hp[u];
        hn[u] = h;
        if (flags & F_Y) S_ST(h, Y, yrow + u);
      }
    }
#else
    // Gate rows i, o, f, c; peepholes i, o, f.
    for (ulong u = l; u < hs; u += nl) {
      float ai = 0.0f, ao = 0.0f, af = 0.0f, ac = 0.0f;
      for (ulong k = 0; k < hs; ++k) {
        const float hk = hp[k];
        __global const float* r = rt + k * gh + u;
        ai = ai + hk * r[0];
        ao = ao + hk * r[hs];
        af = af + hk * r[2 * hs];
        ac = ac + hk * r[3 * hs];
      }
      ai = ai + RB(u);
      ao = ao + RB(hs + u);
      af = af + RB(2 * hs + u);
      ac = ac + RB(3 * hs + u);
      const float c = st[2 * hs + u];
      float pi = xw[u] + ai;
      if (flags & F_P) pi = pi + PEEP(u) * c;
      const float it = ACT(0, CLIP(pi));
      float ft;
      if (flags & F_OPT) {
        ft = 1.0f - it;
      } else {
        float pf = xw[2 * hs + u] + af;
        if (flags & F_P) pf = pf + PEEP(2 * hs + u) * c;
        ft = ACT(0, CLIP(pf));
      }
      const float ct = ACT(1, CLIP(xw[3 * hs + u] + ac));
      const float cn = ft * c + it * ct;
      float po_ = xw[hs + u] + ao;
      if (flags & F_P) po_ = po_ + PEEP(hs + u) * cn;
      const float ot = ACT(0, CLIP(po_));
      const float h = ot * ACT(2, cn);
      hn[u] = h;
      st[2 * hs + u] = cn;  // only unit u reads it
      if (flags & F_Y) S_ST(h, Y, yrow + u);
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
  }
  if (flags & F_LAST) {
    // The state after the entry's last step (zero for a length of 0), as the reference gives.
    SP const float* hf = st + (len & 1) * hs;
    for (ulong u = l; u < hs; u += nl) {
      if (flags & F_YH) S_ST(len > 0 ? hf[u] : 0.0f, YH, yho + srow + u);
      if (flags & F_YC) S_ST(len > 0 ? st[2 * hs + u] : 0.0f, YC, yco + srow + u);
    }
  } else {
#if LOCAL_STATE
    for (ulong i = l; i < 3 * hs; i += nl) gs[i] = st[i];
#endif
  }
}
)";

std::string RecurrentSource(DataType dt, const rnn::Attrs& a, bool local_state) {
  const int cell = a.cell == rnn::Cell::kRnn ? 0 : a.cell == rnn::Cell::kGru ? 1 : 2;
  return absl::StrCat(StoragePrelude(dt), "#define GATES ", a.gates, "\n#define CELL ", cell,
                      "\n#define LOCAL_STATE ", local_state ? 1 : 0, "\n", kHelpers, kKernels);
}

class RecurrentKernel final : public NodeKernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(rnn::Attrs attrs, rnn::ReadAttrs(node));
    if (attrs.quantized_r) return Unsupported(node, "has a quantized R");
    return std::unique_ptr<Kernel>(new RecurrentKernel(node, std::move(attrs)));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x_in = ctx.input(kX);
    const std::string what = Label(node_, x_in != nullptr ? x_in->dtype() : DataType::kUndefined);
    HostParams host(ctx);
    RETURN_IF_ERROR(host.Fetch(node_, {kSequenceLens}));
    ASSIGN_OR_RETURN(const rnn::Problem p, rnn::Prepare(node_, a_, host));
    const DataType dt = p.x->dtype();
    RETURN_IF_ERROR(CheckStored(node_, dt, "X"));
    if (p.batch == 0 || p.hidden == 0) return absl::OkStatus();  // every output is empty
    if (p.y == nullptr && p.y_h == nullptr && p.y_c == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::shared_ptr<Device> dev, DeviceOf(*p.x, what));

    const int64_t hs = p.hidden, gh = a_.gates * hs, dirs = p.dirs;
    const int64_t per_step = dirs * p.batch * gh;
    const int64_t chunk =
        std::clamp<int64_t>(kMaxProjectionFloats / per_step, 1, std::max<int64_t>(p.seq, 1));
    const bool local_state =
        4 * hs <= std::min<int64_t>(kMaxLocalStateFloats,
                                    static_cast<int64_t>(dev->info().local_mem_bytes / 8));
    const std::string key = absl::StrCat(DataTypeOnnxName(dt), local_state ? "/local" : "/global");
    const auto source = [&] { return RecurrentSource(dt, a_, local_state); };
    ASSIGN_OR_RETURN(cl_kernel project, programs_.Get(dev, what, key, "project", source));
    ASSIGN_OR_RETURN(cl_kernel recur, programs_.Get(dev, what, key, "recur", source));

    // Scratch: the projection of a chunk, R transposed, the state of every group.
    RETURN_IF_ERROR(Reserve(dev, xw_, chunk * per_step));
    const bool r_constant = node_.input(kR) != nullptr && node_.input(kR)->constant.has_value();
    if (!(r_constant && rt_ready_ && rt_ != nullptr && rt_dev_ == dev.get())) {
      RETURN_IF_ERROR(Reserve(dev, rt_, dirs * hs * gh));
      ASSIGN_OR_RETURN(cl_kernel tr, programs_.Get(dev, what, key, "transpose_r", source));
      ASSIGN_OR_RETURN(TensorArg ra, ArgOf(*p.r, what));
      const cl_ulong n = static_cast<cl_ulong>(p.r->num_elements());
      RETURN_IF_ERROR(SetArgs(*dev, tr, what, 0, ra, rt_->mem(), cl_ulong(gh), cl_ulong(hs), n));
      RETURN_IF_ERROR(Launch1D(*dev, tr, n, what));
      rt_ready_ = r_constant;
      rt_dev_ = dev.get();
    }
    RETURN_IF_ERROR(Reserve(dev, state_, dirs * p.batch * 4 * hs));

    // Operands; an absent one takes X's buffer, never read.
    ASSIGN_OR_RETURN(const TensorArg xa, ArgOf(*p.x, what));
    ASSIGN_OR_RETURN(const TensorArg wa, ArgOf(*p.w, what));
    const auto opt = [&](const ir::Tensor* t) -> absl::StatusOr<TensorArg> {
      if (t == nullptr) return xa;
      return ArgOf(*t, what);
    };
    ASSIGN_OR_RETURN(const TensorArg ba, opt(p.b));
    ASSIGN_OR_RETURN(const TensorArg pa, opt(p.p));
    ASSIGN_OR_RETURN(const TensorArg h0a, opt(p.init_h));
    ASSIGN_OR_RETURN(const TensorArg c0a, opt(p.init_c));
    ASSIGN_OR_RETURN(const TensorArg ya, opt(p.y));
    ASSIGN_OR_RETURN(const TensorArg yha, opt(p.y_h));
    ASSIGN_OR_RETURN(const TensorArg yca, opt(p.y_c));
    const ir::Tensor* lens = ctx.input(kSequenceLens);
    ASSIGN_OR_RETURN(const TensorArg la, LensArg(dev, lens, p, xa, what));

    const int flags = (p.b ? kHasB : 0) | (p.p ? kHasP : 0) | (p.init_h ? kHasH0 : 0) |
                      (p.init_c ? kHasC0 : 0) | (lens ? kHasLens : 0) | (p.y ? kWantY : 0) |
                      (p.y_h ? kWantYH : 0) | (p.y_c ? kWantYC : 0) | (a_.reverse ? kReverse : 0) |
                      (a_.input_forget || a_.linear_before_reset ? kOption : 0);
    const cl_ulong seq = p.seq, batch = p.batch, in = p.input, ghu = gh, hsu = hs;
    const cl_int layout = p.layout;
    const size_t local = GroupSize(*dev, recur, hs);
    const size_t local_bytes = (local_state ? 4 * hs : 4) * sizeof(float);
    const ClApi& cl = dev->cl();
    // The projection's flags: Wb, lengths, reversal.
    const cl_int pflags = flags & (kHasB | kHasLens | kReverse);
    for (int64_t s0 = 0; s0 == 0 || s0 < p.seq; s0 += chunk) {
      const int64_t steps = std::min(chunk, p.seq - s0);
      const cl_int f = flags | (s0 == 0 ? kFirstChunk : 0) | (s0 + steps >= p.seq ? kLastChunk : 0);
      const cl_ulong s0u = s0, stepsu = steps;
      const uint64_t rows = static_cast<uint64_t>(steps * p.batch);
      if (rows > 0) {
        RETURN_IF_ERROR(SetArgs(*dev, project, what, 0, xa, wa, ba, la, xw_->mem(), seq, batch, in,
                                ghu, s0u, stepsu, layout, pflags));
        const size_t global[3] = {static_cast<size_t>((gh + 15) / 16 * 16),
                                  static_cast<size_t>((rows + 15) / 16 * 16),
                                  static_cast<size_t>(dirs)};
        const size_t group[3] = {16, 16, 1};
        RETURN_IF_ERROR(dev->Enqueue(project, 3, global, group, what));
      }
      RETURN_IF_ERROR(SetArgs(*dev, recur, what, 0, xw_->mem(), rt_->mem(), ba, pa, h0a, c0a, la,
                              ya, yha, yca, state_->mem()));
      RETURN_IF_ERROR(ClStatus(cl.clSetKernelArg(recur, 19, local_bytes, nullptr), what));
      RETURN_IF_ERROR(SetArgs(*dev, recur, what, 20, seq, batch, hsu, cl_ulong(dirs), layout,
                              a_.clip, s0u, stepsu, f, acts_.kinds, acts_.alpha, acts_.beta));
      RETURN_IF_ERROR(
          LaunchGroups(*dev, recur, static_cast<uint64_t>(dirs * p.batch), local, what));
      if (steps == 0) break;
    }
    return absl::OkStatus();
  }

 private:
  RecurrentKernel(const ir::Node& node, rnn::Attrs attrs)
      : NodeKernel(node), a_(std::move(attrs)), acts_(MakeActArgs(a_)) {}

  // `buf` holding at least `floats` floats on `dev`.
  static absl::Status Reserve(const std::shared_ptr<Device>& dev, std::shared_ptr<ClStorage>& buf,
                              int64_t floats) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float);
    if (buf != nullptr && buf->bytes() >= bytes && &buf->device() == dev.get()) {
      return absl::OkStatus();
    }
    buf.reset();
    ASSIGN_OR_RETURN(buf, NewBuffer(dev, bytes));
    return absl::OkStatus();
  }

  // sequence_lens on the device: the input's buffer, or (a host tensor) the checked lengths
  // written to a buffer of the kernel's. X's buffer, never read, without it.
  absl::StatusOr<TensorArg> LensArg(const std::shared_ptr<Device>& dev, const ir::Tensor* lens,
                                    const rnn::Problem& p, const TensorArg& none,
                                    const std::string& what) {
    if (lens == nullptr) return none;
    if (lens->on_device()) return ArgOf(*lens, what);
    const size_t bytes = p.lens.size() * sizeof(int32_t);
    if (lens_ == nullptr || lens_->bytes() < bytes || &lens_->device() != dev.get()) {
      lens_.reset();
      ASSIGN_OR_RETURN(lens_, NewBuffer(dev, bytes));
    }
    RETURN_IF_ERROR(
        ClStatus(dev->cl().clEnqueueWriteBuffer(dev->queue(), lens_->mem(), CL_TRUE, 0, bytes,
                                                p.lens.data(), 0, nullptr, nullptr),
                 absl::StrCat("writing sequence_lens of ", what)));
    return TensorArg{lens_->mem(), 0};
  }

  const rnn::Attrs a_;
  const ActArgs acts_;
  std::shared_ptr<ClStorage> xw_, rt_, state_, lens_;
  bool rt_ready_ = false;  // rt_ holds a constant R's transpose
  const Device* rt_dev_ = nullptr;
};

// Placement asks before it puts a node here: X of a stored float type, W, R, B, initial_h,
// initial_c and P of X's dtype, sequence_lens int32, outputs of X's dtype (or not yet inferred).
// Anything else the reference refuses at run time with its own error, on the CPU.
bool RecurrentSupports(const ir::Node& node) {
  const ir::Value* x = node.input(kX);
  if (x == nullptr || !ClFloatType(x->dtype)) return false;
  const int slots = node.op == OpType::kLSTM ? 8 : 6;
  if (node.num_inputs() > slots) return false;
  for (int i = kW; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.input(i);
    if (v == nullptr) continue;
    const DataType want = i == kSequenceLens ? DataType::kI32 : x->dtype;
    if (v->dtype != want && v->dtype != DataType::kUndefined) return false;
  }
  for (const ir::Value* v : node.outputs) {
    if (v != nullptr && v->dtype != x->dtype && v->dtype != DataType::kUndefined) return false;
  }
  return true;
}

}  // namespace

void RegisterRecurrent(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (OpType op : {OpType::kLSTM, OpType::kGRU, OpType::kRNN}) {
    KernelDef def{op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, &RecurrentKernel::Create};
    def.supports = RecurrentSupports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::opencl
