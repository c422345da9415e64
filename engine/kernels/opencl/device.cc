#include "engine/kernels/opencl/device.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/common/status.h"
#include "engine/kernels/opencl/program_cache.h"

namespace kiln::kernels::opencl {
namespace {

bool ParseIndex(absl::string_view s, int& out) {
  if (s.empty() || s.size() > 6) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

template <typename Get>
std::string InfoString(Get get) {
  size_t size = 0;
  if (get(0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string s(size, '\0');
  if (get(size, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string PlatformString(const ClApi& cl, cl_platform_id p, cl_platform_info what) {
  return InfoString(
      [&](size_t n, void* v, size_t* r) { return cl.clGetPlatformInfo(p, what, n, v, r); });
}
std::string DeviceString(const ClApi& cl, cl_device_id d, cl_device_info what) {
  return InfoString(
      [&](size_t n, void* v, size_t* r) { return cl.clGetDeviceInfo(d, what, n, v, r); });
}
template <typename T>
T DeviceValue(const ClApi& cl, cl_device_id d, cl_device_info what) {
  T v{};
  if (cl.clGetDeviceInfo(d, what, sizeof(v), &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

absl::StatusOr<std::vector<cl_platform_id>> Platforms(const ClApi& cl) {
  cl_uint n = 0;
  const cl_int rc = cl.clGetPlatformIDs(0, nullptr, &n);
  // The ICD loader answers CL_PLATFORM_NOT_FOUND_KHR when no driver is registered.
  if (rc == -1001 || n == 0) return std::vector<cl_platform_id>{};
  RETURN_IF_ERROR(ClStatus(rc, "clGetPlatformIDs"));
  std::vector<cl_platform_id> ps(n);
  RETURN_IF_ERROR(ClStatus(cl.clGetPlatformIDs(n, ps.data(), nullptr), "clGetPlatformIDs"));
  return ps;
}

std::vector<cl_device_id> Devices(const ClApi& cl, cl_platform_id p) {
  cl_uint n = 0;
  if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::vector<cl_device_id> ds(n);
  if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ds.data(), nullptr) != CL_SUCCESS) return {};
  return ds;
}

DeviceInfo Describe(const ClApi& cl, cl_platform_id p, cl_device_id d, int pi, int di) {
  DeviceInfo info;
  info.platform = pi;
  info.device = di;
  info.platform_name = PlatformString(cl, p, CL_PLATFORM_NAME);
  info.platform_vendor = PlatformString(cl, p, CL_PLATFORM_VENDOR);
  info.platform_version = PlatformString(cl, p, CL_PLATFORM_VERSION);
  info.name = DeviceString(cl, d, CL_DEVICE_NAME);
  info.vendor = DeviceString(cl, d, CL_DEVICE_VENDOR);
  info.version = DeviceString(cl, d, CL_DEVICE_VERSION);
  info.driver_version = DeviceString(cl, d, CL_DRIVER_VERSION);
  info.opencl_c_version = DeviceString(cl, d, CL_DEVICE_OPENCL_C_VERSION);
  info.extensions = DeviceString(cl, d, CL_DEVICE_EXTENSIONS);
  const auto type = DeviceValue<cl_device_type>(cl, d, CL_DEVICE_TYPE);
  info.type = type & CL_DEVICE_TYPE_GPU           ? "GPU"
              : type & CL_DEVICE_TYPE_CPU         ? "CPU"
              : type & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                                  : "other";
  const std::vector<absl::string_view> ext = absl::StrSplit(info.extensions, ' ');
  for (absl::string_view e : ext) {
    if (e == "cl_khr_fp16") info.fp16 = true;
    if (e == "cl_khr_subgroups" || e == "cl_intel_subgroups") info.subgroups = true;
  }
  info.compute_units = DeviceValue<cl_uint>(cl, d, CL_DEVICE_MAX_COMPUTE_UNITS);
  info.global_mem_bytes = DeviceValue<cl_ulong>(cl, d, CL_DEVICE_GLOBAL_MEM_SIZE);
  info.local_mem_bytes = DeviceValue<cl_ulong>(cl, d, CL_DEVICE_LOCAL_MEM_SIZE);
  info.max_alloc_bytes = DeviceValue<cl_ulong>(cl, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info.max_work_group_size = DeviceValue<size_t>(cl, d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  return info;
}

struct Found {
  cl_platform_id platform;
  cl_device_id device;
  DeviceInfo info;
};

absl::StatusOr<Found> Find(const DeviceSpec& spec) {
  if (!spec.opencl) return absl::InvalidArgumentError("the CPU is not an OpenCL device");
  ASSIGN_OR_RETURN(const ClApi* cl, Cl());
  ASSIGN_OR_RETURN(const std::vector<cl_platform_id> ps, Platforms(*cl));
  std::vector<std::vector<cl_device_id>> devices;
  std::vector<PlatformEntry> table;
  for (cl_platform_id p : ps) {
    devices.push_back(Devices(*cl, p));
    PlatformEntry& e = table.emplace_back();
    e.name = PlatformString(*cl, p, CL_PLATFORM_NAME);
    for (cl_device_id d : devices.back()) {
      e.devices.push_back(
          {DeviceString(*cl, d, CL_DEVICE_NAME),
           (DeviceValue<cl_device_type>(*cl, d, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0});
    }
  }
  ASSIGN_OR_RETURN(const auto chosen, ChooseDevice(spec, table));
  const auto [pi, di] = chosen;
  return Found{ps[pi], devices[pi][di], Describe(*cl, ps[pi], devices[pi][di], pi, di)};
}

}  // namespace

std::string DeviceSpec::ToString() const {
  if (!opencl) return "cpu";
  std::string s = "opencl";
  if (platform >= 0) absl::StrAppend(&s, ":", platform);
  if (platform >= 0 && device >= 0) absl::StrAppend(&s, ":", device);
  return s;
}

absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad device '", text,
                     "': expected cpu, opencl, opencl:PLATFORM or opencl:PLATFORM:DEVICE "
                     "(indices as `kiln devices` lists them)"));
  };
  DeviceSpec spec;
  if (text == "cpu") return spec;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts[0] != "opencl" || parts.size() > 3) return bad();
  spec.opencl = true;
  if (parts.size() >= 2 && !ParseIndex(parts[1], spec.platform)) return bad();
  if (parts.size() == 3 && !ParseIndex(parts[2], spec.device)) return bad();
  return spec;
}

absl::StatusOr<std::pair<int, int>> ChooseDevice(const DeviceSpec& spec,
                                                 const std::vector<PlatformEntry>& platforms) {
  if (platforms.empty()) {
    return absl::UnavailableError(
        "OpenCL has no platform on this machine: the ICD loader found no driver (install one, "
        "e.g. Debian's pocl-opencl-icd for the CPU, or point OCL_ICD_VENDORS at a folder of "
        ".icd files)");
  }
  const auto first_gpu = [&](int pi) -> int {
    const auto& ds = platforms[pi].devices;
    for (size_t di = 0; di < ds.size(); ++di) {
      if (ds[di].second) return static_cast<int>(di);
    }
    return -1;
  };
  int pi = spec.platform;
  if (pi < 0) {
    pi = 0;
    for (size_t i = 0; i < platforms.size(); ++i) {
      if (first_gpu(static_cast<int>(i)) >= 0) {
        pi = static_cast<int>(i);
        break;
      }
    }
  }
  if (pi >= static_cast<int>(platforms.size())) {
    std::vector<std::string> names;
    for (size_t i = 0; i < platforms.size(); ++i) {
      names.push_back(absl::StrCat(i, " '", platforms[i].name, "'"));
    }
    return absl::NotFoundError(absl::StrCat("no OpenCL platform ", pi, " (device '",
                                            spec.ToString(), "'); this machine has ",
                                            absl::StrJoin(names, ", ")));
  }
  const auto& ds = platforms[pi].devices;
  int di = spec.device;
  if (di < 0) di = std::max(first_gpu(pi), 0);
  if (di >= static_cast<int>(ds.size())) {
    std::vector<std::string> names;
    for (size_t i = 0; i < ds.size(); ++i) names.push_back(absl::StrCat(i, " '", ds[i].first, "'"));
    return absl::NotFoundError(
        absl::StrCat("no OpenCL device ", di, " on platform ", pi, " '", platforms[pi].name,
                     "' (device '", spec.ToString(), "'); it has ",
                     ds.empty() ? std::string("no device") : absl::StrJoin(names, ", ")));
  }
  return std::pair<int, int>{pi, di};
}

std::string DeviceInfo::Describe() const {
  return absl::StrCat(name, " (platform '", platform_name, "', ", version, ", driver ",
                      driver_version, ")");
}

std::string DeviceInfo::Capabilities() const {
  std::vector<std::string> caps;
  if (fp16) caps.push_back("fp16");
  if (subgroups) caps.push_back("subgroups");
  return caps.empty() ? "none" : absl::StrJoin(caps, " ");
}

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  ASSIGN_OR_RETURN(const ClApi* cl, Cl());
  ASSIGN_OR_RETURN(const std::vector<cl_platform_id> ps, Platforms(*cl));
  std::vector<DeviceInfo> out;
  for (size_t pi = 0; pi < ps.size(); ++pi) {
    const std::vector<cl_device_id> ds = Devices(*cl, ps[pi]);
    for (size_t di = 0; di < ds.size(); ++di) {
      out.push_back(Describe(*cl, ps[pi], ds[di], static_cast<int>(pi), static_cast<int>(di)));
    }
  }
  return out;
}

absl::StatusOr<DeviceInfo> ResolveDevice(const DeviceSpec& spec) {
  ASSIGN_OR_RETURN(Found f, Find(spec));
  return std::move(f.info);
}

absl::StatusOr<std::shared_ptr<Device>> Device::Open(const DeviceSpec& spec) {
  ASSIGN_OR_RETURN(Found f, Find(spec));
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::weak_ptr<Device>> open;
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<int, int> key{f.info.platform, f.info.device};
  if (std::shared_ptr<Device> d = open[key].lock()) return d;
  std::shared_ptr<Device> d(new Device());
  d->cl_ = *Cl();
  d->info_ = std::move(f.info);
  d->id_ = f.device;
  const ClApi& cl = *d->cl_;
  cl_int rc = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(f.platform), 0};
  d->context_ = cl.clCreateContext(props, 1, &d->id_, nullptr, nullptr, &rc);
  RETURN_IF_ERROR(ClStatus(rc, absl::StrCat("creating a context on ", d->info_.Describe())));
  const char* profile = std::getenv("KILN_OPENCL_PROFILE");
  d->profiling_ = profile != nullptr && std::string(profile) == "1";
  d->queue_ = cl.clCreateCommandQueue(d->context_, d->id_,
                                      d->profiling_ ? CL_QUEUE_PROFILING_ENABLE : 0, &rc);
  RETURN_IF_ERROR(ClStatus(rc, absl::StrCat("creating a command queue on ", d->info_.Describe())));
  open[key] = d;
  return d;
}

absl::Status Device::Enqueue(cl_kernel k, cl_uint dims, const size_t* global, const size_t* local,
                             const std::string& what) {
  cl_event event = nullptr;
  const cl_int rc = cl_->clEnqueueNDRangeKernel(queue_, k, dims, nullptr, global, local, 0, nullptr,
                                                profiling_ ? &event : nullptr);
  if (rc != CL_SUCCESS) return ClStatus(rc, absl::StrCat("queueing ", what));
  if (event != nullptr) {
    char name[128] = {0};
    cl_->clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof(name) - 1, name, nullptr);
    std::lock_guard<std::mutex> lock(profile_mu_);
    launches_.push_back({name, event});
    if (launches_.size() >= 4096) CollectProfile();
  }
  return absl::OkStatus();
}

void Device::CollectProfile() {
  if (launches_.empty()) return;
  cl_->clFinish(queue_);
  for (const auto& [name, event] : launches_) {
    cl_ulong start = 0, end = 0;
    cl_->clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
    cl_->clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
    cl_->clReleaseEvent(event);
    ProfileEntry& e = profile_[name];
    ++e.launches;
    e.ms += end > start ? (end - start) * 1e-6 : 0.0;
    first_start_ = std::min(first_start_, start);
    last_end_ = std::max(last_end_, end);
  }
  launches_.clear();
}

Device::~Device() {
  if (cl_ == nullptr) return;
  if (profiling_) {
    std::lock_guard<std::mutex> lock(profile_mu_);
    CollectProfile();
    std::vector<std::pair<std::string, ProfileEntry>> rows(profile_.begin(), profile_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double busy = 0;
    for (const auto& [name, e] : rows) busy += e.ms;
    std::fprintf(stderr, "OpenCL profile of %s: %.3f ms of kernels in a span of %.3f ms\n",
                 info_.Describe().c_str(), busy,
                 last_end_ > first_start_ ? (last_end_ - first_start_) * 1e-6 : 0.0);
    std::fprintf(stderr, "  %-40s %10s %8s %10s\n", "kernel function", "ms", "launches", "us each");
    for (const auto& [name, e] : rows) {
      std::fprintf(stderr, "  %-40s %10.3f %8d %10.2f\n", name.c_str(), e.ms, e.launches,
                   1e3 * e.ms / e.launches);
    }
  }
  for (auto& [key, program] : programs_) cl_->clReleaseProgram(program);
  if (queue_ != nullptr) cl_->clReleaseCommandQueue(queue_);
  if (context_ != nullptr) cl_->clReleaseContext(context_);
}

absl::StatusOr<cl_program> Device::Program(const std::string& what, const std::string& source,
                                           const std::string& options) {
  const std::string key = ProgramCache::Key(source, options, info_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;
  ProgramCache& cache = ProgramCache::Default();
  cl_program program = nullptr;
  // A cached binary first; a missing, corrupt or refused one is rebuilt from the source.
  if (absl::StatusOr<std::string> bin = cache.Load(key); bin.ok()) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(bin->data());
    const size_t size = bin->size();
    cl_int status = CL_SUCCESS, rc = CL_SUCCESS;
    program = cl_->clCreateProgramWithBinary(context_, 1, &id_, &size, &bytes, &status, &rc);
    if (rc != CL_SUCCESS || status != CL_SUCCESS ||
        cl_->clBuildProgram(program, 1, &id_, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
      if (program != nullptr) cl_->clReleaseProgram(program);
      program = nullptr;
    }
  }
  if (program == nullptr) {
    ASSIGN_OR_RETURN(program, BuildProgram(what, source, options));
    size_t size = 0;
    if (cl_->clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) ==
            CL_SUCCESS &&
        size > 0) {
      std::string bin(size, '\0');
      unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
      if (cl_->clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) ==
          CL_SUCCESS) {
        // A cache that cannot be written costs the next process a compile, nothing more.
        (void)cache.Store(key, bin);
      }
    }
  }
  programs_.emplace(key, program);
  return program;
}

absl::StatusOr<cl_program> Device::BuildProgram(const std::string& what, const std::string& source,
                                                const std::string& options) {
  const char* text = source.c_str();
  const size_t len = source.size();
  cl_int rc = CL_SUCCESS;
  cl_program program = cl_->clCreateProgramWithSource(context_, 1, &text, &len, &rc);
  RETURN_IF_ERROR(ClStatus(rc, absl::StrCat("creating the OpenCL program of ", what)));
  rc = cl_->clBuildProgram(program, 1, &id_, options.c_str(), nullptr, nullptr);
  if (rc != CL_SUCCESS) {
    std::string log = InfoString([&](size_t n, void* v, size_t* r) {
      return cl_->clGetProgramBuildInfo(program, id_, CL_PROGRAM_BUILD_LOG, n, v, r);
    });
    cl_->clReleaseProgram(program);
    if (log.size() > 4000) log = log.substr(0, 4000) + "\n...";
    return absl::InvalidArgumentError(
        absl::StrCat("the OpenCL program of ", what, " does not compile on ", info_.Describe(),
                     " (options '", options, "'): ", ClErrorName(rc), "\n", log));
  }
  return program;
}

}  // namespace kiln::kernels::opencl
