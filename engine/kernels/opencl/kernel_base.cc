#include "engine/kernels/opencl/kernel_base.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/common/status.h"

namespace kiln::kernels::opencl {

bool ClFloatType(DataType dt) {
  return dt == DataType::kF32 || dt == DataType::kF16 || dt == DataType::kBF16;
}

std::string StoragePrelude(DataType dt, const std::string& prefix) {
  std::string s;
  switch (dt) {
    case DataType::kF16:
      s = "typedef half $_T;\n"
          "#define $_LD(p, i) vload_half((i), (p))\n"
          "#define $_ST(v, p, i) vstore_half((v), (i), (p))\n";
      break;
    case DataType::kBF16:
      s = "typedef ushort $_T;\n"
          "#define $_LD(p, i) as_float((uint)(p)[i] << 16)\n"
          "#define $_ST(v, p, i) ((p)[i] = kiln_bf16(v))\n";
      break;
    default:
      s = "typedef float $_T;\n"
          "#define $_LD(p, i) ((p)[i])\n"
          "#define $_ST(v, p, i) ((p)[i] = (v))\n";
      break;
  }
  s = absl::StrReplaceAll(s, {{"$", prefix}});
  // Shared helpers, guarded so that several preludes can share one program.
  absl::StrAppend(&s,
                  "#ifndef KILN_HELPERS\n#define KILN_HELPERS\n"
                  // Every rounding step as written, never a fused multiply-add the compiler
                  // chose (the CPU kernels' arithmetic; fma() where a kernel means one).
                  "#pragma OPENCL FP_CONTRACT OFF\n"
                  // Round to nearest even; a NaN stays a quiet NaN (engine/common/half.h).
                  "inline ushort kiln_bf16(float f) {\n"
                  "  uint u = as_uint(f);\n"
                  "  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);\n"
                  "  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
                  "}\n"
                  // tanh where its value rounds to +-1 in fp32 (|u| >= 10: 1 - 4e-9) is exactly
                  // +-1: the built-in may miss it by ulps, which 1 + tanh(u) turns into a
                  // nonzero GELU of a large negative input (and an infinite one of -inf).
                  "inline float kiln_tanh(float u) {\n"
                  "  return fabs(u) >= 10.0f ? copysign(1.0f, u) : tanh(u);\n"
                  "}\n"
                  "#define MAXP(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))\n"
                  "#define MINP(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))\n"
                  "#endif\n");
  return s;
}

std::string ActivationFunction(cpu::ref::ActKind kind) {
  using cpu::ref::ActKind;
  const auto unary = [](ir::OpType op) { return std::string(UnaryExpression(op)); };
  std::string expr = "x";
  switch (kind) {
    case ActKind::kNone:
      break;
    case ActKind::kRelu:
      expr = unary(ir::OpType::kRelu);
      break;
    case ActKind::kLeakyRelu:
      expr = unary(ir::OpType::kLeakyRelu);
      break;
    case ActKind::kClip:  // ew::ClipFn: r = v < lo ? lo : v; r > hi ? hi : r (NaN passes)
      expr = "(x < p0 ? p0 : x) > p1 ? p1 : (x < p0 ? p0 : x)";
      break;
    case ActKind::kHardSwish:
      expr = unary(ir::OpType::kHardSwish);
      break;
    case ActKind::kSigmoid:
      expr = unary(ir::OpType::kSigmoid);
      break;
    case ActKind::kSwish:  // x * Sigmoid(x), the sigmoid unrounded
      expr = "x * kiln_sigmoid(x)";
      break;
    case ActKind::kTanh:
      expr = unary(ir::OpType::kTanh);
      break;
    case ActKind::kGelu:
    case ActKind::kGeluTanh:  // p0 picks the form, as Gelu's kernel
      expr = unary(ir::OpType::kGelu);
      break;
  }
  return absl::StrCat("inline float kiln_sigmoid(float x) { return ",
                      UnaryExpression(ir::OpType::kSigmoid), "; }\n",
                      "inline float act(float x, float p0, float p1) { return ", expr, "; }\n");
}

void ActivationParams(const cpu::ref::Activation& a, float& p0, float& p1) {
  using cpu::ref::ActKind;
  p0 = a.kind == ActKind::kClip       ? a.lo
       : a.kind == ActKind::kGeluTanh ? 1.0f
       : a.kind == ActKind::kGelu     ? 0.0f
                                      : a.alpha;
  p1 = a.hi;
}

std::string GemmDefines(const GemmTiling& t) {
  return absl::StrCat("#define TPT ", t.per_item, "\n#define TILE ", 16 * t.per_item,
                      "\n#define A_KFAST ", t.a_k_contiguous ? 1 : 0, "\n#define B_KFAST ",
                      t.b_k_contiguous ? 1 : 0, "\n#define KSPLIT ", t.k_split, "\n");
}

std::string GemmPart(const std::string& index) {
  const std::string decl = absl::StrCat("  const ulong ", index, " = ");
  return absl::StrCat("\n#if KSPLIT > 1\n", decl, "get_group_id(2) / KSPLIT;\n",
                      "  const uint kc = get_group_id(2) % KSPLIT;\n",
                      "  const uint kbeg = kc * KC, kend = min(K, kbeg + KC);\n",
                      "#define K_BEGIN kbeg\n#define K_END kend\n#else\n", decl,
                      "get_global_id(2);\n#endif\n");
}

const char* GemmTileLoop() {
  return R"(
  __local float As[16][TILE + 1];
  __local float Bs[16][TILE + 1];
  const int tx = get_local_id(0), ty = get_local_id(1);
  float acc[TPT][TPT];
  for (int i = 0; i < TPT; ++i)
    for (int j = 0; j < TPT; ++j) acc[i][j] = 0.0f;
  const int lid = ty * 16 + tx;
#ifdef GEMM_PRELUDE
  GEMM_PRELUDE
#endif
#ifndef K_BEGIN
#define K_BEGIN 0
#define K_END K
#endif
  for (uint k0 = K_BEGIN; k0 < K_END; k0 += 16) {
#ifdef GEMM_SLICE
    GEMM_SLICE
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    // 16 x TILE values of each operand, TPT per item; neighbouring items read neighbouring
    // addresses (along k for an operand contiguous in k, else along its rows or columns).
    for (int l = 0; l < TPT; ++l) {
      const int idx = lid + l * 256;
#if A_KFAST
      const int akk = idx % 16, aii = idx / 16;
#else
      const int akk = idx / TILE, aii = idx % TILE;
#endif
#if B_KFAST
      const int bkk = idx % 16, bii = idx / 16;
#else
      const int bkk = idx / TILE, bii = idx % TILE;
#endif
      const uint ka = k0 + akk, ra = row0 + aii, kb = k0 + bkk, cb = col0 + bii;
      As[akk][aii] = ra < M && ka < K_END ? A_AT(ra, ka) : 0.0f;
#ifdef B_AT_STAGED
      Bs[bkk][bii] = cb < N && kb < K_END ? B_AT_STAGED(l, bkk) : 0.0f;
#else
      Bs[bkk][bii] = cb < N && kb < K_END ? B_AT(kb, cb) : 0.0f;
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Only the k < K steps: a product of padding would turn an accumulated -0 into +0.
    const int kn = K_END - k0 < 16 ? (int)(K_END - k0) : 16;
    for (int kk = 0; kk < kn; ++kk) {
      float a[TPT], b[TPT];
      for (int w = 0; w < TPT; ++w) {
        a[w] = As[kk][ty + 16 * w];
        b[w] = Bs[kk][tx + 16 * w];
      }
      for (int i = 0; i < TPT; ++i)
        for (int j = 0; j < TPT; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
)";
}

namespace {
std::atomic<int> forced_per_item{0}, forced_k_split{1};
}  // namespace

GemmTiling ChooseGemmTiling(const Device& device, uint64_t m, uint64_t n, uint64_t k,
                            uint64_t batch, bool a_k_contiguous, bool b_k_contiguous,
                            bool may_split_k) {
  GemmTiling t;
  t.a_k_contiguous = a_k_contiguous;
  t.b_k_contiguous = b_k_contiguous;
  if (const int forced = forced_per_item.load(); forced != 0) {
    t.per_item = forced;
    if (may_split_k) t.k_split = SplitK(k, forced_k_split.load());
    return t;
  }
  // The largest tile that still gives every compute unit a work-group: a bigger tile reuses
  // each staged value more (2 * TPT local reads per TPT^2 fma), a smaller one keeps more of the
  // device busy on the small GEMMs of batch-1 inference.
  const uint64_t units = std::max<uint64_t>(device.info().compute_units, 1);
  for (int per_item : {8, 4}) {
    const uint64_t tile = 16 * static_cast<uint64_t>(per_item);
    if ((m + tile - 1) / tile * ((n + tile - 1) / tile) * batch >= units) {
      t.per_item = per_item;
      return t;
    }
  }
  // Fewer 64-wide tiles than compute units (batch-1 inference: a GEMM of 128 rows): the k range
  // split into parts of at least 64, summed by separate work-groups, fills the device with
  // 64-wide tiles; else 32-wide ones.
  const uint64_t tiles = (m + 63) / 64 * ((n + 63) / 64) * batch;
  const uint64_t want = (2 * units + tiles - 1) / tiles;
  if (may_split_k && want >= 2 && k >= 128) {
    t.per_item = 4;
    t.k_split = SplitK(k, static_cast<int>(std::min<uint64_t>({want, k / 64, 32})));
    if (t.k_split > 1) return t;
  }
  t.per_item = 2;
  t.k_split = 1;
  return t;
}

int SplitK(uint64_t k, int parts) {
  if (parts <= 1 || k == 0) return 1;
  const uint64_t chunk = SplitChunk(k, parts);
  return static_cast<int>((k + chunk - 1) / chunk);
}

uint64_t SplitChunk(uint64_t k, int parts) {
  // Whole 16-deep slices per part.
  const uint64_t per = (k + parts - 1) / parts;
  return (per + 15) / 16 * 16;
}

void ForceGemmTileForTesting(int per_item, int k_split) {
  forced_per_item.store(per_item);
  forced_k_split.store(k_split);
}

std::string ProgramOptions(const Device& device) {
  cl_device_fp_config fp = 0;
  device.cl().clGetDeviceInfo(device.id(), CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, nullptr);
  std::string opts = "-cl-std=CL1.2";
  if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) {
    absl::StrAppend(&opts, " -cl-fp32-correctly-rounded-divide-sqrt");
  }
  return opts;
}

ClFunction::~ClFunction() {
  if (kernel_ != nullptr) device_->cl().clReleaseKernel(kernel_);
}

absl::StatusOr<cl_kernel> ClFunction::Get(const std::shared_ptr<Device>& device) {
  if (kernel_ != nullptr && device_ == device) return kernel_;
  if (kernel_ != nullptr) {
    device_->cl().clReleaseKernel(kernel_);
    kernel_ = nullptr;
  }
  ASSIGN_OR_RETURN(cl_program program, device->Program(what_, source_, ProgramOptions(*device)));
  cl_int rc = CL_SUCCESS;
  cl_kernel k = device->cl().clCreateKernel(program, entry_.c_str(), &rc);
  RETURN_IF_ERROR(ClStatus(rc, absl::StrCat("creating kernel '", entry_, "' of ", what_)));
  device_ = device;
  kernel_ = k;
  return k;
}

std::string Label(const ir::Node& n, DataType dt) {
  return absl::StrCat(n.Label(), " (OpenCL ", DataTypeOnnxName(dt), ")");
}

absl::StatusOr<std::shared_ptr<Device>> DeviceOf(const ir::Tensor& y, const std::string& what) {
  ASSIGN_OR_RETURN(const ClStorage* s, StorageOf(y, what));
  return s->shared_device();
}

absl::StatusOr<TensorArg> ArgOf(const ir::Tensor& t, const std::string& what) {
  ASSIGN_OR_RETURN(const ClStorage* s, StorageOf(t, what));
  const size_t esize = DataTypeSize(t.dtype());
  return TensorArg{s->mem(), esize > 0 ? t.device_offset() / esize : 0};
}

absl::Status SetArgs(Device& device, cl_kernel k, const std::string& what, int first,
                     const TensorArg& a) {
  RETURN_IF_ERROR(ClStatus(device.cl().clSetKernelArg(k, first, sizeof(cl_mem), &a.mem), what));
  return ClStatus(device.cl().clSetKernelArg(k, first + 1, sizeof(cl_ulong), &a.offset), what);
}

absl::StatusOr<ir::Tensor> ReadBack(const ir::Tensor& t, const std::string& what) {
  ASSIGN_OR_RETURN(const ClStorage* s, StorageOf(t, what));
  ASSIGN_OR_RETURN(ir::Tensor host, ir::Tensor::AllocateUninitialized(t.dtype(), t.dims()));
  if (t.byte_size() == 0) return host;
  Device& dev = s->device();
  RETURN_IF_ERROR(
      ClStatus(dev.cl().clEnqueueReadBuffer(dev.queue(), s->mem(), CL_TRUE, t.device_offset(),
                                            t.byte_size(), host.raw_data(), 0, nullptr, nullptr),
               absl::StrCat("reading back an input of ", what)));
  return host;
}

absl::Status HostParams::Fetch(const ir::Node& node, const std::vector<int>& params) {
  for (int k : params) {
    const ir::Tensor* t = inner().input(k);
    if (t == nullptr || !t->on_device()) continue;
    const ir::Value* v = node.input(k);
    if (v != nullptr && v->constant && !v->constant->on_device() &&
        v->constant->dtype() == t->dtype() && v->constant->dims() == t->dims()) {
      host_[k] = &*v->constant;
      continue;
    }
    ASSIGN_OR_RETURN(owned_[k], ReadBack(*t, Label(node, t->dtype())));
    host_[k] = &owned_[k];
  }
  return absl::OkStatus();
}

absl::Status Launch1D(Device& device, cl_kernel k, uint64_t n, const std::string& what) {
  if (n == 0) return absl::OkStatus();
  size_t local = 0;
  device.cl().clGetKernelWorkGroupInfo(k, device.id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(local),
                                       &local, nullptr);
  local = std::min<size_t>(local == 0 ? 64 : local, 256);
  const size_t global = (n + local - 1) / local * local;
  return device.Enqueue(k, 1, &global, &local, what);
}

}  // namespace kiln::kernels::opencl
