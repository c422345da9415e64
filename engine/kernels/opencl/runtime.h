// The OpenCL backend's device memory: tensors in cl_mem buffers, kept in a per-session pool, and
// the copies to and from the host (kernels::DeviceRuntime).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/tensor.h"
#include "engine/kernels/device.h"
#include "engine/kernels/opencl/device.h"

namespace kiln::kernels::opencl {

/// One cl_mem buffer of a device (released with the last tensor or pool that holds it).
class ClStorage final : public ir::DeviceStorage {
 public:
  ClStorage(std::shared_ptr<Device> device, cl_mem mem, size_t bytes)
      : device_(std::move(device)), mem_(mem), bytes_(bytes) {}
  ~ClStorage() override;
  std::string DeviceName() const override;
  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& shared_device() const { return device_; }
  cl_mem mem() const { return mem_; }
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<Device> device_;
  cl_mem mem_;
  size_t bytes_;
};

/// The OpenCL storage of device tensor `t`: Internal (naming `what`) for a host tensor or
/// another device's.
absl::StatusOr<const ClStorage*> StorageOf(const ir::Tensor& t, const std::string& what);

/// A fresh buffer of `bytes` (at least 64) on `device`.
absl::StatusOr<std::shared_ptr<ClStorage>> NewBuffer(const std::shared_ptr<Device>& device,
                                                     size_t bytes);

/// The session side of a device: a pool of buffers (a free one of a fitting size is reused, as
/// runtime::BufferPool does for host memory) and blocking copies on the device's queue.
std::shared_ptr<DeviceRuntime> MakeRuntime(std::shared_ptr<Device> device);

/// The backend-neutral description of `info`.
DeviceDescription Description(const DeviceInfo& info);

}  // namespace kiln::kernels::opencl
