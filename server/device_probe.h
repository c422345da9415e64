// The server's devices, listed once at start in a child process (`kiln-server --list-devices`):
// a vendor's OpenCL driver brings its own threads, signal handlers and crashes, and none of that
// is loaded into the server. Builds for a device run in workers, which load the driver themselves.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "engine/kernels/device.h"

namespace kiln::server {

/// The child's side: writes this machine's OpenCL devices to the event pipe (fd 3), one device
/// frame each, then the listing's status frame (job.h). Returns the exit code.
int ListDevicesMain();

/// Runs `binary --list-devices` and collects what it lists. Without the OpenCL backend no child
/// is started. When the child fails, crashes or runs past `timeout` (then it is killed), the
/// list is empty and `status` says why: the server then serves the CPU alone.
kernels::MachineDevices ProbeDevices(const std::string& binary, absl::Duration timeout);

}  // namespace kiln::server
