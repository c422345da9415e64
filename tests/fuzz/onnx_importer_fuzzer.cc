// Fuzz harness: ONNX model bytes -> import::ImportModel -> validated IR. Without a model_dir, so
// external data is refused and nothing is read from disk. A model that imports must then have a
// topological order and go through the pattern matcher (the next stage of every build) cleanly.
// The libFuzzer build adds a protobuf-aware custom mutator (onnx_mutator.h).
#include <string>

#include "engine/import/onnx_importer.h"
#include "engine/precision/patterns.h"
#include "tests/fuzz/harnesses.h"

#ifdef KILN_FUZZ_LIBFUZZER
#include "tests/fuzz/onnx_mutator.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  return kiln::fuzz::MutateOnnxBytes(data, size, max_size, seed, LLVMFuzzerMutate);
}
#endif

namespace kiln::fuzz {

absl::Status ImportModelOneInput(absl::string_view data) {
  import::ImportOptions options;  // defaults, as `kiln build` and the server use them
  options.model_dir.clear();
  // The bytes in a buffer of their own, handed over as `release`: the importer frees them once
  // parsed, so a read of the bytes after that is a heap-use-after-free ASan reports.
  std::string owned(data);
  absl::string_view bytes = owned;
  auto graph = import::ImportModel(bytes, options, &owned);
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(graph.status(), "ImportModel"));
  if (!graph.ok()) return absl::OkStatus();
  // The importer validated the DAG: a cycle or dangling value here is an importer bug.
  auto order = (*graph)->TopologicalOrder();
  KILN_FUZZ_EXPECT(order.ok(), order.status().ToString());
  KILN_FUZZ_EXPECT(order->size() == (*graph)->nodes().size(), "order misses nodes");
  std::vector<precision::PatternInstance> patterns = precision::FindPatterns(**graph);
  for (const auto& p : patterns) {
    for (int id : p.nodes) {
      KILN_FUZZ_EXPECT(id >= 0 && id < static_cast<int>((*graph)->nodes().size()),
                       absl::StrCat("pattern node id ", id));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::fuzz
