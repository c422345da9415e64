// Sample inputs for the accuracy report (DESIGN.md §7, §10): the parsing of the `kiln build`
// flags that shape them (`--input-range NAME=LO,HI`, `--shape NAME=1x128`) and the generation of
// deterministic random inputs from a seed, as Polygraphy's data loader does.
//
// Generation, per graph input (constants are never inputs):
//  - dims: static dims as declared; a symbolic or unknown dim from `--shape`, else from another
//    input that shares its symbol, else 1 (with a note saying how to choose it);
//  - floating (f32, f16, bf16, f64): uniform in [lo, hi] (the input's --input-range, or
//    [float_lo, float_hi]), rounded to the input's dtype and kept inside [lo, hi];
//  - integer token ids (the input reaches the indices of a Gather over a constant table, directly
//    or through Cast/Reshape/Unsqueeze/Squeeze/Flatten/Identity): uniform in [0, V), V the table's
//    row count (the smallest when it feeds several tables);
//  - integer masks (name contains "mask", any case): per row along the last axis, a run of ones
//    of random length >= 1 followed by zeros (right padding, as a tokenizer pads a batch);
//  - other integers: uniform in [0, 9], or the inclusive --input-range LO..HI;
//  - bool: uniform true/false (or the --input-range within 0..1).
// An explicit --input-range always wins over the token-id and mask rules.
//
// Determinism: every tensor has its own std::mt19937_64 stream seeded from (seed, sample index,
// input index) through the SplitMix64 finaliser; the mt19937_64 sequence is fixed by the C++
// standard and the mapping from its 64-bit outputs to values is our own (no std:: distribution,
// whose output is implementation-defined). The same seed, options and graph give identical bytes
// on every platform; an input's values do not change when another input's shape or range does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"

namespace kiln::report {

/// How to generate sample inputs (the `kiln build` flags --seed, --samples, --input-range,
/// --shape).
struct SampleOptions {
  /// --seed: the whole generation is a function of the seed (see the file comment).
  uint64_t seed = 0;
  /// --samples: how many sample sets to generate (>= 1).
  int count = 1;
  /// --input-range NAME=LO,HI: per-input value range. Floating inputs: uniform in [LO, HI].
  /// Integer and bool inputs: inclusive LO..HI, both integral and within the dtype.
  std::map<std::string, std::pair<double, double>> ranges;
  /// --shape NAME=1x128: the input's full dims (rank and static dims must match the graph's).
  std::map<std::string, std::vector<int64_t>> shapes;
  /// Default range of floating inputs. [-1, 1] because most floating model inputs are
  /// normalised (pixels after mean/std, embeddings, audio samples): it exercises both signs
  /// without saturating activations or overflowing fp16, so the report measures precision
  /// rather than an input the model never sees. Models with other input scales need
  /// --input-range.
  double float_lo = -1.0, float_hi = 1.0;
  /// Upper bound on the bytes of one sample set (all inputs), so that a mistyped --shape is an
  /// error instead of an allocation of terabytes.
  int64_t max_sample_bytes = int64_t{1} << 32;
};

/// Parses one --input-range flag value `NAME=LO,HI` (LO <= HI, finite numbers) into
/// `options.ranges[NAME]`; a later flag for the same name replaces an earlier one.
/// InvalidArgument naming the flag and the bad part.
absl::Status ParseInputRange(const std::string& flag_value, SampleOptions& options);

/// Parses one --shape flag value `NAME=D0xD1x...` (non-negative integers) into
/// `options.shapes[NAME]`; a later flag for the same name replaces an earlier one.
/// InvalidArgument naming the flag and the bad part.
absl::Status ParseShape(const std::string& flag_value, SampleOptions& options);

/// Sample inputs for one build's accuracy report.
struct Samples {
  /// Per sample, the tensors in graph-input order.
  std::vector<std::vector<ir::Tensor>> sets;
  /// Where they come from, for the report: "generated (seed 0, 4 samples)".
  std::string source;
  /// What the generator decided on the user's behalf (bound dims, detected token ids and
  /// masks), one line each: "input 'ids': symbolic dim 'seq' bound to 1 (use --shape ...)".
  std::vector<std::string> notes;
};

/// Generates `options.count` sample sets for the graph inputs of `graph` (an imported graph or
/// plan::Engine::graph). Errors: InvalidArgument for a --shape / --input-range naming no input
/// (the message lists the inputs), a --shape that contradicts the input's rank or static dims,
/// symbol bindings that disagree, an input of unknown rank without --shape, a range outside the
/// dtype, count < 1 or a sample larger than max_sample_bytes; Unimplemented for an input whose
/// dtype cannot be generated (string, ...), naming the input.
absl::StatusOr<Samples> GenerateSamples(const ir::Graph& graph, const SampleOptions& options);

}  // namespace kiln::report
