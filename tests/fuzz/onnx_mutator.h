// A protobuf-aware mutator for serialized onnx.ModelProto (libprotobuf-mutator is not packaged on
// Debian). It edits the parsed model the way hostile or broken exporters do: another known op
// type, inputs/outputs/attributes dropped or duplicated, edge-value dims (0, -1, huge), wrong data
// types, edited attribute values, truncated raw_data, colliding value names, odd opset and IR
// versions. The fuzzer then spends its time inside the importer's validation instead of in
// protobuf's parser. Plain C++ (no libFuzzer symbols), so GCC builds its unit test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace onnx {
class ModelProto;
}

namespace kiln::fuzz {

/// One structural edit of a model.
enum class OnnxMutation {
  kOpType,              // a node's op_type set to another known op (or its domain changed)
  kDropNodeInput,       // a node input removed
  kDuplicateNodeInput,  // a node input repeated (or an empty optional input added)
  kDropNodeOutput,
  kDuplicateNodeOutput,
  kDropAttribute,
  kDuplicateAttribute,
  kAttributeValue,  // i, f, s, ints or floats set to an edge value; its type field changed
  kDim,             // a shape or tensor dim set to 0, -1, huge, ...; a rank changed
  kDataType,        // a tensor's data_type or a value's elem_type changed
  kRawData,         // raw_data truncated, extended or cleared; typed data added beside it
  kRenameValue,     // a value name replaced by another value's (a collision), "" or a new one
  kDropNode,
  kDuplicateNode,     // the same outputs produced twice
  kSwapNodes,         // node order changed (may create a use before definition)
  kGraphInputOutput,  // a graph input, output or initializer dropped or duplicated
  kExternalData,      // an initializer pointed at external data (a path outside, an offset)
  kOpsetVersion,      // an opset_import version or domain changed, added or removed
  kIrVersion,
  kCount,
};

/// "op_type", "drop_node_input", ...
const char* OnnxMutationName(OnnxMutation m);

/// Applies `m` at a site chosen by `rng` (nodes of subgraphs included). False when the model has
/// no site for it (e.g. no attribute to drop); the model is then unchanged.
bool ApplyOnnxMutation(onnx::ModelProto& model, OnnxMutation m, std::mt19937_64& rng);

/// Applies one to four random mutations that found a site; returns them.
std::vector<OnnxMutation> MutateOnnxModel(onnx::ModelProto& model, std::mt19937_64& rng);

/// A byte mutator with LLVMFuzzerMutate's signature: mutates data[0, size) in place, may grow it
/// up to max_size, returns the new size.
using ByteMutator = size_t (*)(uint8_t* data, size_t size, size_t max_size);

/// How MutateOnnxBytes changed its input.
enum class MutationPath { kStructural, kBytes };

/// LLVMFuzzerCustomMutator's body: parses data[0, size) as a ModelProto and, when that works,
/// mutates it structurally and reserializes it into `data` (if it fits in max_size); otherwise,
/// and one time in five anyway, hands the bytes to `bytes`. `seed` makes it deterministic.
/// `path`, when given, says which way was taken.
size_t MutateOnnxBytes(uint8_t* data, size_t size, size_t max_size, unsigned int seed,
                       ByteMutator bytes, MutationPath* path = nullptr);

}  // namespace kiln::fuzz
