// Attention (opset 23) on OpenCL: softmax(scale * Q K^T, softcapped, masked) V for 3-D
// (B, S, heads * head_size) or 4-D (B, heads, S, head_size) Q/K/V of fp32, fp16 or bf16 storage,
// with grouped-query heads (kv heads fewer than q heads), an optional boolean or additive mask
// broadcast over (batch, heads, queries, keys) as the reference broadcasts it, is_causal, scale
// and softcap. That is what exported and fused attention (passes/fusion.cc) carries. The rest (a
// KV cache, nonpad_kv_seqlen, sliding windows, the present_* and qk_matmul outputs) `supports`
// refuses, so placement leaves such nodes on the CPU reference (cpu/ref/nn_attention.cc), whose
// semantics, shape checks and error messages this kernel follows.
//
// One work-group per (batch, head, query row): its items compute the row's scores (a key each,
// fp32 fma dot products), fold the maximum and the sum of exp(score - max) in local memory, and
// then Y = probabilities x V, items splitting V's columns (and the keys, when V has fewer columns
// than items; the partial sums are folded in order). The scores row lives in local memory when it
// fits (kLocalKeys), else in a global scratch buffer of the kernel, a row per group of a launch;
// launches then cover at most kScratchFloats / S_kv rows each. A row whose every key is masked
// out (or whose scores are all -inf) gets probabilities 0, as the reference's.
//
// Precision (DESIGN.md §5): inputs read to float, everything in fp32 (the softmax too, whatever
// softmax_precision asks: the reference does the same, which satisfies every allowed value), Y
// rounded once to its storage type. The scale is the reference's: sqrt(scale) rounded to Q's
// type, squared in fp32.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"

