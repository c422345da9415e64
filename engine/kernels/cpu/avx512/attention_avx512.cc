// Attention on AVX-512 (attention.h). One task is a (batch, head) pair and a block of up to
// kBlock query rows: the task widens its kv head's K into an fp32 K^T tile (head x keys, keys
// padded to 16) and V into an fp32 tile (keys x v_head padded to 16), then for kRows query rows
// at a time computes the scores 16 keys per register (one K^T load feeding kRows FMAs), the
// reference's scale, mask and softmax steps per row, and P V with v_head in registers (up to 64
// columns, kRows rows: 16 accumulators), rounded once into Y.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/kernels/cpu/avx512/attention.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

constexpr int kRows = 4;        // query rows per register tile
constexpr int64_t kBlock = 64;  // query rows per task
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this many multiply-adds the whole run stays on the calling thread.
constexpr int64_t kParallelMacs = int64_t{1} << 17;

int64_t Pad16(int64_t n) { return (n + 15) & ~int64_t{15}; }

void LoadRow(DataType dt, const void* src, int64_t off, float* dst, int64_t n) {
  if (dt == DataType::kF32) {
    std::memcpy(dst, static_cast<const float*>(src) + off, n * sizeof(float));
  } else if (dt == DataType::kF16) {
    HalfToFloat(static_cast<const uint16_t*>(src) + off, dst, n);
  } else {
    Bf16ToFloat(static_cast<const uint16_t*>(src) + off, dst, n);
  }
}

void StoreRow(DataType dt, const float* src, void* dst, int64_t off, int64_t n) {
  if (dt == DataType::kF32) {
    std::memcpy(static_cast<float*>(dst) + off, src, n * sizeof(float));
  } else if (dt == DataType::kF16) {
    FloatToHalf(src, static_cast<uint16_t*>(dst) + off, n);
  } else {
    FloatToBf16(src, static_cast<uint16_t*>(dst) + off, n);
  }
}

// The mask entry at element `i` as the number added to a score.
float MaskAdd(DataType dt, const void* m, int64_t i) {
  switch (dt) {
    case DataType::kF32:
      return static_cast<const float*>(m)[i];
    case DataType::kF16:
      return _cvtsh_ss(static_cast<const uint16_t*>(m)[i]);
    case DataType::kBF16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(m)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return f;
    }
    default:  // kBool
      return static_cast<const uint8_t*>(m)[i] != 0 ? 0.0f : kNegInf;
  }
}

float HorizontalMax(__m512 v) { return _mm512_reduce_max_ps(v); }

// scores[r * tp + j] = q_r . k_j for NR rows and NJ vectors of 16 keys from key j0: NR * NJ
// independent accumulators (the FMA latency hidden), one K^T load feeding NR products.
template <int NR, int NJ>
void ScoresTile(const float* q, int64_t d_len, const float* kt, int64_t tp, int64_t j0, float* s) {
  __m512 acc[NR][NJ];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NJ; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* col = kt + j0;
  for (int64_t d = 0; d < d_len; ++d) {
    __m512 kv[NJ];
    for (int c = 0; c < NJ; ++c) kv[c] = _mm512_loadu_ps(col + d * tp + 16 * c);
    for (int r = 0; r < NR; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * d_len + d]);
      for (int c = 0; c < NJ; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NJ; ++c) _mm512_storeu_ps(s + r * tp + j0 + 16 * c, acc[r][c]);
  }
}

// scores[r * tp + j] = q_r . k_j for NR rows, every padded key.
template <int NR>
void Scores(const float* q, int64_t d_len, const float* kt, int64_t tp, float* s) {
  int64_t j0 = 0;
  for (; j0 + 64 <= tp; j0 += 64) ScoresTile<NR, 4>(q, d_len, kt, tp, j0, s);
  for (; j0 + 32 <= tp; j0 += 32) ScoresTile<NR, 2>(q, d_len, kt, tp, j0, s);
  for (; j0 < tp; j0 += 16) ScoresTile<NR, 1>(q, d_len, kt, tp, j0, s);
}

