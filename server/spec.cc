#include "server/spec.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/common/cpu_features.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"
#include "engine/kernels/device.h"
#include "engine/precision/policy.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/files.h"
#include "server/job.h"

namespace kiln::server {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", msg));
}

std::string PolicyKey(const precision::Policy& p) {
  std::string out = absl::StrCat(p.Canonical(), "\nimplicit=", p.implicit, "\nmust_match=");
  for (const auto& r : p.rules) out += r.must_match ? '1' : '0';
  return out;
}

}  // namespace

absl::StatusOr<CheckedSpec> CheckSpec(const v1::BuildSpec& spec, int64_t max_model_bytes,
                                      const kernels::MachineDevices* devices) {
  if (spec.model_size() == 0) return Invalid("model_size", "the model is empty (0 bytes)");
  if (spec.model_size() > static_cast<uint64_t>(max_model_bytes)) {
    return Invalid("model_size", absl::StrCat(spec.model_size(),
                                              " bytes exceeds this server's "
                                              "limit of ",
                                              max_model_bytes, " bytes"));
  }
  if (!IsSha256Hex(spec.model_sha256())) {
    return Invalid("model_sha256", "must be 64 lower-case hex digits");
  }
  if (spec.request_id().size() > kMaxRequestIdBytes) {
    return Invalid("request_id", absl::StrCat("is ", spec.request_id().size(), " bytes; at most ",
                                              kMaxRequestIdBytes));
  }
  for (char ch : spec.request_id()) {
    if (ch < 0x21 || ch > 0x7e) {
      return Invalid("request_id", "takes printable ASCII characters without spaces");
    }
  }
  if (spec.model_name().size() > kMaxModelNameBytes) {
    return Invalid("model_name", absl::StrCat("is ", spec.model_name().size(), " bytes; at most ",
                                              kMaxModelNameBytes));
  }
  CheckedSpec c;
  builder::BuildOptions& o = c.options;
  precision::Policy policy;
  if (!spec.policy().empty() && !spec.policy_text().empty()) {
    return Invalid("policy", "give a preset name or policy_text, not both");
  }
  if (!spec.policy_text().empty()) {
    if (spec.policy_text().size() > (1u << 20)) return Invalid("policy_text", "larger than 1 MiB");
    auto p = precision::ParsePolicyText(spec.policy_text(), job::kPolicyFile);
    if (!p.ok()) return absl::InvalidArgumentError(p.status().message());
    policy = *std::move(p);
    o.policy = job::kPolicyFile;
  } else if (!spec.policy().empty()) {
    auto p = precision::Preset(spec.policy());
    if (!p.ok()) return Invalid("policy", p.status().message());
    policy = *std::move(p);
    o.policy = spec.policy();
  } else {
    auto p = precision::Preset("fp32");
    if (!p.ok()) return p.status();
    policy = *std::move(p);
    policy.implicit = true;
  }
  o.rules.assign(spec.rules().begin(), spec.rules().end());
  if (absl::Status st = precision::AddRuleFlags(policy, o.rules); !st.ok()) {
    return Invalid("rules", st.message());
  }
  if (!spec.constraints().empty()) {
    auto v = precision::ParseConstraints(spec.constraints());
    if (!v) return Invalid("constraints", "takes obey or prefer");
    o.constraints = *v;
  }
  if (!spec.typing().empty()) {
    auto v = precision::ParseTyping(spec.typing());
    if (!v) return Invalid("typing", "takes auto, strong or weak");
    o.typing = *v;
  }
  if (!spec.fusion().empty()) {
    if (spec.fusion() != "on" && spec.fusion() != "off")
      return Invalid("fusion", "takes on or off");
    o.fusion.enabled = spec.fusion() == "on";
  }
  o.fusion.no_fuse.assign(spec.no_fuse().begin(), spec.no_fuse().end());
  if (spec.samples() < 0 || spec.samples() > 1000) return Invalid("samples", "takes 0 to 1000");
  if (!(spec.atol() >= 0) || !(spec.rtol() >= 0)) {
    return Invalid("atol", "tolerances must be non-negative numbers");
  }
  if (spec.device().size() > 64) return Invalid("device", "longer than 64 bytes");
  if (!spec.device().empty() && spec.device() != "cpu") {
    absl::StatusOr<kernels::DeviceDescription> d =
        devices != nullptr ? kernels::ResolveDeviceIn(spec.device(), *devices)
                           : kernels::DescribeDevice(spec.device());
    if (!d.ok() && d.status().code() == absl::StatusCode::kInvalidArgument) {
      return Invalid("device", d.status().message());
    }
    if (!d.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("spec field 'device': this server cannot build for '", spec.device(),
                       "': ", d.status().message(), " (ListPresets lists its devices)"));
    }
    o.device = spec.device();
    c.device_identity = absl::StrCat(d->name, "\x1f", d->platform_name, "\x1f", d->vendor, "\x1f",
                                     d->driver_version, "\x1f", d->platform_version);
  }
  if (spec.no_fallback() && o.device == "cpu") {
    return Invalid("no_fallback", "needs a device other than cpu");
  }
  o.no_fallback = spec.no_fallback();
  // Untrusted uploads never read files next to the model: external data is refused.
  o.import.model_dir.clear();
  o.import.max_model_bytes = max_model_bytes;
  c.canonical_policy = PolicyKey(policy);
  c.report = spec.report();
  return c;
}

std::string SpecFingerprint(const v1::BuildSpec& spec) {
  v1::BuildSpec s = spec;
  s.clear_request_id();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    s.SerializeToCodedStream(&coded);
  }
  return DigestHex(Sha256(bytes));
}

std::string CacheKey(const v1::BuildSpec& spec, const CheckedSpec& c) {
  const builder::BuildOptions& o = c.options;
  std::string text = absl::StrCat(
      "kiln-cache-v1\nmodel ", spec.model_sha256(), "\npolicy\n", c.canonical_policy,
      "\nconstraints ", precision::ConstraintsName(o.constraints), "\ntyping ",
      precision::TypingName(o.typing), "\nfusion ", o.fusion.enabled ? "on" : "off", "\nno_fuse ",
      absl::StrJoin(o.fusion.no_fuse, "\x1f"), "\nmax_folded ", o.max_folded_bytes, "\nbuilder ",
      KILN_VERSION, "\ncpu ", CpuFeatureString(DetectCpuFeatures()), "\n");
  // A device build also keys on the device (an engine of another device, or driver, differs)
  // and on no_fallback; a CPU build's key stays what it was.
  if (c.device_identity != "cpu" || o.no_fallback) {
    absl::StrAppend(&text, "device ", c.device_identity, "\nno_fallback ", o.no_fallback ? 1 : 0,
                    "\n");
  }
  return DigestHex(Sha256(text));
}

}  // namespace kiln::server