namespace kiln::kernels::opencl {
namespace {

namespace ref = cpu::ref;

// Items per work-group at most (the fold array's size in the program).
constexpr size_t kMaxGroup = 256;
// A scores row of at most this many keys is held in local memory.
constexpr int64_t kLocalKeys = 2048;
// A Q row of at most this many elements is staged in local memory.
constexpr int64_t kLocalHead = 1024;
// The global scratch of longer rows holds at most this many floats (rows per launch).
constexpr int64_t kScratchFloats = int64_t{1} << 22;

bool IsMaskType(DataType dt) { return dt == DataType::kBool || ClFloatType(dt); }

// flags: 1 mask, 2 causal, 4 Q row in local memory. Strides in elements: *_sb per batch, *_sh per
// head, *_ss per sequence position (the last dim is contiguous); the mask's per batch, head,
// query and key (0 where it broadcasts), with `mkeys` keys (later keys are masked out).
constexpr char kBody[] = R"(
__kernel void $NAME(__global const S_T* Q, ulong qo, __global const S_T* K, ulong ko,
                    __global const S_T* V, ulong vo, __global const M_T* Mk, ulong mo,
                    __global S_T* Y, ulong yo, $SPACE float* scores, __local float* ql,
                    uint Sq, uint Hq, uint group, uint Skv, uint D, uint Dv,
                    ulong q_sb, ulong q_sh, ulong q_ss, ulong k_sb, ulong k_sh, ulong k_ss,
                    ulong v_sb, ulong v_sh, ulong v_ss, ulong y_sb, ulong y_sh, ulong y_ss,
                    ulong m_sb, ulong m_sh, ulong m_sq, ulong m_sk, uint mkeys, int flags,
                    float factor, float softcap, ulong row0) {
  __local float red[256];
  const uint l = get_local_id(0), L = get_local_size(0);
  const ulong g = row0 + get_group_id(0);
  const uint i = g % Sq, h = g / Sq % Hq, hk = h / group;
  const ulong b = g / Sq / Hq;
  $SPACE float* s = scores + $OFFSET;
  __global const S_T* q = Q + qo + b * q_sb + h * q_sh + i * q_ss;
  __global const S_T* k = K + ko + b * k_sb + hk * k_sh;
  __global const M_T* m = Mk + mo + b * m_sb + h * m_sh + i * m_sq;
  const int qlocal = flags & 4;
  if (qlocal) {
    for (uint d = l; d < D; d += L) ql[d] = S_LD(q, d);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  // Scores, as the reference: (Q.K) * factor, softcap, then + mask (bool: 0 or -inf; keys past
  // the mask's are -inf) + -inf above the diagonal when causal. `all`: every key masked out.
  float mx = -INFINITY, all = 1.0f;
  for (uint j = l; j < Skv; j += L) {
    __global const S_T* kr = k + j * k_ss;
    float acc = 0.0f;
    if (qlocal) {
      for (uint d = 0; d < D; ++d) acc = fma(ql[d], S_LD(kr, d), acc);
    } else {
      for (uint d = 0; d < D; ++d) acc = fma(S_LD(q, d), S_LD(kr, d), acc);
    }
    float x = acc * factor;
    if (softcap > 0.0f) x = softcap * kiln_tanh(x / softcap);
    float add = 0.0f;
    if (flags & 1) add = j < mkeys ? M_LD(m, j * m_sk) : -INFINITY;
    if ((flags & 2) && j > i) add += -INFINITY;
    if (add != -INFINITY) all = 0.0f;
    x += add;
    s[j] = x;
    mx = MAXS(mx, x);
  }
  mx = fold_max(red, mx);
  const int zero = fold_min(red, all) != 0.0f || mx == -INFINITY;
  float sum = 0.0f;
  if (!zero) {
    for (uint j = l; j < Skv; j += L) {
      const float e = exp(s[j] - mx);
      s[j] = e;
      sum += e;
    }
  }
  sum = fold_sum(red, sum);
  for (uint j = l; j < Skv; j += L) s[j] = zero ? 0.0f : s[j] / sum;
  barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
  // Y = probabilities x V (a zero row still multiplies V: 0 * inf is NaN there too).
  __global const S_T* v = V + vo + b * v_sb + hk * v_sh;
  __global S_T* y = Y + yo + b * y_sb + h * y_sh + i * y_ss;
  if (Dv >= L) {
    for (uint c = l; c < Dv; c += L) {
      float acc = 0.0f;
      for (uint j = 0; j < Skv; ++j) acc = fma(s[j], S_LD(v, j * v_ss + c), acc);
      S_ST(acc, y, c);
    }
  } else {
    // P parts of the keys per column (keys p, p + P, ...), folded in part order.
    const uint P = L / Dv, c = l % Dv, p = l / Dv;
    float acc = 0.0f;
    if (p < P) {
      for (uint j = p; j < Skv; j += P) acc = fma(s[j], S_LD(v, j * v_ss + c), acc);
    }
    red[l] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l < Dv) {
      float t = 0.0f;
      for (uint r = 0; r < P; ++r) t += red[r * Dv + l];
      S_ST(t, y, l);
    }
  }
}
)";

// Q/K/V of storage type `dt`, a mask of `mdt` (kBool: bytes, nonzero keeps the key). Two entry
// points: the scores row in local memory ("attn_local") or in global scratch ("attn_global").
std::string AttentionSource(DataType dt, DataType mdt) {
  std::string s = StoragePrelude(dt);
  if (mdt == DataType::kBool) {
    absl::StrAppend(&s,
                    "typedef uchar M_T;\n"
                    "#define M_LD(p, i) ((p)[i] ? 0.0f : -INFINITY)\n");
  } else {
    absl::StrAppend(&s, StoragePrelude(mdt, "M"));
  }
  // std::max(m, x): a NaN score never becomes the maximum.
  absl::StrAppend(&s, R"(
#define MAXS(a, b) ((a) < (b) ? (b) : (a))
#define SUMS(a, b) ((a) + (b))
#define MINS(a, b) min((a), (b))
// A power-of-two work-group's fold of each item's v (a tree in local memory).
#define FOLD(NAME, COMB)                                        \
  float NAME(__local float* r, float v) {                       \
    const uint l = get_local_id(0);                             \
    r[l] = v;                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                               \
    for (uint h = get_local_size(0) >> 1; h > 0; h >>= 1) {     \
      if (l < h) r[l] = COMB(r[l], r[l + h]);                   \
      barrier(CLK_LOCAL_MEM_FENCE);                             \
    }                                                           \
    const float x = r[0];                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                               \
    return x;                                                   \
  }
FOLD(fold_max, MAXS)
FOLD(fold_min, MINS)
FOLD(fold_sum, SUMS)
)");
  absl::StrAppend(&s,
                  absl::StrReplaceAll(
                      kBody, {{"$NAME", "attn_local"}, {"$SPACE", "__local"}, {"$OFFSET", "0"}}),
                  absl::StrReplaceAll(kBody, {{"$NAME", "attn_global"},
                                              {"$SPACE", "__global"},
                                              {"$OFFSET", "get_group_id(0) * (ulong)Skv"}}));
  return s;
}

// Shapes of one run, resolved from the inputs as the reference resolves them (no KV cache).
struct Plan {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head = 0, v_head = 0;
  int64_t mask_dims[4] = {1, 1, 1, 1};
};

absl::Status Unsupported(const ir::Node& node, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat(node.Label(), " ", why, " (OpenCL)"));
}

class AttentionKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::unique_ptr<AttentionKernel>(new AttentionKernel(node));
    // The reference's checks, with its messages.
    const int64_t left = node.GetInt("left_window_size", -1);
    const int64_t right = node.GetInt("right_window_size", -1);
    const int64_t mode = node.GetInt("qk_matmul_output_mode", 0);
    if (left < -1 || right < -1) {
      return ref::InvalidNode(node,
                              "left_window_size and right_window_size must be -1 or >= 0, got ",
                              left, " and ", right);
    }
    if (node.since_version < 25 &&
        (node.has_attr("left_window_size") || node.has_attr("right_window_size"))) {
      return ref::InvalidNode(
          node, "left_window_size / right_window_size are not defined before opset 25");
    }
    if (mode < 0 || mode > 3) {
      return ref::InvalidNode(node, "qk_matmul_output_mode must be 0..3, got ", mode);
    }
    k->q_num_heads_ = node.GetInt("q_num_heads", 0);
    k->kv_num_heads_ = node.GetInt("kv_num_heads", 0);
    if (k->q_num_heads_ < 0 || k->kv_num_heads_ < 0) {
      return ref::InvalidNode(node, "q_num_heads and kv_num_heads must be positive");
    }
    if (left != -1 || right != -1) return Unsupported(node, "runs no sliding window");
    if (mode != 0) return Unsupported(node, "has no qk_matmul_output");
    k->causal_ = node.GetInt("is_causal", 0) != 0;
    k->has_scale_ = node.has_attr("scale");
    k->scale_ = node.GetFloat("scale", 1.0f);
    k->softcap_ = node.GetFloat("softcap", 0.0f);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* q, ref::RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* k, ref::RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* v, ref::RequireInput(node_, ctx, 2));
    const ir::Tensor* mask = ctx.input(3);
    for (int i = 4; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i) != nullptr) {
        return Unsupported(node_, "takes no past_key / past_value / nonpad_kv_seqlen");
      }
    }
    for (int i = 1; i < ctx.num_outputs(); ++i) {
      if (ctx.output_requested(i)) return Unsupported(node_, "computes output Y only");
    }
    ASSIGN_OR_RETURN(Plan p, Shapes(*q, *k, *v, mask));
    const DataType dt = q->dtype();
    if (!ClFloatType(dt)) {
      return Unsupported(node_, absl::StrCat("Q is ", DataTypeOnnxName(dt), ", not stored here"));
    }
    if (mask != nullptr && !IsMaskType(mask->dtype())) {
      return Unsupported(node_, absl::StrCat("attn_mask is ", DataTypeOnnxName(mask->dtype()),
                                             ", not stored here"));
    }
    constexpr int64_t kMax = int64_t{1} << 31;
    for (int64_t n : {p.q_len, p.kv_len, p.q_heads, p.head, p.v_head}) {
      if (n >= kMax) return Unsupported(node_, "has dims over 2^31");
    }
    const std::vector<int64_t> y_dims =
        p.three_d ? std::vector<int64_t>{p.batch, p.q_len, p.q_heads * p.v_head}
                  : std::vector<int64_t>{p.batch, p.q_heads, p.q_len, p.v_head};
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, y_dims));
    if (y->num_elements() == 0) return absl::OkStatus();
    return Launch(p, *q, *k, *v, mask, *y);
  }

 private:
  explicit AttentionKernel(const ir::Node& node) : node_(node) {}

  // The reference's AttentionKernel::Shapes without past_key / past_value (same messages).
  absl::StatusOr<Plan> Shapes(const ir::Tensor& q, const ir::Tensor& k, const ir::Tensor& v,
                              const ir::Tensor* mask) const {
    Plan s;
    if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4)) {
      return ref::InvalidNode(node_, "Q, K and V must all be 3-D or all 4-D, got ",
                              ir::DimsToString(q.dims()), ", ", ir::DimsToString(k.dims()), ", ",
                              ir::DimsToString(v.dims()));
    }
    if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
      return ref::InvalidNode(node_, "Q, K and V must have the same dtype");
    }
    s.three_d = q.rank() == 3;
    s.batch = q.dim(0);
    if (k.dim(0) != s.batch || v.dim(0) != s.batch) {
      return ref::InvalidNode(node_, "Q, K and V batch sizes differ");
    }
    if (s.three_d) {
      if (q_num_heads_ <= 0 || kv_num_heads_ <= 0) {
        return ref::InvalidNode(node_, "q_num_heads and kv_num_heads are required for 3-D inputs");
      }
      s.q_heads = q_num_heads_;
      s.kv_heads = kv_num_heads_;
      if (q.dim(2) % s.q_heads != 0 || k.dim(2) % s.kv_heads != 0 || v.dim(2) % s.kv_heads != 0) {
        return ref::InvalidNode(node_, "hidden sizes are not divisible by the head counts");
      }
      s.q_len = q.dim(1);
      s.kv_len = k.dim(1);
      s.head = q.dim(2) / s.q_heads;
      if (k.dim(2) / s.kv_heads != s.head) {
        return ref::InvalidNode(node_, "Q and K head sizes differ");
      }
      s.v_head = v.dim(2) / s.kv_heads;
      if (v.dim(1) != s.kv_len) return ref::InvalidNode(node_, "K and V sequence lengths differ");
    } else {
      s.q_heads = q.dim(1);
      s.kv_heads = k.dim(1);
      s.q_len = q.dim(2);
      s.kv_len = k.dim(2);
      s.head = q.dim(3);
      s.v_head = v.dim(3);
      if (k.dim(3) != s.head) return ref::InvalidNode(node_, "Q and K head sizes differ");
      if (v.dim(1) != s.kv_heads || v.dim(2) != s.kv_len) {
        return ref::InvalidNode(node_, "K and V shapes disagree: ", ir::DimsToString(k.dims()),
                                " vs ", ir::DimsToString(v.dims()));
      }
    }
    if (s.kv_heads <= 0 || s.q_heads % s.kv_heads != 0) {
      return ref::InvalidNode(node_, "q heads (", s.q_heads, ") must be a multiple of kv heads (",
                              s.kv_heads, ")");
    }
    if (mask) {
      if (mask->rank() < 1 || mask->rank() > 4) {
        return ref::InvalidNode(node_, "attn_mask must have rank 1 to 4");
      }
      const int off = 4 - mask->rank();
      for (int d = 0; d < mask->rank(); ++d) s.mask_dims[off + d] = mask->dim(d);
      const int64_t want[4] = {s.batch, s.q_heads, s.q_len, s.kv_len};
      for (int d = 0; d < 3; ++d) {
        if (s.mask_dims[d] != 1 && s.mask_dims[d] != want[d]) {
          return ref::InvalidNode(node_, "attn_mask ", ir::DimsToString(mask->dims()),
                                  " cannot be broadcast to [", s.batch, ",", s.q_heads, ",",
                                  s.q_len, ",", s.kv_len, "]");
        }
      }
      if (s.mask_dims[3] > s.kv_len) {
        return ref::InvalidNode(node_, "attn_mask has ", s.mask_dims[3], " keys, more than ",
                                s.kv_len);
      }
    }
    return s;
  }

  // The reference's factor: sqrt(scale) rounded to Q's type, squared in fp32.
  float Factor(DataType dt, int64_t head) const {
    const double scale = has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(head));
    const double root = std::sqrt(scale);
    float r = static_cast<float>(root);
    if (dt == DataType::kF16) r = ref::Load(ref::Store<Float16>(root));
    if (dt == DataType::kBF16) r = ref::Load(ref::Store<BFloat16>(root));
    return r * r;
  }

  absl::Status Launch(const Plan& p, const ir::Tensor& q, const ir::Tensor& k, const ir::Tensor& v,
                      const ir::Tensor* mask, ir::Tensor& y) {
    const DataType dt = q.dtype();
    const DataType mdt = mask != nullptr ? mask->dtype() : dt;
    const std::string what = absl::StrCat(node_.Label(), " (OpenCL ", DataTypeOnnxName(dt), ")");
    ASSIGN_OR_RETURN(const ClStorage* ys, StorageOf(y, what));
    const std::shared_ptr<Device>& dev = ys->shared_device();
    // Local memory: the fold array, the Q row, then the scores row where they fit.
    const int64_t budget = static_cast<int64_t>(dev->info().local_mem_bytes) / 4 - 512;
    const bool qlocal = p.head <= kLocalHead && 2 * p.head <= budget;
    const int64_t qfloats = qlocal ? p.head : 0;
    const bool slocal = p.kv_len <= kLocalKeys && qfloats + p.kv_len <= budget;
    ASSIGN_OR_RETURN(cl_kernel kern, Function(dev, what, dt, mdt, slocal));
    ASSIGN_OR_RETURN(TensorArg qa, ArgOf(q, what));
    ASSIGN_OR_RETURN(TensorArg ka, ArgOf(k, what));
    ASSIGN_OR_RETURN(TensorArg va, ArgOf(v, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(y, what));
    TensorArg ma = qa;  // never read without a mask
    if (mask != nullptr) {
      ASSIGN_OR_RETURN(ma, ArgOf(*mask, what));
    }
    // Strides (elements) per batch, head and position; the last dim is contiguous.
    const int64_t sq = p.q_len, skv = p.kv_len, hq = p.q_heads, hkv = p.kv_heads;
    const int64_t d = p.head, dv = p.v_head;
    cl_ulong st[12];
    if (p.three_d) {
      const int64_t v3[12] = {sq * hq * d,    d,  hq * d,   skv * hkv * d, d,  hkv * d,
                              skv * hkv * dv, dv, hkv * dv, sq * hq * dv,  dv, hq * dv};
      std::copy(v3, v3 + 12, st);
    } else {
      const int64_t v4[12] = {hq * sq * d,    sq * d,   d,  hkv * skv * d, skv * d, d,
                              hkv * skv * dv, skv * dv, dv, hq * sq * dv,  sq * dv, dv};
      std::copy(v4, v4 + 12, st);
    }
    cl_ulong ms[4] = {0, 0, 0, 0};
    int64_t stride = 1;
    for (int i = 3; i >= 0; --i) {
      ms[i] = p.mask_dims[i] == 1 ? 0 : static_cast<cl_ulong>(stride);
      stride *= p.mask_dims[i];
    }
    const cl_int flags = (mask != nullptr ? 1 : 0) | (causal_ ? 2 : 0) | (qlocal ? 4 : 0);
    const int64_t rows = p.batch * hq * sq;
    // Rows per launch, and the global scratch they need (none with local scores).
    int64_t per_launch = rows;
    cl_mem scratch = nullptr;
    if (!slocal) {
      per_launch = std::min(rows, std::max<int64_t>(1, kScratchFloats / skv));
      const size_t bytes = static_cast<size_t>(per_launch * skv) * sizeof(float);
      if (scratch_ == nullptr || scratch_->bytes() < bytes || &scratch_->device() != dev.get()) {
        ASSIGN_OR_RETURN(scratch_, NewBuffer(dev, bytes));
      }
      scratch = scratch_->mem();
    }
    const ClApi& cl = dev->cl();
    RETURN_IF_ERROR(SetArgs(*dev, kern, what, 0, qa, ka, va, ma, ya));
    RETURN_IF_ERROR(ClStatus(
        slocal ? cl.clSetKernelArg(kern, 10, std::max<int64_t>(skv, 1) * sizeof(float), nullptr)
               : cl.clSetKernelArg(kern, 10, sizeof(cl_mem), &scratch),
        what));
    RETURN_IF_ERROR(ClStatus(
        cl.clSetKernelArg(kern, 11, std::max<int64_t>(qfloats, 1) * sizeof(float), nullptr), what));
    const auto u32 = [](int64_t n) { return static_cast<cl_uint>(n); };
    RETURN_IF_ERROR(SetArgs(*dev, kern, what, 12, u32(sq), u32(hq), u32(hq / hkv), u32(skv), u32(d),
                            u32(dv), st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8],
                            st[9], st[10], st[11], ms[0], ms[1], ms[2], ms[3], u32(p.mask_dims[3]),
                            flags, Factor(dt, d), softcap_));
    const size_t local = GroupSize(*dev, kern, std::max(skv, dv));
    for (int64_t row0 = 0; row0 < rows; row0 += per_launch) {
      const cl_ulong r0 = static_cast<cl_ulong>(row0);
      RETURN_IF_ERROR(SetArgs(*dev, kern, what, 38, r0));
      const size_t global = static_cast<size_t>(std::min(per_launch, rows - row0)) * local;
      RETURN_IF_ERROR(dev->Enqueue(kern, 1, &global, &local, what));
    }
    return absl::OkStatus();
  }

  // A power of two items, no more than `n` needs, kMaxGroup or the kernel allows.
  static size_t GroupSize(Device& dev, cl_kernel k, int64_t n) {
    size_t max = 0;
    dev.cl().clGetKernelWorkGroupInfo(k, dev.id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max,
                                      nullptr);
    max = std::min(max == 0 ? 1 : max, kMaxGroup);
    size_t l = 1;
    while (l * 2 <= max && static_cast<int64_t>(l) < n) l *= 2;
    return l;
  }

  absl::StatusOr<cl_kernel> Function(const std::shared_ptr<Device>& dev, const std::string& what,
                                     DataType dt, DataType mdt, bool slocal) {
    const char* entry = slocal ? "attn_local" : "attn_global";
    std::unique_ptr<ClFunction>& fn =
        fns_[absl::StrCat(DataTypeOnnxName(dt), "/", DataTypeOnnxName(mdt), "/", entry)];
    if (fn == nullptr) fn = std::make_unique<ClFunction>(what, AttentionSource(dt, mdt), entry);
    return fn->Get(dev);
  }

  const ir::Node& node_;
  bool causal_ = false, has_scale_ = false;
  int64_t q_num_heads_ = 0, kv_num_heads_ = 0;
  float scale_ = 1.0f, softcap_ = 0.0f;
  std::map<std::string, std::unique_ptr<ClFunction>> fns_;
  std::shared_ptr<ClStorage> scratch_;  // scores rows longer than kLocalKeys
};