// y[r * vp + c0 + 16c] = sum_j p_r[j] v[j][c0 + 16c] for NR rows and NC vectors of columns.
template <int NR, int NC>
void Context(const float* p, int64_t tp, int64_t keys, const float* vb, int64_t vp, int64_t c0,
             float* y) {
  __m512 acc[NR][NC];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < keys; ++j) {
    const float* vrow = vb + j * vp + c0;
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(vrow + 16 * c);
    for (int r = 0; r < NR; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r * tp + j]);
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(y + r * vp + c0 + 16 * c, acc[r][c]);
  }
}

template <int NR>
void ContextColumns(const float* p, int64_t tp, int64_t keys, const float* vb, int64_t vp,
                    float* y) {
  for (int64_t c0 = 0; c0 < vp; c0 += 64) {
    switch (std::min<int64_t>(4, (vp - c0) / 16)) {
      case 1:
        Context<NR, 1>(p, tp, keys, vb, vp, c0, y);
        break;
      case 2:
        Context<NR, 2>(p, tp, keys, vb, vp, c0, y);
        break;
      case 3:
        Context<NR, 3>(p, tp, keys, vb, vp, c0, y);
        break;
      default:
        Context<NR, 4>(p, tp, keys, vb, vp, c0, y);
        break;
    }
  }
}

// The reference's steps on one row of scores: times the factor, plus the mask and the causal
// bound, then softmax (a row with every key masked is zero).
void SoftmaxRow(const AttentionArgs& a, float* row, int64_t keys, int64_t b, int64_t h, int64_t i) {
  const __m512 factor = _mm512_set1_ps(a.factor);
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
    _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), factor));
  }
  bool all_masked = false;
  if (a.mask != nullptr && !a.causal && a.mask_dtype == DataType::kF32 && a.mask_strides[3] == 1 &&
      a.mask_keys == keys) {
    // The common form (an additive fp32 row per query or broadcast): 16 keys at a time.
    const float* m = static_cast<const float*>(a.mask) + b * a.mask_strides[0] +
                     h * a.mask_strides[1] + i * a.mask_strides[2];
    const __m512 ninf = _mm512_set1_ps(kNegInf);
    __mmask16 finite = 0;
    for (int64_t j = 0; j < keys; j += 16) {
      const __mmask16 k = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
      const __m512 add = _mm512_maskz_loadu_ps(k, m + j);
      finite |= _mm512_mask_cmp_ps_mask(k, add, ninf, _CMP_NEQ_UQ);
      _mm512_mask_storeu_ps(row + j, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, row + j), add));
    }
    all_masked = keys > 0 && finite == 0;
  } else if (a.mask != nullptr || a.causal) {
    all_masked = keys > 0;
    const int64_t base = b * a.mask_strides[0] + h * a.mask_strides[1] + i * a.mask_strides[2];
    for (int64_t j = 0; j < keys; ++j) {
      float add = 0;
      if (a.mask != nullptr) {
        add =
            j < a.mask_keys ? MaskAdd(a.mask_dtype, a.mask, base + j * a.mask_strides[3]) : kNegInf;
      }
      if (a.causal && j > i) add += kNegInf;
      all_masked = all_masked && add == kNegInf;
      row[j] += add;
    }
  }
  __m512 vmax = _mm512_set1_ps(kNegInf);
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, row + j));
  }
  const float mx = HorizontalMax(vmax);
  if (all_masked || mx == kNegInf) {
    std::fill(row, row + keys, 0.0f);
    return;
  }
  const __m512 vmx = _mm512_set1_ps(mx);
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
    _mm512_mask_storeu_ps(row + j, m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), vmx));
  }
  ExpF32(row, row, keys);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_loadu_ps(m, row + j));
  }
  const __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(vsum));
  for (int64_t j = 0; j < keys; j += 16) {
    const __mmask16 m = keys - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (keys - j)) - 1);
    _mm512_mask_storeu_ps(row + j, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, row + j), sum));
  }
}

struct Scratch {
  std::vector<float> kt, vb, q, s, y, row;
};

