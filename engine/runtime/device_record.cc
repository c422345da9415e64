#include "engine/runtime/device_record.h"

namespace kiln::runtime {

void RecordDevice(const kernels::DeviceDescription& d, v1::Device& out) {
  out.set_kind(d.opencl ? "opencl" : "cpu");
  if (!d.opencl) return;
  out.set_platform(d.platform);
  out.set_device(d.device);
  out.set_platform_name(d.platform_name);
  out.set_platform_version(d.platform_version);
  out.set_name(d.name);
  out.set_vendor(d.vendor);
  out.set_version(d.version);
  out.set_driver_version(d.driver_version);
  out.set_opencl_c_version(d.opencl_c_version);
  out.set_type(d.type);
  out.clear_capabilities();
  for (const std::string& c : d.capabilities) out.add_capabilities(c);
  out.set_compute_units(d.compute_units);
  out.set_global_mem_bytes(d.global_mem_bytes);
}

kernels::DeviceDescription DeviceOfRecord(const v1::Device& r) {
  kernels::DeviceDescription d;
  d.opencl = r.kind() == "opencl";
  if (!d.opencl) return d;
  d.platform = r.platform();
  d.device = r.device();
  d.platform_name = r.platform_name();
  d.platform_version = r.platform_version();
  d.name = r.name();
  d.vendor = r.vendor();
  d.version = r.version();
  d.driver_version = r.driver_version();
  d.opencl_c_version = r.opencl_c_version();
  d.type = r.type();
  d.capabilities.assign(r.capabilities().begin(), r.capabilities().end());
  d.compute_units = r.compute_units();
  d.global_mem_bytes = r.global_mem_bytes();
  return d;
}

}  // namespace kiln::runtime