// Placement asks before it puts a node here: Q, K, V of stored float types, a boolean or
// stored float mask, and nothing the device leaves to the CPU (a KV cache, nonpad_kv_seqlen,
// outputs beyond Y, qk_matmul_output_mode, sliding windows).
bool AttentionSupports(const ir::Node& node) {
  const ir::Value* q = node.input(0);
  if (q == nullptr || !ClFloatType(q->dtype)) return false;
  for (int i = 1; i < 3; ++i) {
    // An absent K or V, or one of another stored type, fails at run time as on the reference.
    if (node.input(i) != nullptr && !ClFloatType(node.input(i)->dtype)) return false;
  }
  if (node.input(3) != nullptr && !IsMaskType(node.input(3)->dtype)) return false;
  for (int i = 4; i < node.num_inputs(); ++i) {
    if (node.input(i) != nullptr) return false;
  }
  for (int i = 1; i < node.num_outputs(); ++i) {
    if (node.outputs[i] != nullptr) return false;
  }
  return node.GetInt("qk_matmul_output_mode", 0) == 0 &&
         node.GetInt("left_window_size", -1) == -1 && node.GetInt("right_window_size", -1) == -1;
}

}  // namespace

void RegisterAttention(Registry& r) {
  KernelDef def{ir::OpType::kAttention,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kOpenCl,
                Isa::kOpenClC,
                &AttentionKernel::Create};
  def.supports = AttentionSupports;
  r.Add(def);
}

}  // namespace kiln::kernels::opencl
