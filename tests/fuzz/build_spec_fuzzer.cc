// Fuzz harness: the server's spec check (server/spec.h), the first thing a Build stream's
// untrusted client reaches. The bytes are a kiln.v1.BuildSpec; CheckSpec validates it (policy
// text and rules parsed on the way) and, when it passes, CacheKey must give a stable 64-digit
// hex key.
#include <string>

#include "server/spec.h"
#include "tests/fuzz/harnesses.h"

namespace kiln::fuzz {
namespace {

// A server with one OpenCL GPU (no driver is loaded: the device is resolved in this list).
const kernels::MachineDevices& Devices() {
  static const kernels::MachineDevices* devices = [] {
    auto* m = new kernels::MachineDevices();
    kernels::DeviceDescription& d = m->opencl.emplace_back();
    d.opencl = true;
    d.platform = 0;
    d.device = 0;
    d.platform_name = "Fuzz Platform";
    d.name = "Fuzz GPU";
    d.type = "GPU";
    return m;
  }();
  return *devices;
}

}  // namespace

absl::Status BuildSpecOneInput(absl::string_view data) {
  v1::BuildSpec spec;
  if (!spec.ParseFromArray(data.data(), static_cast<int>(data.size()))) return absl::OkStatus();
  // The server's default limit is in the GiB range; a smaller one makes both sides of the
  // model_size check reachable.
  constexpr int64_t kMaxModelBytes = int64_t{1} << 30;
  auto checked = server::CheckSpec(spec, kMaxModelBytes, &Devices());
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(checked.status(), "CheckSpec"));
  if (!checked.ok()) {
    // FailedPrecondition only for a device this server lacks.
    KILN_FUZZ_EXPECT(checked.status().code() == absl::StatusCode::kInvalidArgument ||
                         (checked.status().code() == absl::StatusCode::kFailedPrecondition &&
                          !spec.device().empty()),
                     checked.status().ToString());
    return absl::OkStatus();
  }
  std::string key = server::CacheKey(spec, *checked);
  KILN_FUZZ_EXPECT(key.size() == 64, key);
  auto again = server::CheckSpec(spec, kMaxModelBytes, &Devices());
  KILN_FUZZ_EXPECT(again.ok(), again.status().ToString());
  KILN_FUZZ_EXPECT(server::CacheKey(spec, *again) == key, "CacheKey is not deterministic");
  return absl::OkStatus();
}

}  // namespace kiln::fuzz
