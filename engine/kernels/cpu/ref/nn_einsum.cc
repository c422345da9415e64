// Einsum: a general equation parser (explicit and implicit output, ellipsis broadcasting,
// repeated labels as diagonals, summed labels) evaluated as plain index loops over the full
// index space: the output index space outside, the summed labels inside.
#include <algorithm>
#include <string>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::ref::nn {
namespace {

constexpr int kLetters = 52;   // 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51 (ASCII order)
constexpr int kEllipsis = -1;  // term marker for "..."

struct Equation {
  std::vector<std::vector<int>> inputs;  // labels per input term (kEllipsis for "...")
  bool explicit_output = false;
  std::vector<int> output;
};

int LetterId(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  return -2;
}

absl::StatusOr<std::vector<int>> ParseTerm(const ir::Node& node, const std::string& term) {
  std::vector<int> labels;
  bool seen_ellipsis = false;
  for (size_t i = 0; i < term.size();) {
    if (term.compare(i, 3, "...") == 0) {
      if (seen_ellipsis) return InvalidNode(node, "term '", term, "' has two ellipses");
      seen_ellipsis = true;
      labels.push_back(kEllipsis);
      i += 3;
      continue;
    }
    const int id = LetterId(term[i]);
    if (id < 0)
      return InvalidNode(node, "invalid character '", std::string(1, term[i]),
                         "' in einsum equation");
    labels.push_back(id);
    ++i;
  }
  return labels;
}

absl::StatusOr<Equation> ParseEquation(const ir::Node& node, std::string eq) {
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](char c) { return c == ' '; }), eq.end());
  Equation e;
  std::string lhs = eq;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    e.explicit_output = true;
    ASSIGN_OR_RETURN(e.output, ParseTerm(node, eq.substr(arrow + 2)));
  }
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    ASSIGN_OR_RETURN(std::vector<int> t, ParseTerm(node, lhs.substr(start, comma - start)));
    e.inputs.push_back(std::move(t));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return e;
}

// a * b in accumulator type; narrow unsigned types are widened first because C++ would
// promote them to (signed) int, where the product can overflow.
template <typename A>
inline A Multiply(A a, A b) {
  if constexpr (std::is_integral_v<A> && sizeof(A) < sizeof(unsigned)) {
    return static_cast<A>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  } else {
    return a * b;
  }
}

class EinsumKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const ir::Attribute* a = node.attr("equation");
    if (a == nullptr) return InvalidNode(node, "attribute 'equation' is required");
    auto k = std::make_unique<EinsumKernel>(node);
    ASSIGN_OR_RETURN(k->eq_, ParseEquation(node, a->s));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit EinsumKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    const int n_in = static_cast<int>(eq_.inputs.size());
    if (ctx.num_inputs() != n_in) {
      return InvalidNode(node_, "equation has ", n_in, " operands but the node has ",
                         ctx.num_inputs(), " inputs");
    }
    std::vector<const ir::Tensor*> ins(n_in);
    for (int i = 0; i < n_in; ++i) {
      ASSIGN_OR_RETURN(ins[i], RequireInput(node_, ctx, i));
      if (ins[i]->dtype() != ins[0]->dtype()) {
        return InvalidNode(node_, "all inputs must have the same dtype");
      }
    }
    // Ellipsis dims of all operands broadcast together (right-aligned) into labels
    // kLetters .. kLetters + ell - 1.
    int ell = 0;
    std::vector<int> ell_rank(n_in, 0);
    for (int i = 0; i < n_in; ++i) {
      const auto& t = eq_.inputs[i];
      const int letters =
          static_cast<int>(std::count_if(t.begin(), t.end(), [](int l) { return l >= 0; }));
      const bool has_ell = letters != static_cast<int>(t.size());
      ell_rank[i] = ins[i]->rank() - letters;
      if (ell_rank[i] < 0 || (!has_ell && ell_rank[i] != 0)) {
        return InvalidNode(node_, "operand ", i, " of rank ", ins[i]->rank(),
                           " does not match its subscripts");
      }
      ell = std::max(ell, ell_rank[i]);
    }
    const int n_labels = kLetters + ell;
    std::vector<int64_t> size(n_labels, -1);
    std::vector<int> uses(n_labels, 0);
    // strides[i][label]: summed over repeated labels (a diagonal walk); 0 if absent/broadcast.
    std::vector<std::vector<int64_t>> strides(n_in, std::vector<int64_t>(n_labels, 0));
    for (int i = 0; i < n_in; ++i) {
      std::vector<int> dims_labels;
      for (int l : eq_.inputs[i]) {
        if (l != kEllipsis) {
          dims_labels.push_back(l);
          continue;
        }
        for (int j = 0; j < ell_rank[i]; ++j)
          dims_labels.push_back(kLetters + ell - ell_rank[i] + j);
      }
      const std::vector<int64_t> st = Strides(ins[i]->dims());
      for (int d = 0; d < ins[i]->rank(); ++d) {
        const int l = dims_labels[d];
        const int64_t dim = ins[i]->dim(d);
        ++uses[l];
        if (l >= kLetters) {  // ellipsis dim: numpy broadcasting
          if (dim == 1) {
            if (size[l] < 0) size[l] = 1;
            continue;  // stride stays 0
          }
          if (size[l] > 1 && size[l] != dim) {
            return InvalidNode(node_, "ellipsis dims of the operands cannot be broadcast");
          }
          size[l] = dim;
        } else if (size[l] >= 0 && size[l] != dim) {
          return InvalidNode(node_, "label '", LabelName(l), "' has sizes ", size[l], " and ", dim);
        } else {
          size[l] = dim;
        }
        strides[i][l] += st[d];
      }
    }
    std::vector<int> out_labels;
    if (eq_.explicit_output) {
      std::vector<bool> seen(n_labels, false);
      for (int l : eq_.output) {
        if (l == kEllipsis) {
          for (int j = 0; j < ell; ++j) out_labels.push_back(kLetters + j);
          continue;
        }
        if (size[l] < 0) {
          return InvalidNode(node_, "output label '", LabelName(l), "' is not in any input");
        }
        if (seen[l]) return InvalidNode(node_, "output label '", LabelName(l), "' repeats");
        seen[l] = true;
        out_labels.push_back(l);
      }
    } else {
      // Implicit output: broadcast ellipsis dims, then labels used once, in ASCII order.
      for (int j = 0; j < ell; ++j) out_labels.push_back(kLetters + j);
      for (int l = 0; l < kLetters; ++l) {
        if (uses[l] == 1) out_labels.push_back(l);
      }
    }
    std::vector<bool> in_out(n_labels, false);
    for (int l : out_labels) in_out[l] = true;
    std::vector<int> red_labels;
    for (int l = 0; l < n_labels; ++l) {
      if (size[l] >= 0 && !in_out[l]) red_labels.push_back(l);
    }
    std::vector<int64_t> out_dims;
    for (int l : out_labels) out_dims.push_back(size[l]);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, ins[0]->dtype(), out_dims));
    return DispatchAll(ins[0]->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        return InvalidNode(node_, "unsupported dtype bool");
      } else {
        Evaluate<T>(ins, size, strides, out_labels, red_labels, y->data<T>(), y->num_elements());
        return absl::OkStatus();
      }
    });
  }

 private:
  static std::string LabelName(int l) {
    if (l >= kLetters) return "...";
    return std::string(1, l < 26 ? static_cast<char>('A' + l) : static_cast<char>('a' + l - 26));
  }

  template <typename T>
  static void Evaluate(const std::vector<const ir::Tensor*>& ins, const std::vector<int64_t>& size,
                       const std::vector<std::vector<int64_t>>& strides,
                       const std::vector<int>& out_labels, const std::vector<int>& red_labels, T* y,
                       int64_t y_count) {
    using A = Acc<T>;
    const int n_in = static_cast<int>(ins.size());
    std::vector<std::vector<A>> bufs(n_in);
    std::vector<const A*> data(n_in);
    for (int i = 0; i < n_in; ++i) {
      data[i] = AccData(ins[i]->data<T>(), ins[i]->num_elements(), bufs[i]);
    }
    int64_t red_count = 1;
    for (int l : red_labels) red_count *= size[l];
    const int no = static_cast<int>(out_labels.size()), nr = static_cast<int>(red_labels.size());
    std::vector<int64_t> oidx(no, 0), ridx(nr, 0);
    std::vector<int64_t> base(n_in, 0), off(n_in);
    for (int64_t p = 0; p < y_count; ++p) {
      A sum = 0;
      off = base;
      std::fill(ridx.begin(), ridx.end(), 0);
      for (int64_t r = 0; r < red_count; ++r) {
        A prod = data[0][off[0]];
        for (int i = 1; i < n_in; ++i) prod = Multiply(prod, data[i][off[i]]);
        sum += prod;
        // Advance the summed-label odometer, moving every operand's offset with it.
        for (int d = nr - 1; d >= 0; --d) {
          const int l = red_labels[d];
          for (int i = 0; i < n_in; ++i) off[i] += strides[i][l];
          if (++ridx[d] < size[l]) break;
          for (int i = 0; i < n_in; ++i) off[i] -= size[l] * strides[i][l];
          ridx[d] = 0;
        }
      }
      y[p] = Store<T>(sum);
      for (int d = no - 1; d >= 0; --d) {
        const int l = out_labels[d];
        for (int i = 0; i < n_in; ++i) base[i] += strides[i][l];
        if (++oidx[d] < size[l]) break;
        for (int i = 0; i < n_in; ++i) base[i] -= size[l] * strides[i][l];
        oidx[d] = 0;
      }
    }
  }

  const ir::Node& node_;
  Equation eq_;
};

}  // namespace

void RegisterEinsum(Registry& r) {
  r.AddRef(ir::OpType::kEinsum, NumericTypes(), &EinsumKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref::nn
