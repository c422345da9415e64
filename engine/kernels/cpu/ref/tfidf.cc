// Reference kernel of TfIdfVectorizer on integer input ([C] or [B, C] of int32/int64): counts,
// per row, the n-grams of the pool (pool_int64s) that occur in the row, with skips, then weighs
// the counts (TF, IDF or TFIDF). Kiln has no string tensors: a pool_strings node fails naming
// the node.
//
// The pool lists the n-grams by length: ngram_counts[i] is where the (i+1)-grams start, and
// n-gram k (0-based, in pool order over all lengths) counts into output column ngram_indexes[k].
// A row counts each unigram at every position once, and each n-gram of length 2.. at every
// start and every skip s in 0..max_skip_count (its items s + 1 apart), for the lengths in
// [min_gram_length, max_gram_length].
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

enum class Weighting { kTf, kIdf, kTfIdf };

struct TfIdfParams {
  Weighting mode;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  int64_t output_size = 0;
  std::vector<float> weights;                                  // per output column, or empty
  absl::flat_hash_map<std::vector<int64_t>, int64_t> columns;  // n-gram -> output column
};

absl::StatusOr<TfIdfParams> ReadTfIdf(const ir::Node& node) {
  if (node.has_attr("pool_strings")) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(),
                     " unsupported dtype string: attribute 'pool_strings' holds strings, and "
                     "Kiln has no string tensors"));
  }
  TfIdfParams p;
  const std::string mode = node.GetString("mode", "");
  if (mode == "TF") {
    p.mode = Weighting::kTf;
  } else if (mode == "IDF") {
    p.mode = Weighting::kIdf;
  } else if (mode == "TFIDF") {
    p.mode = Weighting::kTfIdf;
  } else {
    return InvalidNode(node, "mode must be 'TF', 'IDF' or 'TFIDF', got '", mode, "'");
  }
  p.min_gram = node.GetInt("min_gram_length", 0);
  p.max_gram = node.GetInt("max_gram_length", 0);
  p.max_skip = node.GetInt("max_skip_count", 0);
  if (p.min_gram < 1 || p.max_gram < p.min_gram) {
    return InvalidNode(node, "needs 1 <= min_gram_length <= max_gram_length, got ", p.min_gram,
                       " and ", p.max_gram);
  }
  if (p.max_skip < 0) return InvalidNode(node, "max_skip_count must be >= 0, got ", p.max_skip);
  const std::vector<int64_t> pool = node.GetInts("pool_int64s");
  const std::vector<int64_t> counts = node.GetInts("ngram_counts");
  const std::vector<int64_t> indexes = node.GetInts("ngram_indexes");
  p.weights = node.GetFloats("weights");
  const int64_t total = static_cast<int64_t>(pool.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0 || counts[i] > total || (i > 0 && counts[i] < counts[i - 1])) {
      return InvalidNode(node, "ngram_counts must be non-decreasing offsets into the pool of ",
                         total, " items; ngram_counts[", i, "] = ", counts[i]);
    }
  }
  if (indexes.empty()) return InvalidNode(node, "ngram_indexes is empty");
  for (size_t k = 0; k < indexes.size(); ++k) {
    if (indexes[k] < 0) return InvalidNode(node, "ngram_indexes[", k, "] is negative");
    p.output_size = std::max(p.output_size, indexes[k] + 1);
  }
  if (!p.weights.empty() && static_cast<int64_t>(p.weights.size()) < p.output_size) {
    return InvalidNode(node, "weights has ", p.weights.size(), " entries for ", p.output_size,
                       " output columns");
  }
  int64_t ngram = 0;  // pool-order number of the next n-gram
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1;
    const int64_t begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    const int64_t grams = (end - begin) / n;
    for (int64_t g = 0; g < grams; ++g, ++ngram) {
      if (n < p.min_gram || n > p.max_gram) continue;
      if (ngram >= static_cast<int64_t>(indexes.size())) {
        return InvalidNode(node, "ngram_indexes has ", indexes.size(),
                           " entries but the pool holds more n-grams");
      }
      std::vector<int64_t> key(pool.begin() + begin + g * n, pool.begin() + begin + (g + 1) * n);
      p.columns[key] = indexes[ngram];  // a repeated n-gram counts into its last column
    }
  }
  return p;
}

class TfIdfKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(TfIdfParams p, ReadTfIdf(node));
    return std::unique_ptr<Kernel>(new TfIdfKernel(node, std::move(p)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    if (x->dtype() != DataType::kI64 && x->dtype() != DataType::kI32) {
      return InvalidNode(node_, "X must be int32 or int64, got ", DataTypeOnnxName(x->dtype()));
    }
    if (x->rank() > 2) {
      return InvalidNode(node_, "X must be [C] or [B, C], got ", ir::DimsToString(x->dims()));
    }
    const bool batched = x->rank() == 2;
    const int64_t rows = batched ? x->dim(0) : 1;
    const int64_t c = x->rank() == 0 ? 1 : x->dims().back();
    std::vector<int64_t> dims = {p_.output_size};
    if (batched) dims.insert(dims.begin(), rows);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, OutputDtype(node_, 0, DataType::kF32), dims));
    std::vector<int64_t> freq(rows * p_.output_size, 0);
    std::vector<int64_t> key;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t* f = freq.data() + r * p_.output_size;
      for (int64_t n = p_.min_gram; n <= p_.max_gram; ++n) {
        // Unigrams once per position; longer n-grams once per skip.
        const int64_t skips = n == 1 ? 0 : p_.max_skip;
        for (int64_t s = 0; s <= skips; ++s) {
          for (int64_t start = 0; start + (n - 1) * (s + 1) < c; ++start) {
            key.clear();
            for (int64_t j = 0; j < n; ++j) {
              key.push_back(ir::ElementAsInt64(*x, r * c + start + j * (s + 1)));
            }
            auto it = p_.columns.find(key);
            if (it != p_.columns.end()) ++f[it->second];
          }
        }
      }
    }
    return DispatchFloat(y->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T* dst = y->data<T>();
      for (int64_t i = 0; i < rows * p_.output_size; ++i) {
        const int64_t col = i % p_.output_size;
        const double w = p_.weights.empty() ? 1.0 : p_.weights[col];
        double v = 0;
        switch (p_.mode) {
          case Weighting::kTf:
            v = static_cast<double>(freq[i]);
            break;
          case Weighting::kIdf:
            v = freq[i] > 0 ? w : 0;
            break;
          case Weighting::kTfIdf:
            v = w * static_cast<double>(freq[i]);
            break;
        }
        dst[i] = Store<T>(v);
      }
      return absl::OkStatus();
    });
  }

 private:
  TfIdfKernel(const ir::Node& node, TfIdfParams p) : node_(node), p_(std::move(p)) {}
  const ir::Node& node_;
  TfIdfParams p_;
};

}  // namespace

void RegisterTfIdf(Registry& r) {
  r.AddRef(ir::OpType::kTfIdfVectorizer, {DataType::kI32, DataType::kI64}, &TfIdfKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
