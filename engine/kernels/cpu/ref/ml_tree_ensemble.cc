// Reference kernel of ai.onnx.ml TreeEnsemble (opset 5): X [N, F] -> Y [N, n_targets].
//
// The trees are read from the node's attributes once, when the kernel is made, and checked
// there: equal lengths of the nodes_* and leaf_* lists, every child and leaf index in range,
// modes 0..6, one NaN-delimited set of membership_values per BRANCH_MEMBER node, targets in
// range, and no cycle among the interior nodes (a hostile model could otherwise loop forever).
// Each row walks every tree from its root to a leaf, whose weight goes to its target under the
// aggregate function; the post transform then applies to each row. Arithmetic is in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

enum class Mode { kLeq = 0, kLt, kGte, kGt, kEq, kNeq, kMember };
enum class Aggregate { kAverage = 0, kSum, kMin, kMax };
enum class PostTransform { kNone = 0, kSoftmax, kLogistic, kSoftmaxZero, kProbit };

struct TreeNode {
  Mode mode;
  int64_t feature;
  double split;
  std::vector<double> members;  // sorted, for kMember
  bool missing_tracks_true;
  int64_t child[2];  // [false, true]: a node index, or a leaf index where is_leaf says so
  bool is_leaf[2];
};

struct Ensemble {
  std::vector<TreeNode> nodes;
  std::vector<int64_t> roots;
  std::vector<double> leaf_weights;
  std::vector<int64_t> leaf_targets;
  int64_t n_targets = 0;
  Aggregate aggregate = Aggregate::kSum;
  PostTransform post = PostTransform::kNone;
};

// The values of tensor attribute `name` as doubles; error if absent and `required`.
absl::StatusOr<std::vector<double>> TensorValues(const ir::Node& node, const char* name,
                                                 bool required) {
  const ir::Attribute* a = node.attr(name);
  if (a == nullptr) {
    if (required) return InvalidNode(node, "requires the tensor attribute '", name, "'");
    return std::vector<double>{};
  }
  if (a->type != ir::Attribute::Type::kTensor) {
    return InvalidNode(node, "attribute '", name, "' must be a tensor");
  }
  std::vector<double> v(a->t.num_elements());
  for (int64_t i = 0; i < a->t.num_elements(); ++i) v[i] = ir::ElementAsDouble(a->t, i);
  return v;
}

absl::StatusOr<std::vector<int64_t>> IntsAttr(const ir::Node& node, const char* name,
                                              bool required) {
  const ir::Attribute* a = node.attr(name);
  if (a == nullptr) {
    if (required) return InvalidNode(node, "requires the ints attribute '", name, "'");
    return std::vector<int64_t>{};
  }
  if (a->type != ir::Attribute::Type::kInts) {
    return InvalidNode(node, "attribute '", name, "' must be a list of ints");
  }
  return a->ints;
}

