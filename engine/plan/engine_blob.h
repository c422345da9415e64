// Engine blob v2 (DESIGN.md §8): one file, readable without the builder.
//
//   header (64 bytes): magic "KILNENG\0", u32 format version, u32 section count,
//     u64 required CPU features, u64 file size, char[32] builder version
//   section table: per section u32 kind, u32 reserved (0), u64 offset, u64 size, digest[32]
//   sha256 of header + table (32 bytes)
//   sections at 64-byte-aligned offsets, zero padding between them:
//     kMetadata: kiln.v1.EngineMetadata (protobuf)
//     kWeights:  constant tensors, each 64-byte aligned, referenced from the metadata
//
// A section's digest covers its bytes as they sit in the blob. kMetadata: SHA-256. kWeights:
// XXH3-128 (seed 0) in its canonical big-endian form, then 16 zero bytes; v1 used SHA-256 there
// too. The section digests guard against corruption, not tampering (the service and its cache
// check the whole blob's SHA-256), and SHA-256 made verifying a BERT-base engine's 170 MB of
// weights ~95% of its load time, where XXH3 runs at memory speed.
//
// All integers little-endian. The reader validates everything before it trusts anything, so a
// truncated, corrupted (any flipped byte), wrong-magic or wrong-version file is a clear error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "kiln/v1/engine.pb.h"

namespace kiln::plan {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '\0'};
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kSectionMetadata = 1;
constexpr uint32_t kSectionWeights = 2;

/// A loaded engine: metadata, the graph rebuilt from it (nodes in execution order, constants
/// borrowing the blob's weights), and the storage that keeps the weights alive.
struct Engine {
  v1::EngineMetadata metadata;
  std::unique_ptr<ir::Graph> graph;
  std::vector<ir::Node*> order;
  std::shared_ptr<void> storage;
};

/// What the builder decided about one node: the kernel chosen for it and its provenance.
struct KernelChoice {
  std::string backend;                         // "cpu"
  std::string isa;                             // "ref", ...
  std::string dtype;                           // the dtype that keyed the kernel
  std::vector<v1::NodeProvenance> provenance;  // one per source ONNX node it implements
};

/// A constant stored in the blob in another layout than the graph holds it (a GEMM weight the
/// build packs only as it writes it, so the graph's weight is never held twice): its dims and
/// bytes in the blob, and the function writing those bytes.
struct WeightEncoding {
  std::vector<int64_t> dims;
  uint64_t bytes = 0;
  std::function<void(char* dst)> write;
};

/// Serialises an engine. `metadata` carries everything but tensors, kernels, graph inputs and
/// outputs, which are filled from `graph` and `order`; `choices[node->id]` describes each node.
/// `encodings` (by value id; may be empty) replace the bytes of some constants.
absl::StatusOr<std::string> WriteEngine(const ir::Graph& graph, const std::vector<ir::Node*>& order,
                                        const std::vector<KernelChoice>& choices,
                                        v1::EngineMetadata metadata, uint64_t required_features,
                                        const std::map<int, WeightEncoding>& encodings = {});

/// Loads an engine from bytes (kept alive by the returned Engine). `trusted`: the bytes were
/// just written by WriteEngine in this process, so the section digests are not recomputed
/// (everything else is still checked); never for bytes from a file or a peer.
absl::StatusOr<std::unique_ptr<Engine>> LoadEngineFromBytes(
    std::shared_ptr<const std::string> bytes, bool trusted = false);

/// Maps an engine file read-only and loads it.
absl::StatusOr<std::unique_ptr<Engine>> LoadEngineFile(const std::string& path);

/// Tensor index of each value in the blob: ids of `graph` values that are used, in value order.
std::vector<int> TensorIndexOfValues(const ir::Graph& graph, const std::vector<ir::Node*>& order);

}  // namespace kiln::plan
