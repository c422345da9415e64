#include "server/device_probe.h"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/runtime/device_record.h"
#include "server/job.h"
#include "server/worker_process.h"

namespace kiln::server {

int ListDevicesMain() {
  absl::StatusOr<std::vector<kernels::DeviceDescription>> devices = kernels::ListOpenClDevices();
  absl::Status st = devices.status();
  if (devices.ok()) {
    for (const kernels::DeviceDescription& d : *devices) {
      v1::Device record;
      runtime::RecordDevice(d, record);
      if (st = job::WriteDeviceFrame(job::kEventFd, record); !st.ok()) break;
    }
  }
  const bool sent = job::WriteStatusFrame(job::kEventFd, st).ok();
  // Straight out: a driver's own teardown (its threads, its atexit handlers) has nothing left to
  // give, and a crash in it would only muddy an answer already sent.
  _exit(sent ? 0 : 1);
}

kernels::MachineDevices ProbeDevices(const std::string& binary, absl::Duration timeout) {
  kernels::MachineDevices out;
  if (!kernels::OpenClBuilt()) {
    out.status = kernels::ListOpenClDevices().status();
    return out;
  }
  WorkerLimits limits;
  // Drivers reserve address space far beyond what they touch (a GPU driver maps the device's
  // memory into it), so the listing gets 1 TiB of it; the CPU limit and the timeout bound it.
  limits.memory_mb = int64_t{1} << 20;
  limits.cpu_seconds = static_cast<int64_t>(absl::ToDoubleSeconds(timeout)) + 1;
  absl::StatusOr<std::unique_ptr<WorkerProcess>> child =
      WorkerProcess::Start(binary, {"--list-devices"}, limits);
  if (!child.ok()) {
    out.status = child.status();
    return out;
  }
  WorkerProcess& p = **child;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, timed_out = false;
  // Killing the child ends its pipe, which ends the read below.
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, absl::ToChronoNanoseconds(timeout), [&] { return done; })) {
      timed_out = true;
      p.Kill();
    }
  });
  job::FrameReader reader(p.event_fd());
  job::Frame frame;
  bool ended = false;
  absl::Status read = absl::OkStatus();
  while (!ended) {
    absl::StatusOr<bool> next = reader.Next(&frame);
    if (!next.ok()) read = next.status();
    if (!next.ok() || !*next) break;
    if (frame.kind == job::FrameKind::kDevice) {
      out.opencl.push_back(runtime::DeviceOfRecord(frame.device));
    } else if (frame.kind == job::FrameKind::kStatus) {
      out.status = frame.status;
      ended = true;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  const WorkerExit exit = p.Wait();
  if (ended) return out;
  out.opencl.clear();
  if (timed_out) {
    out.status = absl::DeadlineExceededError(
        absl::StrCat("listing the OpenCL devices took longer than ", absl::FormatDuration(timeout),
                     " (`kiln-server --list-devices` was killed; a driver that hangs?)"));
  } else {
    absl::Status why = read.ok() ? WorkerProcess::ExitStatus(exit, limits) : read;
    out.status = absl::InternalError(absl::StrCat(
        "listing the OpenCL devices (`kiln-server --list-devices`) failed: ", why.message()));
  }
  return out;
}

}  // namespace kiln::server