// Element offsets of row `i` of head `h` of batch `b` in a Q/K/V/Y tensor of `heads` heads,
// `len` rows and `width` values per head.
int64_t RowOffset(bool three_d, int64_t b, int64_t h, int64_t i, int64_t heads, int64_t len,
                  int64_t width) {
  return three_d ? ((b * len + i) * heads + h) * width : ((b * heads + h) * len + i) * width;
}

void Task(const AttentionArgs& a, int64_t b, int64_t h, int64_t i0, int64_t i1, Scratch& w) {
  const int64_t hk = h / (a.q_heads / a.kv_heads);
  const int64_t keys = a.kv_len, d_len = a.head, dv = a.v_head;
  const int64_t tp = Pad16(keys), vp = Pad16(dv);
  w.row.resize(std::max(d_len, int64_t{1}));
  w.kt.assign(d_len * tp, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    LoadRow(a.dtype, a.k, RowOffset(a.three_d, b, hk, j, a.kv_heads, a.kv_len, d_len), w.row.data(),
            d_len);
    for (int64_t d = 0; d < d_len; ++d) w.kt[d * tp + j] = w.row[d];
  }
  w.vb.assign(keys * vp, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    LoadRow(a.dtype, a.v, RowOffset(a.three_d, b, hk, j, a.kv_heads, a.kv_len, dv),
            w.vb.data() + j * vp, dv);
  }
  w.q.resize(kRows * d_len);
  w.s.resize(kRows * tp);
  w.y.resize(kRows * vp);
  for (int64_t i = i0; i < i1; i += kRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kRows, i1 - i));
    for (int r = 0; r < nr; ++r) {
      LoadRow(a.dtype, a.q, RowOffset(a.three_d, b, h, i + r, a.q_heads, a.q_len, d_len),
              w.q.data() + r * d_len, d_len);
    }
    switch (nr) {
      case 1:
        Scores<1>(w.q.data(), d_len, w.kt.data(), tp, w.s.data());
        break;
      case 2:
        Scores<2>(w.q.data(), d_len, w.kt.data(), tp, w.s.data());
        break;
      case 3:
        Scores<3>(w.q.data(), d_len, w.kt.data(), tp, w.s.data());
        break;
      default:
        Scores<4>(w.q.data(), d_len, w.kt.data(), tp, w.s.data());
        break;
    }
    for (int r = 0; r < nr; ++r) SoftmaxRow(a, w.s.data() + r * tp, keys, b, h, i + r);
    switch (nr) {
      case 1:
        ContextColumns<1>(w.s.data(), tp, keys, w.vb.data(), vp, w.y.data());
        break;
      case 2:
        ContextColumns<2>(w.s.data(), tp, keys, w.vb.data(), vp, w.y.data());
        break;
      case 3:
        ContextColumns<3>(w.s.data(), tp, keys, w.vb.data(), vp, w.y.data());
        break;
      default:
        ContextColumns<4>(w.s.data(), tp, keys, w.vb.data(), vp, w.y.data());
        break;
    }
    for (int r = 0; r < nr; ++r) {
      StoreRow(a.dtype, w.y.data() + r * vp, a.y,
               RowOffset(a.three_d, b, h, i + r, a.q_heads, a.q_len, dv), dv);
    }
  }
}

}  // namespace

void Attention(const AttentionArgs& a) {
  const int64_t blocks = (a.q_len + kBlock - 1) / kBlock;
  const int64_t tasks = a.batch * a.q_heads * blocks;
  if (tasks == 0) return;
  const int64_t macs = a.batch * a.q_heads * a.q_len * a.kv_len * (a.head + a.v_head);
  const bool parallel = macs >= kParallelMacs && tasks > 1 && omp_get_max_threads() > 1;
  ParallelFor(tasks, parallel, [&](int64_t t_begin, int64_t t_end) {
    // Each thread's, kept from one call to the next (its buffers grow to the largest task).
    thread_local Scratch w;
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t blk = t % blocks, bh = t / blocks;
      const int64_t i0 = blk * kBlock;
      Task(a, bh / a.q_heads, bh % a.q_heads, i0, std::min(a.q_len, i0 + kBlock), w);
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
