// Devices other than the CPU, as the builder, the session and the tools see them: backend-neutral
// (no OpenCL header). kernels/opencl implements it when Kiln is built with KILN_WITH_OPENCL; a
// build without it answers every call with a clear Unimplemented.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/tensor.h"

namespace kiln::kernels {

/// What a session needs of a device: its memory and the copies to and from it.
class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  /// "NVIDIA H200 (OpenCL platform 'NVIDIA CUDA')".
  virtual std::string Name() const = 0;
  /// A device tensor of `dims` from buffers kept between runs (contents undefined: kernels
  /// write every element).
  virtual absl::StatusOr<ir::Tensor> Allocate(DataType dtype, std::vector<int64_t> dims) = 0;
  /// A device copy of host tensor `host`.
  virtual absl::StatusOr<ir::Tensor> Upload(const ir::Tensor& host) = 0;
  /// Copies device tensor `device` into host tensor `host` (same dtype and element count),
  /// after the work queued before it: the point where a device error surfaces.
  virtual absl::Status Download(const ir::Tensor& device, ir::Tensor& host) = 0;
};

/// A device as a build targets it and an engine records it.
struct DeviceDescription {
  bool opencl = false;
  int platform = -1, device = -1;  // indices on the machine where it was found
  std::string platform_name, platform_version;
  std::string name, vendor, version, driver_version, opencl_c_version, type;
  std::vector<std::string> capabilities;  // "fp16", "subgroups"
  uint32_t compute_units = 0;
  uint64_t global_mem_bytes = 0;
  /// "opencl:0:1" ("cpu" for the CPU).
  std::string Spec() const;
  /// "NVIDIA H200 (OpenCL platform 'NVIDIA CUDA', driver 550.54)".
  std::string Describe() const;
};

/// Whether this Kiln has the OpenCL backend (KILN_WITH_OPENCL).
bool OpenClBuilt();

/// Every OpenCL device of this machine: Unimplemented without the backend, Unavailable without
/// OpenCL (the message says what to install); empty without any platform.
absl::StatusOr<std::vector<DeviceDescription>> ListOpenClDevices();

/// The device `spec` names on this machine: "cpu", "opencl", "opencl:P", "opencl:P:D"
/// (InvalidArgument for other text; NotFound naming what exists for a missing index).
absl::StatusOr<DeviceDescription> DescribeDevice(absl::string_view spec);

/// The devices of a machine as listed once (kiln-server lists them in a child process, so that no
/// vendor driver is loaded into the server).
struct MachineDevices {
  std::vector<DeviceDescription> opencl;  // every OpenCL device, in index order
  absl::Status status;                    // why listing failed (then `opencl` is empty)
};

/// DescribeDevice over a list made before: the same choice of the default platform and device,
/// and the same errors (the listing's own error when it failed).
absl::StatusOr<DeviceDescription> ResolveDeviceIn(absl::string_view spec,
                                                  const MachineDevices& devices);

/// Opens for a session the device of this machine that an engine was built for: the same
/// platform and device names, at the recorded indices or else the first such. FailedPrecondition
/// naming it and listing this machine's devices when none matches.
absl::StatusOr<std::shared_ptr<DeviceRuntime>> OpenDeviceRuntime(
    const DeviceDescription& built_for);

}  // namespace kiln::kernels
