// Fuzz harness: import::ParseNamedTensorProto, the reader behind `kiln run --inputs` (ONNX
// backend-test input_N.pb files) and the server's sample sets. A tensor that parses must survive
// SerializeTensorProto and a second parse unchanged (dtype, dims, bytes, name).
#include <cstring>
#include <string>

#include "engine/import/tensor_proto.h"
#include "tests/fuzz/harnesses.h"

namespace kiln::fuzz {

absl::Status TensorProtoOneInput(absl::string_view data) {
  auto named = import::ParseNamedTensorProto(data, "input 'fuzz'");
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(named.status(), "ParseNamedTensorProto"));
  auto plain = import::ParseTensorProto(data, "input 'fuzz'");
  KILN_FUZZ_EXPECT(plain.ok() == named.ok(), plain.status().ToString());
  if (!named.ok()) return absl::OkStatus();

  const ir::Tensor& t = named->second;
  KILN_FUZZ_EXPECT(t.num_elements() >= 0, "negative element count");
  if (t.dtype() == DataType::kString) return absl::OkStatus();
  auto again = import::SerializeTensorProto(t, named->first);
  KILN_FUZZ_RETURN_IF_ERROR(CheckClean(again.status(), "SerializeTensorProto"));
  if (!again.ok()) return absl::OkStatus();  // e.g. ResourceExhausted past 2 GiB
  auto back = import::ParseNamedTensorProto(*again, "round trip");
  KILN_FUZZ_EXPECT(back.ok(), back.status().ToString());
  const ir::Tensor& u = back->second;
  KILN_FUZZ_EXPECT(back->first == named->first, "name changed");
  KILN_FUZZ_EXPECT(u.dtype() == t.dtype(), "dtype changed");
  KILN_FUZZ_EXPECT(u.dims() == t.dims(), "dims changed");
  KILN_FUZZ_EXPECT(u.byte_size() == t.byte_size(), "size changed");
  KILN_FUZZ_EXPECT(
      t.byte_size() == 0 || std::memcmp(u.raw_data(), t.raw_data(), t.byte_size()) == 0,
      "bytes changed");
  return absl::OkStatus();
}

}  // namespace kiln::fuzz
