// The internal interface of the fusion pass (passes/fusion.h), shared by its two sources:
// fusion.cc (the driver, the shared helpers, the pattern, attention, MatMul and LayerNorm
// fusions, and the public functions) and fusion_conv.cc (the convolution fusions). Not for other
// users: include passes/fusion.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/passes/fusion.h"
#include "engine/precision/assign.h"
#include "engine/precision/patterns.h"
#include "spdlog/logger.h"

namespace kiln::passes::fusion_internal {

using precision::PatternInstance;
using precision::PatternKind;
using precision::Precision;

using ir::Attribute;

// Shared helpers (fusion.cc).
std::string ActivationOf(const ir::Node& a);
const ir::Tensor* Known(const ir::Value* v);

// Applies the fusions to one graph; each member is documented at its definition.
class Fuser {
 public:
  Fuser(ir::Graph& g, const precision::Assignment& a, const FusionOptions& o,
        spdlog::logger* logger)
      : g_(g), a_(a), o_(o), logger_(logger), removed_(g.nodes().size(), false) {}

  absl::StatusOr<FusionResult> Run(const std::vector<PatternInstance>& patterns);

 private:
  // fusion.cc: the driver's helpers and the pattern, attention, MatMul and LayerNorm fusions.
  const precision::NodeAssignment& Assigned(const ir::Node& n);
  void Compact();
  Precision PrecisionOf(const ir::Node& n);
  int LoweredSource(const ir::Node& n, Precision t);
  ir::Node* SoleConsumer(const ir::Value* v);
  bool Allowed(const char* fusion, const std::vector<ir::Node*>& members, Precision t);
  Precision JoinOf(const std::vector<ir::Node*>& members);
  void Commit(ir::Node* fused, const std::vector<ir::Node*>& members, Precision t,
              const std::string& label);
  bool Absorbable(const char* fusion, std::vector<ir::Node*>& members,
                  const std::vector<ir::Value*>& inputs, const ir::Value* output);
  absl::Status FuseLinear();
  absl::Status FuseMatMulBias(ir::Node* mm);
  void FuseAddLayerNorm(ir::Node* add);
  bool Excluded(const std::vector<ir::Node*>& members, ir::OpType op, const char* pattern);
  std::string Names(const std::vector<ir::Node*>& members);
  void Refuse(std::string why);
  absl::StatusOr<ir::Value*> AddConstant(const std::string& name, ir::Tensor t);
  absl::StatusOr<ir::Value*> Ones(int64_t d, const std::string& name);
  absl::Status FusePattern(const PatternInstance& p);
  absl::Status FuseAttention(const PatternInstance& p);

  // fusion_conv.cc: the convolution fusions and their helpers.
  static std::string ConvActivationOf(const ir::Node& a);
  ir::Node* NewFusedConv(const ir::Node& conv, const ir::Node* a, const std::string& act);
  bool FuseConvSilu(ir::Node* conv);
  static std::optional<double> Scalar(const ir::Value* v);
  static std::optional<double> WithScalar(const ir::Node* n, ir::OpType op, const ir::Value* x);
  bool FuseConvHardSwishWritten(ir::Node* conv);
  void FuseConvActivation(ir::Node* conv);
  void FuseConvResidual(ir::Node* conv);
  absl::Status FuseConvBatchNorm();
  static const ir::Tensor* ConstantValues(const ir::Value* v);
  static const ir::Tensor* ChannelConstant(const ir::Value* v, int64_t channels);
  static int64_t ScalableChannels(const ir::Node& base);
  absl::Status FuseScale();

  ir::Graph& g_;
  const precision::Assignment& a_;
  const FusionOptions& o_;
  spdlog::logger* logger_;
  std::vector<bool> removed_;
  FusionResult result_;
};

}  // namespace kiln::passes::fusion_internal