// No interior node reachable from a root leads back to itself (three-colour depth-first search).
absl::Status CheckAcyclic(const ir::Node& node, const Ensemble& e) {
  std::vector<char> colour(e.nodes.size(), 0);  // 0 new, 1 on the path, 2 done
  for (int64_t root : e.roots) {
    if (colour[root] == 2) continue;
    std::vector<std::pair<int64_t, int>> stack = {{root, 0}};
    colour[root] = 1;
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      if (next == 2) {
        colour[id] = 2;
        stack.pop_back();
        continue;
      }
      const TreeNode& t = e.nodes[id];
      const int branch = next++;
      if (t.is_leaf[branch]) continue;
      const int64_t c = t.child[branch];
      if (colour[c] == 1) {
        return InvalidNode(node, "the trees have a cycle: node ", c, " is its own descendant");
      }
      if (colour[c] == 0) {
        colour[c] = 1;
        stack.push_back({c, 0});
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Ensemble> ReadEnsemble(const ir::Node& node) {
  Ensemble e;
  ASSIGN_OR_RETURN(std::vector<int64_t> features, IntsAttr(node, "nodes_featureids", true));
  ASSIGN_OR_RETURN(std::vector<double> splits, TensorValues(node, "nodes_splits", true));
  ASSIGN_OR_RETURN(std::vector<double> modes, TensorValues(node, "nodes_modes", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> true_ids, IntsAttr(node, "nodes_truenodeids", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> false_ids, IntsAttr(node, "nodes_falsenodeids", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> true_leafs, IntsAttr(node, "nodes_trueleafs", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> false_leafs, IntsAttr(node, "nodes_falseleafs", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> missing,
                   IntsAttr(node, "nodes_missing_value_tracks_true", false));
  ASSIGN_OR_RETURN(std::vector<double> members, TensorValues(node, "membership_values", false));
  ASSIGN_OR_RETURN(e.leaf_weights, TensorValues(node, "leaf_weights", true));
  ASSIGN_OR_RETURN(e.leaf_targets, IntsAttr(node, "leaf_targetids", true));
  ASSIGN_OR_RETURN(e.roots, IntsAttr(node, "tree_roots", true));
  const size_t n = features.size();
  auto same_length = [&](size_t len, const char* what) -> absl::Status {
    if (len != n) {
      return InvalidNode(node, "attribute '", what, "' has ", len,
                         " entries but nodes_featureids has ", n);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(same_length(splits.size(), "nodes_splits"));
  RETURN_IF_ERROR(same_length(modes.size(), "nodes_modes"));
  RETURN_IF_ERROR(same_length(true_ids.size(), "nodes_truenodeids"));
  RETURN_IF_ERROR(same_length(false_ids.size(), "nodes_falsenodeids"));
  RETURN_IF_ERROR(same_length(true_leafs.size(), "nodes_trueleafs"));
  RETURN_IF_ERROR(same_length(false_leafs.size(), "nodes_falseleafs"));
  if (!missing.empty()) {
    RETURN_IF_ERROR(same_length(missing.size(), "nodes_missing_value_tracks_true"));
  }
  if (e.leaf_targets.size() != e.leaf_weights.size()) {
    return InvalidNode(node, "attribute 'leaf_weights' has ", e.leaf_weights.size(),
                       " entries but leaf_targetids has ", e.leaf_targets.size());
  }
  const int64_t leaves = static_cast<int64_t>(e.leaf_weights.size());
  const int64_t max_target =
      e.leaf_targets.empty() ? -1 : *std::max_element(e.leaf_targets.begin(), e.leaf_targets.end());
  e.n_targets = node.GetInt("n_targets", max_target + 1);
  if (e.n_targets < 1) return InvalidNode(node, "n_targets must be >= 1, got ", e.n_targets);
  for (size_t l = 0; l < e.leaf_targets.size(); ++l) {
    if (e.leaf_targets[l] < 0 || e.leaf_targets[l] >= e.n_targets) {
      return InvalidNode(node, "leaf_targetids[", l, "] = ", e.leaf_targets[l],
                         " is out of range 0..", e.n_targets - 1, " (n_targets)");
    }
  }
  const int64_t agg = node.GetInt("aggregate_function", 1);
  if (agg < 0 || agg > 3) {
    return InvalidNode(node, "aggregate_function must be 0..3 (AVERAGE, SUM, MIN, MAX), got ", agg);
  }
  e.aggregate = static_cast<Aggregate>(agg);
  const int64_t post = node.GetInt("post_transform", 0);
  if (post < 0 || post > 4) {
    return InvalidNode(node,
                       "post_transform must be 0..4 (NONE, SOFTMAX, LOGISTIC, "
                       "SOFTMAX_ZERO, PROBIT), got ",
                       post);
  }
  e.post = static_cast<PostTransform>(post);
  size_t next_member = 0;
  e.nodes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TreeNode& t = e.nodes[i];
    if (!(modes[i] >= 0 && modes[i] <= 6)) {
      return InvalidNode(node, "nodes_modes[", i, "] = ", modes[i], " is not a mode (0..6)");
    }
    t.mode = static_cast<Mode>(static_cast<int>(modes[i]));
    t.feature = features[i];
    if (t.feature < 0) return InvalidNode(node, "nodes_featureids[", i, "] is negative");
    t.split = splits[i];
    t.missing_tracks_true = !missing.empty() && missing[i] != 0;
    const int64_t ids[2] = {false_ids[i], true_ids[i]};
    const int64_t leafs[2] = {false_leafs[i], true_leafs[i]};
    for (int b = 0; b < 2; ++b) {
      t.is_leaf[b] = leafs[b] != 0;
      t.child[b] = ids[b];
      const int64_t bound = t.is_leaf[b] ? leaves : static_cast<int64_t>(n);
      if (ids[b] < 0 || ids[b] >= bound) {
        return InvalidNode(node, b ? "nodes_truenodeids[" : "nodes_falsenodeids[", i,
                           "] = ", ids[b], " is out of range for ", bound,
                           t.is_leaf[b] ? " leaves" : " nodes");
      }
    }
    if (t.mode == Mode::kMember) {
      // This node's set: the next run of membership_values up to a NaN (or the end).
      if (next_member >= members.size()) {
        return InvalidNode(node, "membership_values has no set for BRANCH_MEMBER node ", i);
      }
      while (next_member < members.size() && !std::isnan(members[next_member])) {
        t.members.push_back(members[next_member++]);
      }
      ++next_member;  // the NaN
      std::sort(t.members.begin(), t.members.end());
    }
  }
  if (next_member < members.size()) {
    return InvalidNode(node, "membership_values has more sets than BRANCH_MEMBER nodes");
  }
  if (e.roots.empty()) return InvalidNode(node, "tree_roots is empty");
  for (size_t r = 0; r < e.roots.size(); ++r) {
    if (e.roots[r] < 0 || e.roots[r] >= static_cast<int64_t>(n)) {
      return InvalidNode(node, "tree_roots[", r, "] = ", e.roots[r], " is out of range for ", n,
                         " nodes");
    }
  }
  RETURN_IF_ERROR(CheckAcyclic(node, e));
  return e;
}

bool TakesTrue(const TreeNode& t, double x) {
  if (std::isnan(x)) return t.missing_tracks_true;  // every comparison with NaN is false
  switch (t.mode) {
    case Mode::kLeq:
      return x <= t.split;
    case Mode::kLt:
      return x < t.split;
    case Mode::kGte:
      return x >= t.split;
    case Mode::kGt:
      return x > t.split;
    case Mode::kEq:
      return x == t.split;
    case Mode::kNeq:
      return x != t.split;
    case Mode::kMember:
      return std::binary_search(t.members.begin(), t.members.end(), x);
  }
  return false;
}

// The inverse of erf on (-1, 1): Newton steps on erf from a closed-form first guess.
double ErfInv(double y) {
  if (y <= -1) return -std::numeric_limits<double>::infinity();
  if (y >= 1) return std::numeric_limits<double>::infinity();
  // Winitzki's approximation (a = 0.147; 2 / (pi a) = 4.3307...), then Newton on erf.
  const double w = -std::log((1 - y) * (1 + y));
  const double t = 4.330746750799873 - w / 2;
  double x = std::copysign(std::sqrt(std::sqrt(t * t + w / 0.147) - t), y);
  for (int i = 0; i < 4; ++i) {
    const double err = std::erf(x) - y;
    x -= err / (2 / std::sqrt(M_PI) * std::exp(-x * x));
  }
  return x;
}

void ApplyPostTransform(PostTransform post, std::vector<double>& row) {
  switch (post) {
    case PostTransform::kNone:
      return;
    case PostTransform::kSoftmax:
    case PostTransform::kSoftmaxZero: {
      // SOFTMAX_ZERO keeps zeros at zero and leaves them out of the sum.
      const bool zero = post == PostTransform::kSoftmaxZero;
      double mx = -std::numeric_limits<double>::infinity();
      for (double v : row) mx = std::max(mx, v);
      double sum = 0;
      for (double& v : row) {
        v = zero && v == 0 ? 0 : std::exp(v - mx);
        sum += v;
      }
      for (double& v : row) v = sum > 0 ? v / sum : 0;
      return;
    }
    case PostTransform::kLogistic:
      for (double& v : row) v = 1 / (1 + std::exp(-v));
      return;
    case PostTransform::kProbit:
      for (double& v : row) v = std::sqrt(2.0) * ErfInv(2 * v - 1);
      return;
  }
}

class TreeEnsembleKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(Ensemble e, ReadEnsemble(node));
    return std::unique_ptr<Kernel>(new TreeEnsembleKernel(node, std::move(e)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    if (x->rank() != 2) {
      return InvalidNode(node_, "X must be [N, F], got shape ", ir::DimsToString(x->dims()));
    }
    const int64_t rows = x->dim(0), features = x->dim(1);
    for (size_t i = 0; i < e_.nodes.size(); ++i) {
      if (e_.nodes[i].feature >= features) {
        return InvalidNode(node_, "nodes_featureids[", i, "] = ", e_.nodes[i].feature,
                           " is out of range for X with ", features, " features");
      }
    }
    const DataType out_dtype = OutputDtype(node_, 0, x->dtype());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, out_dtype, {rows, e_.n_targets}));
    std::vector<double> xs(features), row(e_.n_targets);
    std::vector<char> touched(e_.n_targets);
    const double trees = static_cast<double>(e_.roots.size());
    return DispatchFloat(out_dtype, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      // MIN / MAX of a target no leaf reached: the dtype's extreme (as the ONNX reference).
      double dtype_max = static_cast<double>(std::numeric_limits<Compute<T>>::max());
      if constexpr (std::is_same_v<T, Float16>) dtype_max = 65504.0;
      if constexpr (std::is_same_v<T, BFloat16>) dtype_max = 3.3895313892515355e38;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t f = 0; f < features; ++f) xs[f] = ir::ElementAsDouble(*x, r * features + f);
        std::fill(row.begin(), row.end(), 0.0);
        std::fill(touched.begin(), touched.end(), 0);
        for (int64_t root : e_.roots) {
          int64_t id = root;
          int64_t leaf = -1;
          while (leaf < 0) {  // CheckAcyclic bounds the walk
            const TreeNode& t = e_.nodes[id];
            const int b = TakesTrue(t, xs[t.feature]) ? 1 : 0;
            if (t.is_leaf[b]) {
              leaf = t.child[b];
            } else {
              id = t.child[b];
            }
          }
          const int64_t target = e_.leaf_targets[leaf];
          const double w = e_.leaf_weights[leaf];
          double& acc = row[target];
          switch (e_.aggregate) {
            case Aggregate::kSum:
              acc += w;
              break;
            case Aggregate::kAverage:
              acc += w / trees;
              break;
            case Aggregate::kMin:
              acc = touched[target] ? std::min(acc, w) : w;
              break;
            case Aggregate::kMax:
              acc = touched[target] ? std::max(acc, w) : w;
              break;
          }
          touched[target] = 1;
        }
        for (int64_t k = 0; k < e_.n_targets; ++k) {
          if (touched[k]) continue;
          if (e_.aggregate == Aggregate::kMin) row[k] = dtype_max;
          if (e_.aggregate == Aggregate::kMax) row[k] = -dtype_max;
        }
        ApplyPostTransform(e_.post, row);
        T* dst = y->data<T>() + r * e_.n_targets;
        for (int64_t k = 0; k < e_.n_targets; ++k) dst[k] = Store<T>(row[k]);
      }
      return absl::OkStatus();
    });
  }

 private:
  TreeEnsembleKernel(const ir::Node& node, Ensemble e) : node_(node), e_(std::move(e)) {}
  const ir::Node& node_;
  Ensemble e_;
};

}  // namespace

void RegisterMlTreeEnsemble(Registry& r) {
  r.AddRef(ir::OpType::kTreeEnsemble, FloatTypes(), &TreeEnsembleKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
