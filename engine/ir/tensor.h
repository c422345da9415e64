// Dense tensors: dtype, dims and a 64-byte-aligned buffer that is either owned or borrowed
// (an arena slot, an mmapped engine blob). Copying a Tensor shares its storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/common/dtype.h"

namespace kiln::ir {

/// Number of elements of `dims` (1 for a scalar); -1 if a dim is negative or the product
/// overflows int64.
int64_t NumElementsOf(absl::Span<const int64_t> dims);

/// "[2,3,4]".
std::string DimsToString(absl::Span<const int64_t> dims);

/// What a run-time value is: a dense tensor (nearly always), an ONNX sequence of tensors
/// (seq(tensor)), or an ONNX optional without a value. An optional holding a value is that
/// tensor or sequence itself: the graph's ValueKind says the value is optional.
enum class TensorKind : uint8_t { kDense, kSequence, kNone };

/// Bytes a device holds (a buffer of the OpenCL backend, kernels/opencl): opaque to the IR and
/// to the CPU kernels, which never see such a tensor (the session copies it to the host first).
class DeviceStorage {
 public:
  virtual ~DeviceStorage() = default;
  /// The device, for messages ("NVIDIA H200 (OpenCL)").
  virtual std::string DeviceName() const = 0;
};

/// A dense tensor, or (kind() != kDense) a sequence of tensors or an empty optional. The buffer
/// is 64-byte aligned when allocated here.
///
/// Sequences and empty optionals have no buffer of their own (num_elements() 0, raw_data()
/// null), so code that walks the elements of a tensor does nothing with them; their dtype is the
/// element type. Their elements own (share) their storage, never an arena slot: a sequence
/// lives as long as any copy of it, across the nodes and iterations that pass it on.
class Tensor {
 public:
  Tensor() = default;

  /// A sequence of `elements` (each dense, of `elem_dtype`; the caller checks).
  static Tensor Sequence(DataType elem_dtype, std::vector<Tensor> elements);
  /// An optional without a value; `elem_dtype` is its element type (may be kUndefined).
  static Tensor None(DataType elem_dtype);

  TensorKind kind() const { return kind_; }
  bool is_sequence() const { return kind_ == TensorKind::kSequence; }
  bool is_none() const { return kind_ == TensorKind::kNone; }
  /// The elements of a sequence (empty for any other kind).
  const std::vector<Tensor>& elements() const;

  /// Allocates a zero-filled tensor. Fails on negative dims, overflow or more than `max_bytes`.
  static absl::StatusOr<Tensor> Allocate(DataType dtype, std::vector<int64_t> dims);
  /// As Allocate, without the zero fill: for a caller that writes every element.
  static absl::StatusOr<Tensor> AllocateUninitialized(DataType dtype, std::vector<int64_t> dims);

  /// A dense tensor whose bytes lie on a device: `storage` from byte `offset` on. raw_data() is
  /// null; only the device's kernels and the session's transfers read it.
  static Tensor OnDevice(DataType dtype, std::vector<int64_t> dims,
                         std::shared_ptr<DeviceStorage> storage, uint64_t offset = 0);
  bool on_device() const { return device_ != nullptr; }
  /// The device's storage (null for a host tensor) and where the tensor starts in it.
  DeviceStorage* device_storage() const { return device_.get(); }
  uint64_t device_offset() const { return device_offset_; }
  /// Wraps memory owned elsewhere; `keepalive` (may be null) keeps it valid.
  static Tensor Borrow(DataType dtype, std::vector<int64_t> dims, void* data,
                       std::shared_ptr<void> keepalive);

  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  int64_t num_elements() const { return num_elements_; }
  size_t byte_size() const { return static_cast<size_t>(num_elements_) * DataTypeSize(dtype_); }
  /// A value is present: a dense tensor with a dtype, a sequence or an empty optional.
  bool defined() const { return dtype_ != DataType::kUndefined || kind_ != TensorKind::kDense; }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  /// A deep copy with its own storage (of every element, for a sequence); a device tensor is
  /// shared instead (the session copies device bytes).
  Tensor Clone() const;

  /// Same storage, new dims with the same element count (caller checks).
  Tensor Reshaped(std::vector<int64_t> dims) const;

 private:
  DataType dtype_ = DataType::kUndefined;
  TensorKind kind_ = TensorKind::kDense;
  std::shared_ptr<const std::vector<Tensor>> elements_;  // kSequence only
  std::vector<int64_t> dims_;
  int64_t num_elements_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> storage_;
  std::shared_ptr<DeviceStorage> device_;  // a device tensor's bytes (data_ is null then)
  uint64_t device_offset_ = 0;
};

/// A copy of rank-4 `t` with its axes permuted NCHW -> NHWC (`to_channels_last`) or NHWC ->
/// NCHW: the layout change of passes/layout.h. Any fixed-size dtype.
absl::StatusOr<Tensor> ChannelsLastCopy(const Tensor& t, bool to_channels_last);

/// Reads element `i` of a numeric tensor as double (any dtype but string).
double ElementAsDouble(const Tensor& t, int64_t i);

/// Reads element `i` of an integer tensor (int32/int64/...) as int64.
int64_t ElementAsInt64(const Tensor& t, int64_t i);

}  // namespace kiln::ir
