#include "engine/kernels/opencl/kernel_base.h"

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

const char* GemmTileLoop() {
  return R"(
  __local float As[16][65];
  __local float Bs[16][65];
  const int tx = get_local_id(0), ty = get_local_id(1);
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  const int lid = ty * 16 + tx;
  for (uint k0 = 0; k0 < K; k0 += 16) {
    for (int l = 0; l < 4; ++l) {
      const int idx = lid + l * 256;
      const int kk = idx / 64, ii = idx % 64;
      const uint k = k0 + kk, ra = row0 + ii, cb = col0 + ii;
      As[kk][ii] = ra < M && k < K ? A_AT(ra, k) : 0.0f;
      Bs[kk][ii] = cb < N && k < K ? B_AT(k, cb) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Only the k < K steps: a product of padding would turn an accumulated -0 into +0.
    const int kn = K - k0 < 16 ? (int)(K - k0) : 16;
    for (int kk = 0; kk < kn; ++kk) {
      float a[4], b[4];
      for (int w = 0; w < 4; ++w) {
        a[w] = As[kk][ty + 16 * w];
        b[w] = Bs[kk][tx + 16 * w];
      }
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
)";
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

absl::Status Launch1D(Device& device, cl_kernel k, uint64_t n, const std::string& what) {
  if (n == 0) return absl::OkStatus();
  size_t local = 0;
  device.cl().clGetKernelWorkGroupInfo(k, device.id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(local),
                                       &local, nullptr);
  local = std::min<size_t>(local == 0 ? 64 : local, 256);
  const size_t global = (n + local - 1) / local * local;
  return ClStatus(device.cl().clEnqueueNDRangeKernel(device.queue(), k, 1, nullptr, &global, &local,
                                                     0, nullptr, nullptr),
                  absl::StrCat("queueing ", what));
}

}  // namespace kiln::kernels::opencl
