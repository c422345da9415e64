#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/kernels/device.h"
#if KILN_WITH_OPENCL
#include "engine/kernels/opencl/runtime.h"
#endif

namespace kiln::kernels {

std::string DeviceDescription::Spec() const {
  if (!opencl) return "cpu";
  return absl::StrCat("opencl:", platform, ":", device);
}

std::string DeviceDescription::Describe() const {
  if (!opencl) return "the CPU";
  return absl::StrCat(name, " (OpenCL platform '", platform_name, "', driver ", driver_version,
                      ")");
}

#if KILN_WITH_OPENCL

bool OpenClBuilt() { return true; }

absl::StatusOr<std::vector<DeviceDescription>> ListOpenClDevices() {
  ASSIGN_OR_RETURN(const std::vector<opencl::DeviceInfo> infos, opencl::ListDevices());
  std::vector<DeviceDescription> out;
  for (const opencl::DeviceInfo& i : infos) out.push_back(opencl::Description(i));
  return out;
}

absl::StatusOr<DeviceDescription> DescribeDevice(absl::string_view spec) {
  ASSIGN_OR_RETURN(const opencl::DeviceSpec s, opencl::ParseDeviceSpec(spec));
  if (!s.opencl) return DeviceDescription{};
  ASSIGN_OR_RETURN(const opencl::DeviceInfo info, opencl::ResolveDevice(s));
  return opencl::Description(info);
}

absl::StatusOr<DeviceDescription> ResolveDeviceIn(absl::string_view spec,
                                                  const MachineDevices& devices) {
  ASSIGN_OR_RETURN(const opencl::DeviceSpec s, opencl::ParseDeviceSpec(spec));
  if (!s.opencl) return DeviceDescription{};
  RETURN_IF_ERROR(devices.status);
  std::vector<opencl::PlatformEntry> table;
  for (const DeviceDescription& d : devices.opencl) {
    if (d.platform < 0 || d.device < 0 || d.platform > 4096 || d.device > 4096) continue;
    if (static_cast<size_t>(d.platform) >= table.size()) table.resize(d.platform + 1);
    opencl::PlatformEntry& e = table[d.platform];
    e.name = d.platform_name;
    if (static_cast<size_t>(d.device) >= e.devices.size()) e.devices.resize(d.device + 1);
    e.devices[d.device] = {d.name, d.type == "GPU"};
  }
  ASSIGN_OR_RETURN(const auto chosen, opencl::ChooseDevice(s, table));
  for (const DeviceDescription& d : devices.opencl) {
    if (d.platform == chosen.first && d.device == chosen.second) return d;
  }
  return absl::NotFoundError(absl::StrCat("no OpenCL device ", chosen.second, " on platform ",
                                          chosen.first, " (device '", spec, "')"));
}

absl::StatusOr<std::shared_ptr<DeviceRuntime>> OpenDeviceRuntime(
    const DeviceDescription& built_for) {
  if (!built_for.opencl) return absl::InvalidArgumentError("the CPU has no device runtime");
  const auto absent = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this engine runs on the OpenCL device ", built_for.Describe(), ", which this machine ",
        "does not have: ", why,
        " (build the engine again for a device this machine has: ", "`kiln devices` lists them)"));
  };
  absl::StatusOr<std::vector<opencl::DeviceInfo>> infos = opencl::ListDevices();
  if (!infos.ok()) return absent(std::string(infos.status().message()));
  const opencl::DeviceInfo* match = nullptr;
  std::vector<std::string> have;
  for (const opencl::DeviceInfo& i : *infos) {
    have.push_back(absl::StrCat("opencl:", i.platform, ":", i.device, " ", i.Describe()));
    if (i.name != built_for.name || i.platform_name != built_for.platform_name) continue;
    if (match == nullptr || (i.platform == built_for.platform && i.device == built_for.device)) {
      match = &i;
    }
  }
  if (match == nullptr) {
    return absent(have.empty() ? std::string("it has no OpenCL device")
                               : absl::StrCat("it has ", absl::StrJoin(have, "; ")));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<opencl::Device> dev,
                   opencl::Device::Open(opencl::DeviceSpec{true, match->platform, match->device}));
  return opencl::MakeRuntime(std::move(dev));
}

#else

namespace {
absl::Status NotBuilt() {
  return absl::UnimplementedError(
      "this Kiln was built without the OpenCL backend (configure with -DKILN_WITH_OPENCL=ON; it "
      "needs the OpenCL headers, Debian's opencl-headers)");
}
}  // namespace

bool OpenClBuilt() { return false; }
absl::StatusOr<std::vector<DeviceDescription>> ListOpenClDevices() { return NotBuilt(); }
absl::StatusOr<DeviceDescription> DescribeDevice(absl::string_view spec) {
  if (spec == "cpu") return DeviceDescription{};
  if (!absl::StartsWith(spec, "opencl")) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad device '", spec, "': expected cpu or opencl[:PLATFORM[:DEVICE]]"));
  }
  return NotBuilt();
}
absl::StatusOr<DeviceDescription> ResolveDeviceIn(absl::string_view spec, const MachineDevices&) {
  return DescribeDevice(spec);
}
absl::StatusOr<std::shared_ptr<DeviceRuntime>> OpenDeviceRuntime(const DeviceDescription&) {
  return NotBuilt();
}

#endif

}  // namespace kiln::kernels
