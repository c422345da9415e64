#include "engine/kernels/opencl/row_ops.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::opencl {

const char kGroupFold[] = R"(
#define GROUP_FOLD(NAME, COMB)                                              \
  float NAME(__local float* s, float v) {                                   \
    const uint l = get_local_id(0), n = get_local_size(0);                  \
    s[l] = v;                                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                           \
    for (uint h = 1; h < n; h <<= 1) {                                      \
      if ((l & (2 * h - 1)) == 0 && l + h < n) s[l] = COMB(s[l], s[l + h]); \
      barrier(CLK_LOCAL_MEM_FENCE);                                         \
    }                                                                       \
    const float r = s[0];                                                   \
    barrier(CLK_LOCAL_MEM_FENCE);                                           \
    return r;                                                               \
  }
#define SUM(a, b) ((a) + (b))
inline ulong2 chunk(ulong n) {
  const ulong c = (n + get_local_size(0) - 1) / get_local_size(0);
  const ulong b = min(n, get_local_id(0) * c);
  return (ulong2)(b, min(n, b + c));
}
)";

absl::Status Unsupported(const ir::Node& n, const std::string& why) {
  return absl::UnimplementedError(absl::StrCat(n.Label(), " ", why, " (OpenCL)"));
}

absl::Status CheckStored(const ir::Node& n, DataType dt, const char* what) {
  if (ClFloatType(dt)) return absl::OkStatus();
  return Unsupported(n, absl::StrCat(what, " is ", DataTypeOnnxName(dt), ", not stored here"));
}

absl::Status CheckFp32Stash(const ir::Node& n) {
  const int64_t stash = n.GetInt("stash_type", 1);
  if (!IsFloating(DataTypeFromOnnx(static_cast<int32_t>(stash)))) {
    return cpu::ref::InvalidNode(n, "stash_type ", stash, " is not a float type");
  }
  if (stash != 1) return Unsupported(n, absl::StrCat("runs stash_type 1 only, got ", stash));
  return absl::OkStatus();
}

size_t GroupSize(Device& dev, cl_kernel k, uint64_t n) {
  size_t max = 0;
  dev.cl().clGetKernelWorkGroupInfo(k, dev.id(), CL_KERNEL_WORK_GROUP_SIZE, sizeof(max), &max,
                                    nullptr);
  max = std::min(max == 0 ? 1 : max, kMaxLocal);
  size_t l = 1;
  while (l * 2 <= max && l < n) l *= 2;
  return l;
}

absl::Status LaunchGroups(Device& dev, cl_kernel k, uint64_t groups, size_t local,
                          const std::string& what) {
  if (groups == 0) return absl::OkStatus();
  const size_t global = groups * local;
  return dev.Enqueue(k, 1, &global, &local, what);
}

absl::Status LaunchRows(Device& dev, cl_kernel k, uint64_t rows, uint64_t n,
                        const std::string& what) {
  if (rows == 0 || n == 0) return absl::OkStatus();
  return LaunchGroups(dev, k, rows, GroupSize(dev, k, n), what);
}

std::optional<int64_t> SuffixPeriod(const std::vector<int64_t>& p, const std::vector<int64_t>& x,
                                    int axis) {
  size_t lead = 0;
  while (lead < p.size() && p[lead] == 1) ++lead;
  const size_t m = p.size() - lead;
  if (m > x.size() - axis) return std::nullopt;
  for (size_t i = 0; i < m; ++i) {
    if (p[lead + i] != x[x.size() - m + i]) return std::nullopt;
  }
  return ir::NumElementsOf(p);
}

absl::StatusOr<cl_ulong> ParamPeriod(const ir::Node& node, const ir::Tensor* p,
                                     const std::vector<int64_t>& x_dims, int axis,
                                     const char* name) {
  if (p == nullptr) return cl_ulong{1};
  RETURN_IF_ERROR(CheckStored(node, p->dtype(), name));
  const std::optional<int64_t> per = SuffixPeriod(p->dims(), x_dims, axis);
  if (!per) return Unsupported(node, absl::StrCat("cannot broadcast ", name, " across rows"));
  return static_cast<cl_ulong>(std::max<int64_t>(*per, 1));
}

absl::StatusOr<cl_kernel> Programs::Get(const std::shared_ptr<Device>& dev, const std::string& what,
                                        const std::string& key, const char* entry,
                                        const std::function<std::string()>& source) {
  std::unique_ptr<ClFunction>& fn = fns_[absl::StrCat(key, "/", entry)];
  if (fn == nullptr) fn = std::make_unique<ClFunction>(what, source(), entry);
  return fn->Get(dev);
}

}  // namespace kiln::kernels::opencl
