// BuildSpec -> builder options, with the validation the server does before accepting an upload
// (the worker converts the same spec again, so both sides agree on what is built).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/kernels/device.h"
#include "kiln/v1/service.pb.h"

namespace kiln::server {

/// A validated spec: the builder options and the canonical policy that keys the cache.
struct CheckedSpec {
  builder::BuildOptions options;
  /// Canonical policy text plus whether each rule must match (a preset's need not).
  std::string canonical_policy;
  /// Whether a report is asked for (then the build is never answered from the cache).
  bool report = false;
  /// The device the build targets, as this server resolved it ("cpu", or the OpenCL device's
  /// identity: name, platform and driver), for the cache key.
  std::string device_identity = "cpu";
};

/// Bounds on the identifiers a client chooses (they are logged and quoted in errors).
inline constexpr size_t kMaxRequestIdBytes = 128;
inline constexpr size_t kMaxModelNameBytes = 1024;

/// Validates a spec: model_size in 1..max_model_bytes, model_sha256 64 lower-case hex digits,
/// request_id (printable ASCII, at most kMaxRequestIdBytes), model_name (kMaxModelNameBytes),
/// policy (preset name) xor policy_text (parsed; errors "policy_text:LINE:COL: ..."), rules
/// ("--rule N" / "rules[N]"), constraints, typing, fusion, samples, device (one this server has:
/// InvalidArgument for bad text, FailedPrecondition for a device it lacks) and no_fallback.
/// InvalidArgument naming the field. The policy text, when present, is referenced as the file
/// `policy_text` (see job.h). The device is resolved among `devices` (the server's, listed at
/// start), or by asking this machine when `devices` is null (the worker).
absl::StatusOr<CheckedSpec> CheckSpec(const v1::BuildSpec& spec, int64_t max_model_bytes,
                                      const kernels::MachineDevices* devices);

/// What a request id stands for: SHA-256 (hex) of the spec without its request id (model
/// digest, size and name, policy, rules, options, report settings). A Build that reuses a
/// request id rejoins that id's build only when this matches (DESIGN.md §9).
std::string SpecFingerprint(const v1::BuildSpec& spec);

/// The content-addressed cache key of a checked spec: SHA-256 (hex) over the model digest, the
/// canonical policy, the options, the builder version (KILN_VERSION) and this CPU's features.
std::string CacheKey(const v1::BuildSpec& spec, const CheckedSpec& checked);

}  // namespace kiln::server
