// libFuzzer's entry point for one harness: fuzz_<name> is built from this file plus the harness's
// own file, with KILN_FUZZ_ENTRY naming the harness's entry point (harnesses.h). A harness
// verdict that is not OK aborts, so libFuzzer writes the input to its crash folder.
#include <cstdio>
#include <cstdlib>

#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/harnesses.h"

#ifndef KILN_FUZZ_ENTRY
#error "KILN_FUZZ_ENTRY must name the harness entry point (tests/fuzz/CMakeLists.txt sets it)"
#endif

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Protobuf logs every proto3 string with invalid UTF-8 it refuses: millions of lines a run
  // that slow the fuzzer and bury its own output. The harness sees the parse failure anyway.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::Status verdict =
      ::kiln::fuzz::KILN_FUZZ_ENTRY(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!verdict.ok()) {
    std::fprintf(stderr, "kiln fuzz: %s\n", verdict.ToString().c_str());
    std::abort();
  }
  return 0;
}
