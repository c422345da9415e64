// The quantization form of a model as imported, and its float computation where the model holds
// it (the accuracy report's "float reference", DESIGN.md §7):
//
// - "qdq": values go through QuantizeLinear -> DequantizeLinear pairs (ONNX Runtime's QDQ
//   format). The float computation is the same graph with every such pair bypassed: the
//   DequantizeLinear reads the QuantizeLinear's input instead (an Identity, or a Cast where the
//   dtypes differ). Weights stored quantized (a DequantizeLinear on an integer constant) stay as
//   stored: their float values are not in the model.
// - "integer": the arithmetic itself is integer (MatMulInteger, ConvInteger, QLinearConv,
//   QLinearMatMul, DynamicQuantizeLinear feeding them; also what the com.microsoft quantized ops
//   expand into at import): its float computation is not in the model.
// - "qdq+integer": both; only the pairs are bypassed, the integer ops run as written.
// - "none" otherwise.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/ir/graph.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/metrics.h"
#include "kiln/v1/report.pb.h"

namespace kiln::builder {

/// What DetectQuantization found in a graph and its subgraphs (If / Loop / Scan bodies).
struct QuantizationForm {
  /// Q->DQ pairs (a DequantizeLinear reading a QuantizeLinear's output, or a
  /// DynamicQuantizeLinear's, with the same scale, zero point and axis) whose quantizer reads a
  /// computed value (an activation), and those whose quantizer reads a constant (a float weight
  /// fake-quantized in the graph): both are bypassed in the float computation.
  int activation_pairs = 0;
  int weight_pairs = 0;
  /// DequantizeLinear nodes on a constant quantized weight (no QuantizeLinear before them): kept.
  int weight_dequantize = 0;
  /// A DequantizeLinear reading a QuantizeLinear whose scale, zero point or axis differ (a
  /// requantization): not a pair, kept.
  int mismatched_pairs = 0;
  /// Integer arithmetic by op kind (sorted by name): MatMulInteger, ConvInteger, QLinearConv,
  /// QLinearMatMul, DynamicQuantizeLinear when an output of it feeds something other than a
  /// DequantizeLinear pair.
  std::vector<std::pair<std::string, int>> integer_ops;

  bool qdq() const { return activation_pairs + weight_pairs > 0; }
  bool integer() const { return !integer_ops.empty(); }
  /// "none", "qdq", "integer" or "qdq+integer".
  std::string Name() const;
  /// "MatMulInteger x7, DynamicQuantizeLinear x9".
  std::string IntegerOpsText() const;
};

/// The quantization form of `graph` as imported (before any pass).
QuantizationForm DetectQuantization(const ir::Graph& graph);

/// The float computation of `graph`: a copy (constants shared) with every Q->DQ pair that
/// DetectQuantization counts bypassed; the QuantizeLinear nodes left without consumers are
/// dead code for the build. `bypassed` receives the number of pairs bypassed.
absl::StatusOr<std::unique_ptr<ir::Graph>> FloatComputationOf(const ir::Graph& graph,
                                                              int* bypassed);

/// Floating outputs of one engine per sample, as f32 (non-floating outputs left undefined).
using SampleOutputs = std::vector<std::vector<ir::Tensor>>;

/// Runs `engine` on every sample (each in graph-input order).
absl::StatusOr<SampleOutputs> RunOutputsF32(std::shared_ptr<const plan::Engine> engine,
                                            const std::vector<std::vector<ir::Tensor>>& samples);

/// The report's quantization summary of `form`, detected in the model imported as `imported`
/// (sha256 `model_sha256`), built with `options`: form, counts and a note. For a QDQ form
/// (`reference_outputs` then required: the fp32 reference's outputs on `samples`), also the
/// quantization error per floating graph output: the model at fp32 against its float
/// computation, built here at fp32 as the reference is (ReferenceBuildOptions) and run on the
/// same samples. `output_names` are the graph outputs in order.
absl::StatusOr<v1::QuantizationSummary> SummarizeQuantization(
    const QuantizationForm& form, const ir::Graph& imported, const std::string& model_sha256,
    const BuildOptions& options, const std::vector<std::vector<ir::Tensor>>& samples,
    const SampleOutputs* reference_outputs, const std::vector<std::string>& output_names,
    const report::Tolerance& tolerance);

}  // namespace kiln::builder
