// What the OpenCL kernels that work row by row share (norm_ops.cc: Softmax, LayerNormalization,
// reductions, pools; norm_fused.cc: AddLayerNorm, RMSNormalization): the work-group fold in
// OpenCL C, the group size and launch of one work-group per row, a node's program cache, the
// broadcast of a parameter along rows, and the labels and errors of the node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/graph.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/opencl/kernel_base.h"

namespace kiln::kernels::opencl {

/// The largest work-group of the row kernels (their programs' local arrays hold this many
/// floats: `__local float s[256]`).
inline constexpr size_t kMaxLocal = 256;

/// OpenCL C for the fold of a work-group: GROUP_FOLD(NAME, COMB) defines
/// `float NAME(__local float* s, float v)`, which folds each item's v in item order (round h
/// folds item l, a multiple of 2h, with item l + h, so every partial covers consecutive runs)
/// and returns the result to every item; SUM(a, b) is a + b; `chunk(n)` is the item's run
/// [x, y) of n elements, consecutive runs for consecutive items.
extern const char kGroupFold[];

/// An Unimplemented error "<node label> <why> (OpenCL)": what this backend does not do.
absl::Status Unsupported(const ir::Node& n, const std::string& why);

/// An error unless the device stores `dt` (a float type other than f64): the placement pass
/// keeps such nodes on the CPU (`supports`); this is for a node run here anyway. `what` names
/// the operand in the message.
absl::Status CheckStored(const ir::Node& n, DataType dt, const char* what);

/// The reference's stash_type check (an error unless it is a float type) and this backend's
/// (fp32 statistics only), for LayerNormalization and RMSNormalization.
absl::Status CheckFp32Stash(const ir::Node& n);

/// A power of two items per group, no more than rows of n need, kMaxLocal or the device allows
/// for `k`.
size_t GroupSize(Device& dev, cl_kernel k, uint64_t n);

/// Queues `k` over `groups` work-groups of `local` items (nothing for no group).
absl::Status LaunchGroups(Device& dev, cl_kernel k, uint64_t groups, size_t local,
                          const std::string& what);

/// Queues `k` over one work-group per row: `rows` rows of n (nothing when either is 0), with
/// GroupSize(dev, k, n) items per group.
absl::Status LaunchRows(Device& dev, cl_kernel k, uint64_t rows, uint64_t n,
                        const std::string& what);

/// The period along a row of a parameter of dims `p` that repeats along it: its dims, leading 1s
/// dropped, are the trailing dims of X (dims `x`) from `axis` on; the period is p's element
/// count. nullopt for any other broadcast.
std::optional<int64_t> SuffixPeriod(const std::vector<int64_t>& p, const std::vector<int64_t>& x,
                                    int axis);

/// The period (at least 1) along rows of X (dims `x_dims`, normalised from `axis`) of scale or
/// bias `p` named `name`, which the reference's checks passed; 1 for an absent one. Errors: a
/// type the device does not store (CheckStored), or a `p` that does not repeat along rows
/// (SuffixPeriod), Unsupported.
absl::StatusOr<cl_ulong> ParamPeriod(const ir::Node& node, const ir::Tensor* p,
                                     const std::vector<int64_t>& x_dims, int axis,
                                     const char* name);

/// A node's programs, by key (storage types) and entry point, each built at its first use.
class Programs {
 public:
  /// Function `entry` of the program `source()` (called only at the first use of key and entry)
  /// on `dev`.
  absl::StatusOr<cl_kernel> Get(const std::shared_ptr<Device>& dev, const std::string& what,
                                const std::string& key, const char* entry,
                                const std::function<std::string()>& source);

 private:
  std::map<std::string, std::unique_ptr<ClFunction>> fns_;
};

/// A kernel of one node, with that node's programs.
class NodeKernel : public Kernel {
 protected:
  explicit NodeKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
  Programs programs_;
};

}  // namespace kiln::kernels::opencl
