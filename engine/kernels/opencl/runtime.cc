#include "engine/kernels/opencl/runtime.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/common/status.h"

namespace kiln::kernels::opencl {

ClStorage::~ClStorage() {
  if (mem_ != nullptr) device_->cl().clReleaseMemObject(mem_);
}

std::string ClStorage::DeviceName() const {
  return absl::StrCat(device_->info().name, " (OpenCL)");
}

absl::StatusOr<const ClStorage*> StorageOf(const ir::Tensor& t, const std::string& what) {
  const auto* s = dynamic_cast<const ClStorage*>(t.device_storage());
  if (s == nullptr) {
    return absl::InternalError(absl::StrCat(what, " is not on an OpenCL device (",
                                            t.on_device() ? "another device" : "host memory", ")"));
  }
  return s;
}

absl::StatusOr<std::shared_ptr<ClStorage>> NewBuffer(const std::shared_ptr<Device>& device,
                                                     size_t bytes) {
  bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (bytes > device->info().max_alloc_bytes && device->info().max_alloc_bytes > 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a tensor of ", bytes, " bytes is larger than ", device->info().name,
                     " allocates at once (", device->info().max_alloc_bytes, " bytes)"));
  }
  cl_int rc = CL_SUCCESS;
  cl_mem mem =
      device->cl().clCreateBuffer(device->context(), CL_MEM_READ_WRITE, bytes, nullptr, &rc);
  RETURN_IF_ERROR(
      ClStatus(rc, absl::StrCat("allocating ", bytes, " bytes on ", device->info().name)));
  return std::make_shared<ClStorage>(device, mem, bytes);
}

namespace {

class ClRuntime final : public DeviceRuntime {
 public:
  explicit ClRuntime(std::shared_ptr<Device> device) : device_(std::move(device)) {}

  std::string Name() const override {
    return absl::StrCat(device_->info().name, " (OpenCL platform '", device_->info().platform_name,
                        "')");
  }

  absl::StatusOr<ir::Tensor> Allocate(DataType dtype, std::vector<int64_t> dims) override {
    const int64_t n = ir::NumElementsOf(dims);
    const size_t esize = DataTypeSize(dtype);
    if (n < 0 || esize == 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / esize) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot make a device tensor of ", DataTypeOnnxName(dtype), " ", ir::DimsToString(dims)));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<ClStorage> buf, Take(static_cast<size_t>(n) * esize));
    return ir::Tensor::OnDevice(dtype, std::move(dims), std::move(buf));
  }

  absl::StatusOr<ir::Tensor> Upload(const ir::Tensor& host) override {
    if (host.on_device() || host.kind() != ir::TensorKind::kDense) {
      return absl::InternalError("only a dense host tensor is uploaded");
    }
    ASSIGN_OR_RETURN(ir::Tensor t, Allocate(host.dtype(), host.dims()));
    if (host.byte_size() > 0) {
      ASSIGN_OR_RETURN(const ClStorage* s, StorageOf(t, "the upload"));
      // Blocking: the host tensor may be an arena slot that the next CPU kernel overwrites.
      RETURN_IF_ERROR(
          ClStatus(device_->cl().clEnqueueWriteBuffer(device_->queue(), s->mem(), CL_TRUE, 0,
                                                      host.byte_size(), host.raw_data(), 0, nullptr,
                                                      nullptr),
                   absl::StrCat("copying ", host.byte_size(), " bytes to ", device_->info().name)));
    }
    return t;
  }

  absl::Status Download(const ir::Tensor& device, ir::Tensor& host) override {
    ASSIGN_OR_RETURN(const ClStorage* s, StorageOf(device, "the download"));
    if (host.on_device() || host.byte_size() != device.byte_size()) {
      return absl::InternalError("a download needs a host tensor of the device tensor's size");
    }
    if (device.byte_size() == 0) return absl::OkStatus();
    return ClStatus(device_->cl().clEnqueueReadBuffer(device_->queue(), s->mem(), CL_TRUE,
                                                      device.device_offset(), device.byte_size(),
                                                      host.raw_data(), 0, nullptr, nullptr),
                    absl::StrCat("copying ", device.byte_size(), " bytes from ",
                                 device_->info().name, " (or a kernel queued before it)"));
  }

 private:
  struct Block {
    std::shared_ptr<ClStorage> buf;
  };

  // A free buffer (only the pool holds it) of at least `bytes` wasting at most half, else a new
  // one.
  absl::StatusOr<std::shared_ptr<ClStorage>> Take(size_t bytes) {
    const size_t need = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    std::shared_ptr<ClStorage>* best = nullptr;
    for (std::shared_ptr<ClStorage>& b : blocks_) {
      if (b.use_count() == 1 && b->bytes() >= need && b->bytes() / 2 <= need &&
          (best == nullptr || b->bytes() < (*best)->bytes())) {
        best = &b;
      }
    }
    if (best != nullptr) return *best;
    ASSIGN_OR_RETURN(std::shared_ptr<ClStorage> buf, NewBuffer(device_, need));
    blocks_.push_back(buf);
    return buf;
  }

  std::shared_ptr<Device> device_;
  std::vector<std::shared_ptr<ClStorage>> blocks_;
};

}  // namespace

std::shared_ptr<DeviceRuntime> MakeRuntime(std::shared_ptr<Device> device) {
  return std::make_shared<ClRuntime>(std::move(device));
}

DeviceDescription Description(const DeviceInfo& info) {
  DeviceDescription d;
  d.opencl = true;
  d.platform = info.platform;
  d.device = info.device;
  d.platform_name = info.platform_name;
  d.platform_version = info.platform_version;
  d.name = info.name;
  d.vendor = info.vendor;
  d.version = info.version;
  d.driver_version = info.driver_version;
  d.opencl_c_version = info.opencl_c_version;
  d.type = info.type;
  if (info.fp16) d.capabilities.push_back("fp16");
  if (info.subgroups) d.capabilities.push_back("subgroups");
  d.compute_units = info.compute_units;
  d.global_mem_bytes = info.global_mem_bytes;
  return d;
}

}  // namespace kiln::kernels::opencl
