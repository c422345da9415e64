// OpenCL devices: what `--device opencl[:PLATFORM[:DEVICE]]` names, what the machine has, and an
// opened device (context, queue, programs built once and cached on disk).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/kernels/opencl/cl_api.h"

namespace kiln::kernels::opencl {

/// A build or run target: the CPU, or an OpenCL device by platform and device index (-1: the
/// default, see Device::Open).
struct DeviceSpec {
  bool opencl = false;
  int platform = -1;
  int device = -1;
  /// "cpu", "opencl", "opencl:1", "opencl:1:0".
  std::string ToString() const;
};

/// Parses "cpu", "opencl", "opencl:P" or "opencl:P:D" (P, D decimal indices as `kiln devices`
/// lists them); InvalidArgument naming the text otherwise.
absl::StatusOr<DeviceSpec> ParseDeviceSpec(absl::string_view text);

/// One platform of a machine as the choice of a device sees it: its name, and each device's name
/// and whether it is a GPU.
struct PlatformEntry {
  std::string name;
  std::vector<std::pair<std::string, bool>> devices;
};

/// The (platform, device) indices that `spec` (opencl set) names among `platforms`. Default
/// platform: the first with a GPU, else platform 0; default device: its first GPU, else its
/// device 0. Unavailable without any platform; NotFound naming what exists for a missing index.
absl::StatusOr<std::pair<int, int>> ChooseDevice(const DeviceSpec& spec,
                                                 const std::vector<PlatformEntry>& platforms);

/// What an OpenCL device is and can do.
struct DeviceInfo {
  int platform = 0, device = 0;  // indices, as DeviceSpec names them
  std::string platform_name, platform_vendor, platform_version;
  std::string name, vendor, version, driver_version, opencl_c_version;
  std::string type;  // "GPU", "CPU", "accelerator", "other"
  std::string extensions;
  /// Capabilities (never requirements): cl_khr_fp16 half arithmetic, sub-groups.
  bool fp16 = false;
  bool subgroups = false;
  uint32_t compute_units = 0;
  uint64_t global_mem_bytes = 0, local_mem_bytes = 0, max_alloc_bytes = 0;
  uint64_t max_work_group_size = 0;
  /// "NVIDIA H200 (platform 'NVIDIA CUDA', OpenCL 3.0 CUDA, driver 550.54)".
  std::string Describe() const;
  /// "fp16 subgroups" (space-separated capabilities held; "none" without any).
  std::string Capabilities() const;
};

/// Every OpenCL device of every platform, in index order. Unavailable when OpenCL cannot be
/// loaded (Cl()); an empty list when the loader finds no platform.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

/// The info of the device `spec` names, chosen as Device::Open chooses it, without opening it.
absl::StatusOr<DeviceInfo> ResolveDevice(const DeviceSpec& spec);

/// An opened OpenCL device, shared by every session and build of the process that opens the same
/// indices. Thread-safe.
class Device {
 public:
  /// Opens the device `spec` names (spec.opencl must be set). Default platform: the first with a
  /// GPU, else platform 0; default device: its first GPU, else its device 0. Errors name what
  /// is missing: OpenCL itself, any platform, the platform or device index (with what exists).
  static absl::StatusOr<std::shared_ptr<Device>> Open(const DeviceSpec& spec);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const ClApi& cl() const { return *cl_; }
  cl_context context() const { return context_; }
  cl_device_id id() const { return id_; }
  /// The device's in-order command queue.
  cl_command_queue queue() const { return queue_; }

  /// The program of `source` built with `options`: built once per process, and its binary
  /// cached on disk (ProgramCache) so later processes load it. A build failure is
  /// InvalidArgument with the compiler's log, naming `what` (the kernel it is for).
  absl::StatusOr<cl_program> Program(const std::string& what, const std::string& source,
                                     const std::string& options);

  /// Queues `k` over `global` work items (`dims` dimensions) in groups of `local`. Errors name
  /// `what`. With KILN_OPENCL_PROFILE=1 in the environment at Open, the queue keeps each launch's
  /// device time, and the device prints the times by kernel function to stderr when it closes.
  absl::Status Enqueue(cl_kernel k, cl_uint dims, const size_t* global, const size_t* local,
                       const std::string& what);

 private:
  struct ProfileEntry {
    int launches = 0;
    double ms = 0;
  };
  // Adds the times of the finished launches to profile_ (profile_mu_ held).
  void CollectProfile();
  Device() = default;
  absl::StatusOr<cl_program> BuildProgram(const std::string& what, const std::string& source,
                                          const std::string& options);

  const ClApi* cl_ = nullptr;
  DeviceInfo info_;
  cl_device_id id_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::mutex mu_;
  std::map<std::string, cl_program> programs_;  // by cache key
  bool profiling_ = false;
  std::mutex profile_mu_;
  std::vector<std::pair<std::string, cl_event>> launches_;  // not yet collected
  std::map<std::string, ProfileEntry> profile_;             // by kernel function
  cl_ulong first_start_ = ~cl_ulong{0}, last_end_ = 0;
};

}  // namespace kiln::kernels::opencl
