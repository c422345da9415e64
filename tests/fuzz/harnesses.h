// The fuzz harnesses' entry points (one harness a file in tests/fuzz/). Each takes one input and
// returns OK when the code under test behaved: no crash (ASan and UBSan abort on their own), and
// an OK result or a clean error. A non-OK result is a contract violation: fuzz_main.cc aborts on
// it so libFuzzer keeps the input, and regressions_test.cc (GCC build) fails on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln::fuzz {

/// onnx_importer_fuzzer.cc: model bytes -> import::ImportModel (no model_dir, so no external
/// data) -> topological order and pattern matching of the imported graph.
absl::Status ImportModelOneInput(absl::string_view data);

/// engine_blob_fuzzer.cc: plan::LoadEngineFromBytes and plan::LoadEngineFile (through a memfd)
/// on the bytes as they are; both must agree.
absl::Status EngineBlobOneInput(absl::string_view data);

/// engine_blob_fuzzer.cc: the same after ResignBlob (every digest the input's section table
/// points at recomputed), so mutations reach the metadata and graph parsing.
absl::Status EngineBlobResignedOneInput(absl::string_view data);

/// policy_fuzzer.cc: ParsePolicyText, ParseRule per line, the canonical form's round trip,
/// AssignPrecision on a small fixed graph, GlobMatch.
absl::Status PolicyOneInput(absl::string_view data);

/// tensor_proto_fuzzer.cc: import::ParseNamedTensorProto (the `kiln run --inputs` reader) and
/// the round trip through SerializeTensorProto.
absl::Status TensorProtoOneInput(absl::string_view data);

/// build_spec_fuzzer.cc: kiln.v1.BuildSpec from the bytes -> server::CheckSpec, and CacheKey
/// when it passes.
absl::Status BuildSpecOneInput(absl::string_view data);

/// One harness: its name (the fuzzer binary is fuzz_<name>, its regressions live in
/// tests/fuzz/regressions/<name>/) and its entry point.
struct Harness {
  const char* name;
  absl::Status (*one_input)(absl::string_view data);
};

/// Every harness, in the order `make fuzz` runs them.
inline const std::vector<Harness>& AllHarnesses() {
  static const std::vector<Harness> kAll = {
      {"onnx_importer", ImportModelOneInput},
      {"engine_blob", EngineBlobOneInput},
      {"engine_blob_resigned", EngineBlobResignedOneInput},
      {"policy", PolicyOneInput},
      {"tensor_proto", TensorProtoOneInput},
#ifndef KILN_FUZZ_NO_SERVER
      {"build_spec", BuildSpecOneInput},
#endif
  };
  return kAll;
}

/// OK for an OK status or a clean error: a code that is not Internal or Unknown (CONVENTIONS.md:
/// Internal means a bug; hostile input is InvalidArgument, Unimplemented, ...) and a message.
/// Otherwise an error naming `what` and the status.
inline absl::Status CheckClean(const absl::Status& st, absl::string_view what) {
  if (st.ok()) return absl::OkStatus();
  if (st.code() == absl::StatusCode::kInternal || st.code() == absl::StatusCode::kUnknown) {
    return absl::InternalError(absl::StrCat(what,
                                            " gave an Internal/Unknown error on hostile "
                                            "input (a bug per CONVENTIONS.md): ",
                                            st.ToString()));
  }
  if (st.message().empty()) {
    return absl::InternalError(
        absl::StrCat(what, " gave an error without a message: ", st.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace kiln::fuzz

/// Returns the verdict from the enclosing harness when it is not OK.
#define KILN_FUZZ_RETURN_IF_ERROR(expr)                      \
  do {                                                       \
    ::absl::Status kiln_fuzz_verdict_ = (expr);              \
    if (!kiln_fuzz_verdict_.ok()) return kiln_fuzz_verdict_; \
  } while (0)

/// A harness invariant: returns an Internal verdict naming the condition when it is false.
#define KILN_FUZZ_EXPECT(cond, msg)                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      return ::absl::InternalError(::absl::StrCat("invariant '" #cond "' broken: ", (msg))); \
    }                                                                                        \
  } while (0)
