// What the expanders of com.microsoft ops (contrib_ops_*.cc) share: the node being expanded, with
// its inputs, attributes, errors that name it, and builders of default-domain nodes and constants.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/ir/graph.h"

namespace kiln::import::contrib {

/// The opset whose op versions the expansions emit (Attention and RMSNormalization are 23).
inline constexpr int kEmitOpset = 23;

/// One contrib node being expanded into default-domain nodes.
class Expansion {
 public:
  Expansion(ir::Graph& g, ir::Node& placeholder, std::string op_type);

  const std::string& op() const { return op_; }
  const std::string& name() const { return name_; }
  /// "[node 'Attention_0' (com.microsoft.Attention) #3]".
  std::string Label() const;

  // Inputs and outputs as written (nullptr when absent or omitted).
  ir::Value* in(int i) const { return i < static_cast<int>(ins_.size()) ? ins_[i] : nullptr; }
  int num_inputs() const { return static_cast<int>(ins_.size()); }
  ir::Value* out(int i) const { return i < static_cast<int>(outs_.size()) ? outs_[i] : nullptr; }
  int num_outputs() const { return static_cast<int>(outs_.size()); }

  // Attributes.
  bool Has(const std::string& key) const { return attrs_.contains(key); }
  int64_t Int(const std::string& key, int64_t dflt) const;
  float Float(const std::string& key, float dflt) const;
  std::string Str(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> Ints(const std::string& key) const;
  const absl::flat_hash_map<std::string, ir::Attribute>& attrs() const { return attrs_; }

  // Errors naming the node.
  absl::Status Invalid(const std::string& what) const;
  absl::Status Unsupported(const std::string& what) const;
  /// Arity check: inputs in [min_in, max_in] (trailing omitted ones dropped), outputs likewise.
  absl::Status Arity(int min_in, int max_in, int min_out, int max_out) const;
  /// Input `i`, which must be present; `what` names it in the error.
  absl::StatusOr<ir::Value*> Required(int i, const std::string& what) const;
  /// Input `i`, which must be a constant (a weight): its tensor.
  absl::StatusOr<const ir::Tensor*> ConstantInput(int i, const std::string& what) const;
  /// The dtype of input `i`, which must be floating (known after the inference along the way).
  absl::StatusOr<DataType> FloatType(int i, const std::string& what) const;
  /// The rank of input `i` when known.
  int RankOf(int i) const;

  // Builders. Parts are named "<node>/<part>"; since_version is the op's at kEmitOpset.
  /// A fresh intermediate value "<node>/<part>".
  absl::StatusOr<ir::Value*> Temp(const std::string& part);
  /// Adds node `op` with `inputs` and `outputs` (nullptr entries allowed for omitted ones).
  absl::StatusOr<ir::Node*> Node(ir::OpType op, const std::string& part,
                                 std::vector<ir::Value*> inputs, std::vector<ir::Value*> outputs,
                                 std::vector<std::pair<std::string, ir::Attribute>> attrs = {});
  /// A one-output node; its output is `out` when given (a contrib output), else a fresh value.
  absl::StatusOr<ir::Value*> Op(ir::OpType op, const std::string& part,
                                std::vector<ir::Value*> inputs,
                                std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
                                ir::Value* out = nullptr);
  /// A constant value "<node>/<part>" holding `t`.
  absl::StatusOr<ir::Value*> Const(const std::string& part, ir::Tensor t);
  /// 1-D int64 constant.
  absl::StatusOr<ir::Value*> I64s(const std::string& part, const std::vector<int64_t>& v);
  /// A constant of floating dtype `dt` and dims `dims` filled with `v`.
  absl::StatusOr<ir::Value*> FloatConst(const std::string& part, DataType dt, double v,
                                        std::vector<int64_t> dims = {});

  /// The nodes made so far, in creation order (a topological order of the expansion).
  const std::vector<ir::Node*>& made() const { return made_; }

 private:
  ir::Graph& g_;
  ir::Node& placeholder_;
  std::string op_;
  std::string name_;
  int id_;
  std::vector<ir::Value*> ins_;
  std::vector<ir::Value*> outs_;
  absl::flat_hash_map<std::string, ir::Attribute> attrs_;
  std::vector<ir::Node*> made_;
};

/// An expander: rewrites one contrib node.
using Expander = std::function<absl::Status(Expansion&)>;
using ExpanderTable = absl::flat_hash_map<std::string, Expander>;

/// The families (one file each): normalization and activations; attention; quantized ops.
void AddNormActivationExpanders(ExpanderTable& t);
void AddAttentionExpanders(ExpanderTable& t);
void AddQuantizedExpanders(ExpanderTable& t);

/// A tensor of floating dtype `dt` (f32, f16, bf16, f64) from float values.
absl::StatusOr<ir::Tensor> FloatTensor(DataType dt, std::vector<int64_t> dims,
                                       const std::vector<float>& values);

}  // namespace kiln::import::contrib
