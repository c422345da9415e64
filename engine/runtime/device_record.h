// A device as an engine's metadata (and kiln-server's device probe) records it: v1::Device <->
// kernels::DeviceDescription.
#pragma once

#include "engine/kernels/device.h"
#include "kiln/v1/engine.pb.h"

namespace kiln::runtime {

/// Writes the identity and capabilities of `device` (kind, indices, names, versions, type,
/// capabilities, compute units, memory); leaves the placement figures alone.
void RecordDevice(const kernels::DeviceDescription& device, v1::Device& out);

/// The device a record names (opencl set when its kind is "opencl").
kernels::DeviceDescription DeviceOfRecord(const v1::Device& record);

}  // namespace kiln::runtime
